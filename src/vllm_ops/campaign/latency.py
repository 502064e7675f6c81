"""Latency statistics of the profiled requests, and a campaign's duration in words."""

from __future__ import annotations

import math
from datetime import UTC, datetime
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


def parse_time(value: object, what: str = "time") -> datetime:
    """An ISO 8601 time with a zone (``...Z`` or ``+00:00``) or a Unix epoch -> aware UTC datetime."""
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, Real) and not isinstance(value, bool):
        when = datetime.fromtimestamp(float(value), tz=UTC)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            try:
                when = datetime.fromtimestamp(float(text), tz=UTC)
            except (ValueError, OverflowError):
                raise CampaignInputError(f"{what}: not an ISO 8601 time or epoch: {value!r}") from None
    else:
        raise CampaignInputError(f"{what}: expected an ISO 8601 time or epoch seconds, got {value!r}")
    if when.tzinfo is None:
        raise CampaignInputError(f"{what}: {value!r} has no time zone; give UTC, e.g. 2025-01-31T12:00:00Z")
    return when.astimezone(UTC)


def iso_utc(value: object, what: str = "time") -> str:
    """Any time :func:`parse_time` accepts -> ``YYYY-MM-DDTHH:MM:SSZ``."""
    return parse_time(value, what).strftime("%Y-%m-%dT%H:%M:%SZ")


def duration(started_at: object, finished_at: object) -> str:
    """How long a campaign took, in words: ``"12 min 5 s"``, ``"1 h 2 min 5 s"``, ``"42 s"``."""
    seconds = (parse_time(finished_at, "finished_at") - parse_time(started_at, "started_at")).total_seconds()
    if seconds < 0:
        raise CampaignInputError(f"finished_at ({finished_at}) is before started_at ({started_at})")
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    parts = ([f"{hours} h"] if hours else []) + ([f"{minutes} min"] if hours or minutes else []) + [f"{secs} s"]
    return " ".join(parts)
