"""Latency statistics of the profiled requests (a job's times and duration: :mod:`vllm_ops.job`)."""

from __future__ import annotations

import math
from numbers import Real

from .errors import CampaignInputError

STAT_KEYS = ("count", "mean", "p50", "p90", "p99", "min", "max")


def percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, ``statistics.quantiles``
    with ``method='inclusive'``) on an ascending, non-empty list; ``q`` in [0, 1]."""
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def latency_stats(samples: object, digits: int = 3) -> dict:
    """Per-request latencies in ms (TTFT or TPOT) -> ``{count, mean, p50, p90, p99, min, max}``.

    Values are rounded to ``digits`` decimals (µs by default). An empty list gives
    ``count: 0`` and None for the rest. Anything but finite, non-negative numbers is refused.
    """
    if isinstance(samples, (str, bytes)) or not isinstance(samples, (list, tuple)):
        raise CampaignInputError(f"expected a list of latencies in ms, got {type(samples).__name__}")
    values: list[float] = []
    for i, v in enumerate(samples):
        if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(v) or v < 0:
            raise CampaignInputError(f"latency #{i} is {v!r}; expected a finite number of ms >= 0")
        values.append(float(v))
    if not values:
        return dict.fromkeys(STAT_KEYS) | {"count": 0}
    values.sort()
    stats = {
        "mean": math.fsum(values) / len(values),
        "p50": percentile(values, 0.50), "p90": percentile(values, 0.90), "p99": percentile(values, 0.99),
        "min": values[0], "max": values[-1],
    }
    return {"count": len(values)} | {k: round(v, digits) for k, v in stats.items()}
