"""The verdict: what bounds the steady decode step, with the numbers that say so, and what to try next.

A verdict is data: ``{kind, rank, evidence: {figure: value, ...}, thresholds: {...},
reason, next: [experiment, ...]}``, rendered to words at the edge (:func:`describe`).
Rules, tried in this order (thresholds are the constants below; shares are of the rank's
mean steady period):

1. ``inconclusive`` when there is nothing to judge: no GPU kernels, no decode steps, fewer
   than :data:`MIN_STEADY_STEPS` steady steps with a period, or CUDA graph launches whose
   kernels the trace lacks (the busy time would be an undercount). ``reason`` says what is
   missing.
2. ``host-bound`` on rank r: the GPU of r is idle (inside its step windows and outside
   them) for at least :data:`HOST_IDLE_MIN` of its period. r is the straggler when one is
   named (the others then wait for it), else the rank with the largest idle share.
3. ``imbalanced`` on rank r: a straggler r is named, is not host-bound, and another rank
   waits for it at least :data:`WAIT_MIN` of its period.
4. ``communication-bound``: the all-reduce transfer (no waiting) takes at least
   :data:`COMM_MIN` of the period, on average over the ranks.
5. ``compute-bound`` otherwise, on the category with the most busy time (``category``).

Where the host's all-reduce floor was measured (:mod:`.floor`), the evidence carries
``allreduce_floor_ratio`` (transfer over floor, the busiest group) and the advice for
communication-bound says whether all-reduce runs at the floor (no setting will help: fewer or
larger collectives, or fewer ranks) or above it (an NCCL sweep is worth it).

The advisor's next experiments depend on the kind and on the hardware: the interconnect
(``nvlink``, ``pcie`` or unknown; from ``nvidia-smi topo -m`` where the campaign recorded
it), the GPU, the TP size and whether CUDA graphs ran (graph launches seen).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..allreduce.floor import ABOVE_FLOOR, AT_FLOOR

MIN_STEADY_STEPS = 2
HOST_IDLE_MIN = 0.30
WAIT_MIN = 0.20
COMM_MIN = 0.25

THRESHOLDS = {"host_idle_min": HOST_IDLE_MIN, "wait_min": WAIT_MIN, "comm_min": COMM_MIN,
              "min_steady_steps": MIN_STEADY_STEPS}


def judge(decomposition: Mapping[str, Mapping], straggler: Mapping | None, context: Mapping,
          missing: str | None = None, floor_ratio: float | None = None) -> dict:
    """The verdict over the ranks' steady decompositions (``{rank: decomposition}``)."""
    base = {"kind": "inconclusive", "rank": None, "category": None, "evidence": {}, "thresholds": dict(THRESHOLDS),
            "reason": None, "next": []}
    usable = {r: d for r, d in decomposition.items() if d and d.get("period_ms")}
    if missing:
        base["reason"] = missing
    elif not usable:
        base["reason"] = "no steady decode step has a period (too few decode steps, or none with GPU activity)"
    elif min(d["steps"] for d in usable.values()) < MIN_STEADY_STEPS:
        base["reason"] = (f"fewer than {MIN_STEADY_STEPS} steady decode steps with a period: profile more "
                          "output tokens")
    if base["reason"]:
        base["next"] = ["profile again with more decode steps and GPU activities recorded (CUDA activities on, "
                        "kernels of CUDA graphs traced)"]
        return base
    named = straggler.get("rank") if straggler and straggler.get("named") else None
    idle = {r: (d["idle_in_window_ms"] + d["host_ms"]) / d["period_ms"] for r, d in usable.items()}
    wait = {r: d["allreduce_wait_ms"] / d["period_ms"] for r, d in usable.items()}
    transfer = {r: d["allreduce_transfer_ms"] / d["period_ms"] for r, d in usable.items()}
    candidate = str(named) if named is not None and str(named) in usable else max(idle, key=idle.get)
    d = usable[candidate]
    ev = {
        "rank": int(candidate), "period_ms": d["period_ms"], "busy_ms": d["busy_ms"],
        "busy_share": _r(d["busy_ms"] / d["period_ms"]), "gpu_idle_share": _r(idle[candidate]),
        "idle_host_share_of_idle": d.get("idle_host_share"),
        "allreduce_transfer_ms": d["allreduce_transfer_ms"], "allreduce_transfer_share": _r(transfer[candidate]),
        "max_wait_rank": None, "max_wait_ms": None, "max_wait_share": None,
        "straggler": named, "straggler_last_share": straggler.get("last_arrival_share") if straggler else None,
        "allreduce_floor_ratio": floor_ratio,
    }
    others = {r: w for r, w in wait.items() if r != candidate}
    if others:
        worst = max(others, key=others.get)
        ev.update(max_wait_rank=int(worst), max_wait_ms=usable[worst]["allreduce_wait_ms"],
                  max_wait_share=_r(others[worst]))
    mean_transfer = sum(transfer.values()) / len(transfer)
    ev["mean_transfer_share"] = _r(mean_transfer)
    compute = {c: ms for c, ms in d["compute_ms"].items()}
    top = max(compute, key=compute.get) if compute else None
    ev["top_category"], ev["top_category_ms"] = top, compute.get(top) if top else None
    out = dict(base, evidence=ev)
    if idle[candidate] >= HOST_IDLE_MIN:
        out.update(kind="host-bound", rank=int(candidate))
    elif named is not None and others and max(others.values()) >= WAIT_MIN:
        out.update(kind="imbalanced", rank=int(candidate))
    elif mean_transfer >= COMM_MIN:
        out.update(kind="communication-bound")
    else:
        out.update(kind="compute-bound", rank=int(candidate), category=top)
    out["next"] = advise(out, context)
    return out


