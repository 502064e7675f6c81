"""The one adapter between a trace summary (:func:`vllm_ops.traces.summary.summarize`'s dict, or
its JSON) and the ledger: the summary's schema grows, and only this module knows its fields.

Read, per rank (``ranks[]``): ``rank``, ``device``, ``gpu_time_measured``; ``decomposition``
(the mean steady decode step, whose parts add up to its period): ``steps``, ``period_ms``,
``compute_ms`` (by kernel category), ``allreduce_transfer_ms``, ``allreduce_wait_ms``,
``idle_in_window_ms``, ``host_ms``; ``steps[]`` (the steps the decomposition averages: ``phase``
decode, ``steady``, with a ``period_ms`` and a ``window_ms``): ``scheduled_tokens``, else
``batch_size`` (B, the tokens of the step), and
``key_tokens`` (the sum of the decode requests' context lengths, from the detailed annotation's
``sk``; None where the annotation does not give it); ``allreduce_calls_per_step`` where no
collective group names the rank; ``graph_launches_without_activity`` (the rank's graph launches
whose kernels the trace lacks). Across ranks: ``collectives.groups[]`` (``ranks``, ``size``,
``calls_per_step``, ``message_bytes.median``: the group with the most calls that holds the rank),
``context.tensor_parallel_size`` (else ``world_size``), and, only for a summary written before the
ranks carried ``graph_launches_without_activity``, the verdict's ``reason`` when it says that
graph launches have no recorded kernels.

:func:`ledger_inputs` returns ``{tensor_parallel_size, ranks: [...]}``, each rank
``{rank, device, measured, why, steps, period_ms, compute_ms, allreduce_transfer_ms,
allreduce_wait_ms, idle_ms, host_ms, allreduce: {calls_per_step, message_bytes, group_size} or
None, tokens: [...], key_tokens: [...], graph_kernels_missing}``; a figure the summary lacks is
None, never zero.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..records.summary import checked

# The verdict's reason when graph launches have no recorded kernels (traces/findings.py); read
# only for a summary written before the ranks carried graph_launches_without_activity.
GRAPH_REASON = "CUDA graph launches without recorded kernels"


def ledger_inputs(summary: Mapping) -> dict:
    """The ledger's inputs from a trace summary (see the module's docstring)."""
    summary = checked(summary)
    tp = (summary.get("context") or {}).get("tensor_parallel_size") or summary.get("world_size")
    groups = ((summary.get("collectives") or {}).get("groups")) or []
    reason = (summary.get("verdict") or {}).get("reason") or ""
    graphs_missing = GRAPH_REASON in reason
    return {"tensor_parallel_size": tp if isinstance(tp, int) and tp > 0 else None,
            "ranks": [_rank(r, groups, graphs_missing) for r in summary["ranks"]]}


def _rank(r: Mapping, groups: list, graphs_missing: bool) -> dict:
    d = r.get("decomposition") or {}
    steady = [s for s in r.get("steps") or [] if s.get("phase") == "decode" and s.get("steady")
              and s.get("period_ms") is not None and s.get("window_ms") is not None]
    missing = r.get("graph_launches_without_activity")
    out = {
        "rank": r.get("rank"), "device": r.get("device"), "measured": bool(d) and r.get("gpu_time_measured", True),
        "why": None, "steps": d.get("steps"), "period_ms": d.get("period_ms"),
        "compute_ms": dict(d.get("compute_ms") or {}), "allreduce_transfer_ms": d.get("allreduce_transfer_ms"),
        "allreduce_wait_ms": d.get("allreduce_wait_ms"), "idle_ms": d.get("idle_in_window_ms"),
        "host_ms": d.get("host_ms"), "allreduce": _allreduce(r, groups),
        "tokens": [s.get("scheduled_tokens") or s.get("batch_size") for s in steady],
        "key_tokens": [s.get("key_tokens") for s in steady],
        "graph_kernels_missing": bool(missing) if missing is not None else graphs_missing,
    }
    if not r.get("gpu_time_measured", True):
        out["why"] = "no GPU kernel events in the rank's trace"
    elif not d:
        out["why"] = "no steady decode step with GPU activity (the summary has no decomposition)"
    return out


def _allreduce(r: Mapping, groups: list) -> dict | None:
    mine = [g for g in groups if r.get("rank") in (g.get("ranks") or [])]
    if mine:
        g = max(mine, key=lambda g: g.get("calls") or 0)
        return {"calls_per_step": g.get("calls_per_step"),
                "message_bytes": (g.get("message_bytes") or {}).get("median"), "group_size": g.get("size")}
    calls = r.get("allreduce_calls_per_step")
    if calls:
        return {"calls_per_step": calls, "message_bytes": None, "group_size": None}
    return None
