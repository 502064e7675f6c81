"""How much room a campaign's traces will take on the host, estimated before the capture.

The traces grow with the engine steps captured and the ranks. A capture of ``requests``
requests, ``concurrency`` at a time, each of ``output_tokens`` tokens, runs about
``ceil(requests / concurrency) * (output_tokens + 1)`` steps (a prefill, then one decode step
per token, for each batch). The bytes per step and rank come from the host's last campaign
(its ``campaign.json``: the traces' sizes and the load that made them, through the same
formula), else from :data:`DEFAULT_BYTES_PER_STEP`. The estimate is that times the steps,
the ranks and :data:`MARGIN`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .errors import CampaignInputError

__all__ = ["DEFAULT_BYTES_PER_STEP", "MARGIN", "captured_steps", "estimate"]

# Used until the host has a campaign of its own: deliberately high. The project's real H200
# trace of a toy TP-2 decoder holds about 60 KB (gzip) per step and rank; a Kimi-K2.5 step at
# TP 8 launches many more kernels (61 layers of MoE), so the guess is 1 MiB.
DEFAULT_BYTES_PER_STEP = 1 << 20
# Room asked for beyond the estimate: steps vary with the scheduler, files with the kernels.
MARGIN = 1.5


def captured_steps(requests: int, concurrency: int, output_tokens: int) -> int:
    """Engine steps of a capture: per batch of ``concurrency`` requests a prefill and one decode
    step per output token."""
    for name, value in (("requests", requests), ("concurrency", concurrency), ("output_tokens", output_tokens)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise CampaignInputError(f"{name} must be a positive integer, got {value!r}")
    return math.ceil(requests / concurrency) * (output_tokens + 1)


def estimate(last: Mapping | None, *, requests: int, concurrency: int, output_tokens: int, ranks: int) -> dict:
    """``{bytes, mib, bytes_per_step, steps, ranks, source}`` for the next capture; ``last`` is the
    host's previous ``campaign.json`` (or None)."""
    steps = captured_steps(requests, concurrency, output_tokens)
    per_step, source = DEFAULT_BYTES_PER_STEP, "default (no earlier campaign on this host)"
    if last:
        try:
            traces = last["traces"]
            load = last["load"]
            total = sum(int(t["bytes"]) for t in traces)
            last_steps = captured_steps(int(load["requests"]), int(load["concurrency"]), int(load["output_tokens"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CampaignInputError(f"the last campaign's record lacks its traces or load: {exc!r}") from None
        if traces and total > 0:
            per_step = math.ceil(total / len(traces) / last_steps)
            source = f"campaign {last.get('id', '?')}: {total} bytes over {len(traces)} rank(s), {last_steps} steps"
    nbytes = math.ceil(per_step * steps * ranks * MARGIN)
    return {"bytes": nbytes, "mib": math.ceil(nbytes / (1 << 20)), "bytes_per_step": per_step, "steps": steps,
            "ranks": ranks, "source": source}
