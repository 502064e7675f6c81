"""The step tables across ranks: each rank's step rows with the all-reduce split of
:mod:`.collectives` and the steady state of :mod:`.steady` (:func:`entry`), and the mean steady decode
step split into parts that add up to its period (:func:`decomposition`)."""

from __future__ import annotations

from collections.abc import Mapping

from . import intensity, legacy, phases, steady
from .annotations import DECODE
from .categories import ALLREDUCE

__all__ = ["STEP_FIGURES", "by_batch_size", "decomposition", "entry", "exposed_allreduce", "measured"]

STEP_FIGURES = ("period_ms", "window_ms", "busy_ms", "idle_ms", "idle_host_ms", "host_ms", "cpu_ms",
                "allreduce_kernel_ms", "allreduce_transfer_ms", "allreduce_wait_ms")


def measured(r: Mapping) -> bool:
    """Whether the rank's trace holds GPU kernel events, so that its GPU time is a measurement."""
    return r["gpu_kernels"] > 0


def entry(r: dict, left: Mapping[int, str], per_step: Mapping[int, tuple[float, float]]) -> dict:
    """One rank's entry of the summary (``ranks[]``): its step rows with the all-reduce split per step
    (``per_step``: step -> (transfer, waiting) µs, :func:`.collectives.match`) and the steady state
    (``left``: step -> why it was left out), their statistics, the decomposition and the figures of
    earlier versions (:mod:`.legacy`)."""
    st = r["set"]
    rows = [dict(s) for s in st["steps"]]
    is_measured = measured(r)
    for s in rows:
        t, w = per_step.get(s["index"], (None, None))
        if is_measured:
            s["allreduce_transfer_ms"] = round(t / 1000.0, 4) if t is not None else (0.0 if not s["allreduce_calls"]
                                                                                    else None)
            s["allreduce_wait_ms"] = round(w / 1000.0, 4) if w is not None else (0.0 if not s["allreduce_calls"]
                                                                                else None)
        else:
            for k in ("window_ms", "busy_ms", "idle_ms", "idle_host_ms", "host_ms", "kernel_ms",
                      "allreduce_kernel_ms"):
                s[k] = None
            s["busy_ms_by_category"], s["kernel_ms_by_category"] = {}, {}
            s["allreduce_transfer_ms"] = s["allreduce_wait_ms"] = None
        s["steady"] = s["phase"] == DECODE and s["index"] not in left
        s["left_out"] = left.get(s["index"]) if s["phase"] == DECODE else None
    decode = [s for s in rows if s["phase"] == DECODE]
    steady_rows = [s for s in decode if s["steady"]]
    averaged = steady.averaged(steady_rows, is_measured)
    out = {
        "rank": r["rank"], "file": r["file"], "parser": r["parser"], "rank_from": r["rank_from"],
        "device": r["device"], "gpu_kernels": r["gpu_kernels"], "gpu_time_measured": is_measured,
        "graph_launches": r["graph_launches"], "graph_launches_without_activity": r["graph_launches_without_activity"],
        "decode_steps": len(decode), "steady_steps": len(steady_rows) if decode else None,
        "steps_from": st["steps_from"] if rows else None,
        "timeline": r["timeline"] if is_measured else None,
        "step_stats": {k: steady.stats(s.get(k) for s in decode) for k in STEP_FIGURES} if decode else {},
        "steady_stats": {k: steady.stats(s.get(k) for s in averaged) for k in STEP_FIGURES} if decode else {},
        "decomposition": decomposition(averaged) if is_measured else None,
        "gemm_intensity": intensity.gemm_bound(averaged, r["device"]) if is_measured else None,
        "by_batch_size": by_batch_size(decode),
        "phases": phases.split(rows),
        "steps": rows,
    }
    out.update(legacy.figures(r, decode, is_measured, "decode"))
    return out


def exposed_allreduce(step: Mapping) -> tuple[float, float]:
    """A step's exposed all-reduce time (busy time when only all-reduce ran) split into
    (transfer, waiting) in proportion to its calls' transfer and waiting (ms); all of it is
    transfer where nothing was matched across ranks."""
    exposed = (step.get("busy_ms_by_category") or {}).get(ALLREDUCE, 0.0)
    t, w = step.get("allreduce_transfer_ms") or 0.0, step.get("allreduce_wait_ms") or 0.0
    return (exposed * t / (t + w), exposed * w / (t + w)) if t + w > 0 else (exposed, 0.0)


def decomposition(rows: list[dict]) -> dict | None:
    """The mean steady decode step, split so that the parts add up to its period (ms):
    compute busy by category, exposed all-reduce split into transfer and waiting in
    proportion to the steps' all-reduce kernel time, GPU idle inside the window, and the
    period's time outside the window. Over the steady decode steps that have a period. Where a
    step's waiting is unknown (one rank of a group), ``allreduce_told_apart`` is false, the
    transfer holds the exposed all-reduce whole and ``allreduce_wait_ms`` is null."""
    rows = [s for s in rows if s.get("period_ms") is not None and s.get("window_ms") is not None]
    if not rows:
        return None
    n = len(rows)
    # one rank of a group (collectives: told_apart false): waiting cannot be told from transfer
    told = not any(s.get("allreduce_calls") and s.get("allreduce_wait_ms") is None for s in rows)
    compute: dict[str, float] = {}
    transfer = wait = 0.0
    for s in rows:
        for cat, ms in s["busy_ms_by_category"].items():
            if cat != ALLREDUCE:
                compute[cat] = compute.get(cat, 0.0) + ms
        t, w = exposed_allreduce(s)
        transfer += t
        wait += w
    idle_host = [s["idle_host_ms"] for s in rows if s.get("idle_host_ms") is not None]
    idle = sum(s["idle_ms"] for s in rows) / n
    out = {
        "steps": n,
        "period_ms": round(sum(s["period_ms"] for s in rows) / n, 4),
        "busy_ms": round(sum(s["busy_ms"] for s in rows) / n, 4),
        "compute_ms": {c: round(v / n, 4) for c, v in compute.items()},
        "allreduce_transfer_ms": round(transfer / n, 4),
        "allreduce_wait_ms": round(wait / n, 4) if told else None,
        "allreduce_told_apart": told,
        "idle_in_window_ms": round(idle, 4),
        "host_ms": round(sum(s["host_ms"] for s in rows) / n, 4),
        "idle_host_share": round(sum(idle_host) / n / idle, 4) if idle > 0 and len(idle_host) == n else None,
    }
    return out


def by_batch_size(decode: list[dict]) -> dict:
    groups: dict[str, list[dict]] = {}
    for s in decode:
        groups.setdefault(str(s["batch_size"]) if s["batch_size"] is not None else "unknown", []).append(s)
    return {bs: {"steps": len(rows), "steady_steps": sum(1 for s in rows if s["steady"]),
                 **{k: (steady.stats(s.get(k) for s in rows if s["steady"]) or {}).get("median")
                    for k in ("period_ms", "busy_ms", "idle_ms", "allreduce_transfer_ms", "allreduce_wait_ms")}}
            for bs, rows in sorted(groups.items(), key=lambda kv: (kv[0] == "unknown", int(kv[0]) if kv[0].isdigit()
                                                                   else 0))}
