"""The figures of earlier versions, kept with their meaning unchanged: per rank kernel-time sums per
step of a phase (:func:`figures`; they include waiting inside collectives and double-count overlapping
streams), the prefill's (:func:`phase`), and ``allreduce`` across ranks (:func:`allreduce`)."""

from __future__ import annotations

from statistics import fmean

from .annotations import DECODE
from .notes import Note, note

__all__ = ["allreduce", "figures", "phase"]


def figures(r: dict, steps: list[dict], measured: bool, phase: str) -> dict:
    """The figures of earlier versions (kernel-time sums over every step of ``phase``)."""
    n = len(steps)
    has_time = n > 0 and measured
    cuda = sum(s["kernel_ms"] or 0.0 for s in steps) if has_time else None
    cats: dict[str, float] = dict.fromkeys(r["categories"], 0.0) if has_time else {}
    for s in steps if has_time else []:
        for c, ms in s["kernel_ms_by_category"].items():
            cats[c] = cats.get(c, 0.0) + ms
    ar = sum(s["allreduce_kernel_ms"] or 0.0 for s in steps) if has_time else None
    calls = r["set"]["calls"]
    nccl_ms = None
    if has_time and calls is not None:
        idx = {s["index"] for s in steps}
        nccl_ms = sum(d for st_, d, is_n in zip(calls["step"].tolist(), calls["dur"].tolist(), calls["nccl"],
                                               strict=True) if is_n and st_ in idx) / 1000.0
    wall = [s["span_ms"] for s in steps]

    def per_step(ms):
        return round(ms / n, 4) if has_time and ms is not None else None

    def share(ms):
        return round(ms / cuda, 4) if has_time and ms is not None and cuda else None

    top = r["set"]["top"].get(phase, []) if has_time else []
    return {
        "cuda_ms_per_step": per_step(cuda),
        "step_wall_ms_per_step": round(sum(wall) / len(wall), 4) if wall else None,
        "categories": {c: {"ms_per_step": per_step(ms), "share": share(ms)} for c, ms in cats.items()},
        "top_kernels": [{"name": name, "category": cat, "ms_per_step": round(us / 1000.0 / n, 4),
                         "calls_per_step": round(k / n, 3)} for name, cat, us, k in top],
        "allreduce_ms_per_step": per_step(ar),
        "allreduce_share": share(ar),
        "allreduce_nccl_ms_per_step": per_step(nccl_ms),
        "allreduce_calls_per_step": round(sum(s["allreduce_calls"] for s in steps) / n, 3) if has_time else None,
    }


def phase(r: dict, entry: dict, phase: str) -> dict:
    """A rank's figures of earlier versions over its steps of ``phase`` (the summary's ``prefill[]``)."""
    steps = [s for s in entry["steps"] if s["phase"] == phase]
    measured = entry["gpu_time_measured"]
    out = {"rank": r["rank"], "file": r["file"], "device": r["device"], "gpu_kernels": r["gpu_kernels"],
           "gpu_time_measured": measured, f"{phase}_steps": len(steps), "steps_from": entry["steps_from"]}
    out.update(figures(r, steps, measured, phase))
    return out


def allreduce(entries: list[dict], coll: dict) -> tuple[dict, list[Note]]:
    """``allreduce`` across ranks (the module's docstring), and a note where one rank alone has figures."""
    live = [e for e in entries if e["decode_steps"] and e["gpu_time_measured"]]
    out = {"share_mean": None, "ms_per_step_mean": None, "ms_per_step_skew_corrected": None,
           "wait_ms_per_step_by_rank": {}, "calls_matched": 0, "nccl_share_mean": None,
           "nccl_ms_per_step_mean": None, "share_by_rank": {}, "ms_per_step_by_rank": {}}
    if not live:
        return out, []
    out.update({
        "share_mean": round(fmean(e["allreduce_share"] or 0.0 for e in live), 4),
        "ms_per_step_mean": round(fmean(e["allreduce_ms_per_step"] or 0.0 for e in live), 4),
        "nccl_share_mean": round(fmean((e["allreduce_nccl_ms_per_step"] or 0.0) / e["cuda_ms_per_step"]
                                       if e["cuda_ms_per_step"] else 0.0 for e in live), 4),
        "nccl_ms_per_step_mean": round(fmean(e["allreduce_nccl_ms_per_step"] or 0.0 for e in live), 4),
        "share_by_rank": {str(e["rank"]): e["allreduce_share"] for e in live},
        "ms_per_step_by_rank": {str(e["rank"]): e["allreduce_ms_per_step"] for e in live},
    })
    matched = sum(g["calls_decode"] for g in coll["groups"])
    if not matched:
        return out, []
    # As before: the mean transfer of the matched calls (of the decode steps: a prefill's larger
    # all-reduces are no decode step's) times each rank's all-reduce calls per decode step (calls no
    # other rank matched get the matched calls' mean transfer, not zero).
    per_call = sum(g["transfer_us_total_decode"] for g in coll["groups"]) / matched / 1000.0
    waits, calls = {}, []
    for e in live:
        dec = [s for s in e["steps"] if s["phase"] == DECODE]
        calls.append(sum(s["allreduce_calls"] for s in dec) / len(dec))
        unknown = any(s["allreduce_calls"] and s["allreduce_wait_ms"] is None for s in dec)  # one rank of a group
        waits[str(e["rank"])] = (None if unknown else
                                 round(sum(s["allreduce_wait_ms"] or 0.0 for s in dec) / len(dec), 4))
    out.update({"ms_per_step_skew_corrected": round(per_call * fmean(calls), 4), "wait_ms_per_step_by_rank": waits,
                "calls_matched": matched})
    return out, [note("one_rank_skew")] if len(live) == 1 else []