def advise(verdict: Mapping, context: Mapping) -> list[str]:
    """The one or two experiments most likely to help, for this verdict on this hardware."""
    kind = verdict["kind"]
    link = context.get("interconnect")
    graphs = context.get("cuda_graphs")
    tp = context.get("tensor_parallel_size")
    rank = verdict.get("rank")
    if kind == "host-bound":
        first = ("turn CUDA graphs on (the steps launched no graph: drop --enforce-eager, and make the "
                 "capture sizes cover the batch size)" if graphs is False else
                 f"find what slows rank {rank}'s host: CPU contention and affinity of its worker (other "
                 "processes, NUMA placement; pin the workers), then vLLM's --async-scheduling")
        second = ("if the host is not contended: --async-scheduling, to overlap scheduling with the GPU"
                  if graphs is False else "compare with a run on an idle host, to tell contention from vLLM's "
                                          "own per-step CPU time")
        return [first, second]
    if kind == "imbalanced":
        return [f"check rank {rank}'s GPU: clocks and throttling (nvidia-smi -q -d PERFORMANCE,CLOCK), its PCIe "
                "link width and speed, and its position in the topology",
                f"profile again to see whether rank {rank} is always the late one"]
    ratio = (verdict.get("evidence") or {}).get("allreduce_floor_ratio")
    if kind == "communication-bound" and ratio is not None and ratio <= AT_FLOOR:
        return [f"all-reduce already runs at the host's measured floor ({ratio:.2f}x): no NCCL setting will help; "
                "fewer or larger collectives (speculative decoding, more requests per step)",
                "fewer ranks per instance (a smaller TP group, replicas for throughput)"]
    if kind == "communication-bound":
        if ratio is not None and ratio >= ABOVE_FLOOR:
            return [f"all-reduce runs {ratio:.1f}x above the host's measured floor: an NCCL sweep (NCCL_PROTO, "
                    "NCCL_ALGO, NCCL_MAX_NCHANNELS) can close the gap; pre-screen it with allreduce_bench",
                    "speculative decoding: fewer decode steps per output token"]
        if link == "nvlink":
            return ["keep vLLM's custom / FlashInfer all-reduce on (not --disable-custom-all-reduce) and compare "
                    "with NCCL symmetric memory", "speculative decoding: fewer decode steps per output token"]
        where = "on PCIe" if link == "pcie" else "(interconnect unknown: record nvidia-smi topo -m)"
        smaller = f" (TP {tp // 2} x 2 replicas)" if isinstance(tp, int) and tp >= 4 else ""
        return [f"an NCCL sweep {where}: NCCL_PROTO LL / LL128 / Simple x NCCL_ALGO Ring / Tree, against the "
                "measured all-reduce floor", f"speculative decoding (fewer steps per token), or a smaller TP "
                f"group{smaller}"]
    if kind == "compute-bound":
        cat = verdict.get("category")
        hints = {
            "moe_gemm": "MoE kernels: compare the MoE backend (Marlin W4A16 and the alternatives) and expert "
                        "parallelism",
            "gemm": "dense GEMMs: a larger batch (more concurrency per step) amortizes them; check the "
                    "quantized kernels chosen",
            "attention": "attention: compare attention backends and the KV-cache dtype",
        }
        return [hints.get(cat, f"the {cat} kernels take most of the step: look at the top kernels"),
                "speculative decoding: more tokens per step for the same weights read"]
    return ["profile again with more decode steps and GPU activities recorded"]


def describe(verdict: Mapping) -> str:
    """The verdict in a few words, for a headline: ``host-bound on rank 0``."""
    kind = verdict.get("kind") or "inconclusive"
    if kind == "inconclusive":
        return f"inconclusive: {verdict.get('reason') or 'nothing to judge'}"
    if kind == "compute-bound":
        cat = verdict.get("category")
        return f"compute-bound ({cat})" if cat else "compute-bound"
    if verdict.get("rank") is not None and kind in ("host-bound", "imbalanced"):
        return f"{kind} on rank {verdict['rank']}"
    return kind


def _r(v: float) -> float:
    return round(float(v), 4)
