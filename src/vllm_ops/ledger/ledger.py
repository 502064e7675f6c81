"""The decode ledger: how far the steady decode step is from its floor, part by part, per rank.

A decode step cannot be faster than reading the weights it uses once from HBM, plus the KV
cache it reads, plus its all-reduces at the host's measured floor. :func:`decode_ledger` sets
each part of the mean steady decode step (the summary's ``decomposition``, whose parts add up
to the step's period) against its floor; everything above the floor is headroom. Per rank:

- **floors** (ms): ``weights`` = :func:`.reads.step_reads`' weight bytes / the bandwidth
  (:mod:`.bandwidth`); ``kv_cache`` = its KV bytes / the bandwidth; ``allreduce`` = all-reduce
  calls per step x the host's floor at their median message size
  (:func:`vllm_ops.allreduce.floor.floor_at`, where :func:`~vllm_ops.allreduce.floor.usable`);
  ``total`` = their sum. The reads are computed for each steady step (its tokens and context
  lengths) and averaged, as the decomposition averages the steps.
- **parts** (:data:`PARTS`), each ``{part, measured_ms, floor_ms, above_floor_ms}``:
  ``weights`` (GEMM and MoE GEMM kernels) over the weight floor, ``kv_cache`` (attention kernels)
  over the KV floor, ``allreduce_transfer`` over the all-reduce floor, and, with a floor of 0 by
  the definition above (the floor has no term for them): ``other_kernels`` (every other compute
  category), ``allreduce_wait``, ``gpu_idle`` (idle inside the step's GPU window) and ``host``
  (between windows). ``above_floor_ms`` = measured - floor.
- **Floors only for parts whose kernels were seen.** Where the step's kernels are recorded and it
  ran none of a part's (no GEMM kernel: ``weights``; no attention kernel: ``kv_cache``), that part's
  floor is not charged: 0, with why in ``not_charged``. (Up to issue 30 a KV-cache floor was
  charged beside no attention kernel: ``0.000 / 0.050 / -0.050``.)
- A part measured below its floor gets no ``above_floor_ms`` (None, why in ``not_measured``), never
  a negative one; the GEMMs' kind says so for the weights (``below-weight-floor``).
- **headroom_ms** = period - total floor (``headroom_share`` of the period). Where a floor is not
  measured, ``headroom_ms`` is None and ``headroom_at_most_ms`` = period - the floors known. Where
  the floors exceed the period, both are None and ``not_measured`` says why: a negative headroom
  says the inputs do not fit the run, not that the step could be slower.
- **gemm**: the GEMMs' share of the bandwidth, ``hbm_share`` = weight floor / GEMM time (the
  bandwidth the GEMMs reach, over the device's). ``kind``: ``memory-bound`` when the GEMM time is
  within :data:`MEMORY_BOUND_FACTOR` of the weight floor ("GEMMs at 78% of HBM bandwidth"), not
  compute-bound; ``above-weight-floor`` beyond that (no FLOP floor is computed, so nothing is
  said of compute); ``below-weight-floor`` when the GEMMs ran faster than the floor by more than
  :data:`BELOW_FLOOR_TOLERANCE` (the bytes, the TP size or the bandwidth do not fit this run);
  ``not measured`` (with ``why``).
- **levers**: the :data:`LEVER_COUNT` parts with the most milliseconds above their floor, each
  with the experiments (``next``) that go after it and fit the model (:mod:`.fit`: no Marlin or
  MoE kernels for a dense bf16 checkpoint, no all-reduce fusion at TP 1, no "drop
  --enforce-eager" where graphs ran), for the advisor.
- **not_measured**: ``{figure: why}``: every figure left None and why. The ledger never guesses:
  kernels replayed from CUDA graphs without per-kernel records leave the kernel parts not
  measured; ``blind_spots`` says what the figures cannot see.

:func:`describe` renders one rank's ledger in words, at the edge.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import fmean

from ..allreduce import floor as allreduce_floor_mod
from . import fit
from .bandwidth import device_bandwidth
from .errors import LedgerInputError
from .inputs import ledger_inputs
from .reads import check_record, step_reads

SCHEMA = 1
# GEMM time at most this many times the weight floor (at least 1/2 of the bandwidth): memory-bound.
MEMORY_BOUND_FACTOR = 2.0
# GEMMs faster than the weight floor by more than this share: the inputs do not fit the run.
BELOW_FLOOR_TOLERANCE = 0.10
LEVER_COUNT = 3
# The GEMMs' kind in words, for describe() and the summaries that quote it.
GEMM_WORDS = {"memory-bound": "memory-bound", "above-weight-floor": "above the weight floor",
              "below-weight-floor": "below the weight floor: check the inputs"}

GEMM_CATEGORIES = ("gemm", "moe_gemm")
ATTENTION_CATEGORIES = ("attention",)
PARTS = ("weights", "kv_cache", "other_kernels", "allreduce_transfer", "allreduce_wait", "gpu_idle", "host")
KERNEL_PARTS = ("weights", "kv_cache", "other_kernels")
# The parts whose floor has a term (the others' floor is 0 by definition).
FLOORED_PARTS = ("weights", "kv_cache", "allreduce_transfer")

# part -> (what the lever is, the experiments that go after it, each with what it needs of the model
# and the server: :mod:`.fit`'s needs, so that a dense bf16 TP1 step gets no Marlin, MoE, quantize or
# all-reduce fusion advice). One table, for the advisor; a lever's ``next`` holds those that fit, in order.
LEVERS: dict[str, tuple[str, tuple[tuple[str, tuple[str, ...]], ...]]] = {
    "weights": ("GEMMs above the weight floor", (
        ("compare the quantized GEMM and MoE kernels (Marlin W4A16 and the alternatives) and their tuning",
         ("quantized", "moe")),
        ("compare the quantized GEMM kernels (Marlin W4A16 and the alternatives for 4-bit weights) and their tuning",
         ("quantized", "dense")),
        ("compare the MoE kernels (the fused MoE backend, expert parallelism) and their tuning", ("moe",)),
        ("more tokens per step for the same weights (more concurrency, speculative decoding)", ()))),
    "kv_cache": ("attention above the KV-cache floor", (
        ("compare attention backends and the KV-cache dtype (--kv-cache-dtype fp8 halves the bytes)", ()),)),
    "other_kernels": ("kernels outside GEMM and attention (norms, elementwise and the rest)", (
        ("fuse them: vLLM's compilation passes (fused norm + quantize, fused all-reduce + norm where supported)",
         ("quantized", "tp>1")),
        ("fuse them: vLLM's compilation passes (fused norm + quantize)", ("quantized",)),
        ("fuse them: vLLM's compilation passes (fused all-reduce + norm where supported)", ("tp>1",)),
        ("fuse them: vLLM's compilation passes (torch.compile's fusion of norms and pointwise kernels)", ()))),
    "allreduce_transfer": ("all-reduce above the host's measured floor", (
        ("an NCCL sweep against the floor (NCCL_PROTO, NCCL_ALGO, NCCL_MAX_NCHANNELS), pre-screened with "
         "allreduce_bench", ()), ("fewer or larger collectives (speculative decoding, more requests per step)", ()))),
    "allreduce_wait": ("waiting in all-reduce for the last rank to arrive", (
        ("find the straggler: the last arriver's host (CPU contention, affinity) and its GPU (clocks, PCIe link)",
         ()),)),
    "gpu_idle": ("GPU idle inside the step", (
        ("CUDA graphs for the batch sizes served (drop --enforce-eager, cover them in the capture sizes)", ("eager",)),
        ("--async-scheduling, to overlap the host's scheduling with the GPU", ()))),
    "host": ("host time between steps", (("--async-scheduling, to overlap the host's scheduling with the GPU", ()),)),
}

BLIND_SPOTS = (
    "fused kernels: a kernel doing the work of several categories counts in one (a fused all-reduce + RMSNorm "
    "as all-reduce, a fused MoE kernel's activation as MoE GEMM), so a part can hold another part's work",
    "the floor reads every weight once from HBM per step at the bandwidth given: activations and the tensors vLLM "
    "replicates on every rank are not counted (the floor is low by them); only weights small enough to stay in L2 "
    "between steps (tens of MB) could be read faster",
    "other kernels, waiting, idle and host time have no floor term: all of their time counts as headroom",
)
ROUTING_SPOT = ("above batch 1 the expected experts assume uniform routing, the most distinct experts any routing "
                "reads: with skewed routing the routed-expert term is high")
GRAPH_SPOT = ("kernels replayed from CUDA graphs without per-kernel records: the kernel parts are not measured "
              "(profile with the graph's kernels traced, or --enforce-eager)")


def decode_ledger(summary: Mapping, checkpoint: Mapping | None = None, *, allreduce_floor: object = None,
                  bandwidth: Mapping | None = None, tokens: int | None = None, key_tokens: int | None = None,
                  kv_dtype_bytes: int | None = None, tensor_parallel_size: int | None = None,
                  facts: Mapping | None = None) -> dict:
    """The ledger of the steady decode step, per rank, as data (see the module's docstring).

    ``summary``: a trace summary (read through :mod:`.inputs`). ``checkpoint``: the checkpoint's
    record (:func:`vllm_ops_host.checkpoint.read_checkpoint`, ``capture.json``'s ``checkpoint``).
    ``allreduce_floor``: the host's floor (a path to allreduce_bench's JSON, or the dict), which
    also carries the measured copy bandwidth. ``bandwidth``: :func:`.bandwidth.device_bandwidth`'s
    dict, to override it. ``tokens`` / ``key_tokens``: tokens per step and the context lengths'
    sum, given: they replace what the steps' annotations say (a ``--decode-pattern`` step says
    neither, vLLM's native form no context lengths; ``key_tokens=0`` for a step that reads no
    KV cache whatever its annotation claims).
    ``kv_dtype_bytes``: the KV cache's element size where the server sets one.
    ``tensor_parallel_size``: default the summary's. ``facts``: what the trace and the checkpoint
    show of the model (:func:`.fit.facts`; default: the checkpoint's and the TP size), which the
    levers' experiments must fit. Raises LedgerInputError on bad input."""
    inputs = ledger_inputs(summary)
    if checkpoint is not None:
        check_record(checkpoint)
    floor = allreduce_floor_mod.load_floor(allreduce_floor) if allreduce_floor is not None else None
    tp = tensor_parallel_size or inputs["tensor_parallel_size"]
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise LedgerInputError(f"tensor_parallel_size: the summary gives none, pass one (got {tp!r})")
    _check_heads(checkpoint, tp)
    for what, value in (("tokens", tokens), ("key_tokens", key_tokens), ("kv_dtype_bytes", kv_dtype_bytes)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise LedgerInputError(f"{what} must be a non-negative integer, got {value!r}")
    known = dict(facts) if facts is not None else fit.facts(checkpoint, tp)
    ranks = [_rank_ledger(r, checkpoint, floor, bandwidth, tp, tokens, key_tokens, kv_dtype_bytes, known)
             for r in inputs["ranks"]]
    spots = list(BLIND_SPOTS)
    if checkpoint is not None and not checkpoint.get("error") and checkpoint["routed_experts"]["layers"] and any(
            (r["reads"] or {}).get("tokens", 1) > 1 for r in ranks):
        spots.append(ROUTING_SPOT)
    if any(r["graph_kernels_missing"] for r in ranks):
        spots.append(GRAPH_SPOT)
    return {
        "schema": SCHEMA, "tensor_parallel_size": tp,
        "checkpoint": None if checkpoint is None else {k: checkpoint.get(k) for k in ("path", "bytes", "error")},
        "allreduce_floor": None if floor is None else floor.get("source"),
        "thresholds": {"memory_bound_factor": MEMORY_BOUND_FACTOR, "below_floor_tolerance": BELOW_FLOOR_TOLERANCE,
                       "levers": LEVER_COUNT},
        "ranks": ranks, "blind_spots": spots,
    }


def _check_heads(checkpoint: Mapping | None, tp: int) -> None:
    """A tensor-parallel size that does not divide the model's attention heads is one vLLM refuses
    to start with (each rank keeps whole heads), so the traces cannot come from it: refused, since
    every per-rank floor would be computed for a server that cannot exist. A record without the
    figure (written before it was kept) or a model without attention is not checked."""
    model = (checkpoint or {}).get("model") or {}
    heads = model.get("num_attention_heads")
    if isinstance(heads, int) and not isinstance(heads, bool) and heads > 0 and heads % tp:
        raise LedgerInputError(
            f"tensor_parallel_size {tp} contradicts the model: its config.json gives {heads} attention heads, "
            f"which {tp} ranks cannot split whole (vLLM refuses that size); give the server's own size")


def _rank_ledger(r: dict, checkpoint, floor, bandwidth, tp, tokens, key_tokens, kv_dtype_bytes, model) -> dict:
    missing: dict[str, str] = {}
    bw = dict(bandwidth) if bandwidth is not None else device_bandwidth(r["device"], floor)
    reads = _mean_reads(r, checkpoint, tp, tokens, key_tokens, kv_dtype_bytes, missing)
    if bw.get("gbps") is None:
        missing["bandwidth"] = bw.get("note") or "the device's bandwidth is unknown"
    weights_floor = _ms(reads and reads["weights"], bw.get("gbps"))
    kv_floor = _ms(reads and reads["kv_cache"], bw.get("gbps"))
    not_charged: dict[str, str] = {}
    if r["measured"] and not r["graph_kernels_missing"]:  # the step's kernels are all recorded
        for part, cats, what in (("weights", GEMM_CATEGORIES, "GEMM"), ("kv_cache", ATTENTION_CATEGORIES, "attention")):
            if not _sum(r["compute_ms"], cats):
                not_charged[part] = (f"the steady step ran no {what} kernel (by the trace's categories), so no "
                                     f"{'weight' if part == 'weights' else 'KV-cache'} floor is charged")
        weights_floor = 0.0 if "weights" in not_charged else weights_floor
        kv_floor = 0.0 if "kv_cache" in not_charged else kv_floor
    ar = _allreduce_floor(r, floor, missing)
    floors = {"weights": weights_floor, "kv_cache": kv_floor, "allreduce": ar["floor_ms"]}
    for name in not_charged:
        missing.pop(name, None)
    for name, value in floors.items():
        if value is None and name not in missing:
            missing[name] = _why(name, reads, bw, missing)
    known = [v for v in floors.values() if v is not None]
    floors["total"] = sum(known) if len(known) == len(floors) else None
    out = {"rank": r["rank"], "device": r["device"], "steps": r["steps"], "period_ms": r["period_ms"],
           "bandwidth": bw, "reads": _round_reads(reads), "floors": _round_map(floors), "parts": [],
           "headroom_ms": None, "headroom_share": None, "headroom_at_most_ms": None,
           "gemm": {"kind": "not measured", "why": None}, "levers": [], "not_measured": missing,
           "not_charged": not_charged,
           "graph_kernels_missing": r["graph_kernels_missing"]}
    if not r["measured"]:
        missing["step"] = r["why"]
        out["gemm"]["why"] = r["why"]
        return out
    compute = r["compute_ms"]
    kernels_seen = not r["graph_kernels_missing"]
    gemm_ms = _sum(compute, GEMM_CATEGORIES) if kernels_seen else None
    attention_ms = _sum(compute, ATTENTION_CATEGORIES) if kernels_seen else None
    other_ms = (sum(v for k, v in compute.items() if k not in GEMM_CATEGORIES + ATTENTION_CATEGORIES)
                if kernels_seen else None)
    if not kernels_seen:
        missing["kernel_parts"] = GRAPH_SPOT
    measured = {"weights": gemm_ms, "kv_cache": attention_ms, "other_kernels": other_ms,
                "allreduce_transfer": r["allreduce_transfer_ms"], "allreduce_wait": r["allreduce_wait_ms"],
                "gpu_idle": r["idle_ms"], "host": r["host_ms"]}
    part_floor = {"weights": weights_floor, "kv_cache": kv_floor, "allreduce_transfer": ar["floor_ms"]}
    for part in PARTS:
        m = measured[part]
        f = part_floor.get(part, 0.0)
        above = m - f if m is not None and f is not None else None
        if above is not None and above < 0 and _r(above) != 0:
            missing[f"{part}_above_floor"] = (f"measured {m:.4f} ms, below its floor of {f:.4f} ms: the checkpoint, "
                                              "the TP size or the bandwidth does not fit this run")
            above = None
        row = {"part": part, "measured_ms": _r(m), "floor_ms": _r(f), "above_floor_ms": _r(above)}
        if part == "allreduce_transfer":
            row.update(calls_per_step=ar["calls_per_step"], message_bytes=ar["message_bytes"],
                       floor_us_per_call=ar["floor_us"], floor_how=ar["floor_how"])
        out["parts"].append(row)
    period = r["period_ms"]
    if period is not None:
        if sum(known) > period:
            missing["headroom"] = (f"the floors ({sum(known):.4f} ms) exceed the period ({period:.4f} ms): the "
                                   "checkpoint, the TP size or the bandwidth does not fit this run")
        elif floors["total"] is not None:
            out["headroom_ms"] = _r(period - floors["total"])
            out["headroom_share"] = _r((period - floors["total"]) / period) if period else None
        else:
            out["headroom_at_most_ms"] = _r(period - sum(known))
    out["gemm"] = _gemm(gemm_ms, weights_floor, bw, missing)
    out["levers"] = _levers(out["parts"], period, model)
    return out


def _mean_reads(r, checkpoint, tp, tokens, key_tokens, kv_dtype_bytes, missing) -> dict | None:
    """The step reads averaged over the rank's steady decode steps (each its own tokens and
    context lengths, from its annotation; the caller's instead where given)."""
    if checkpoint is None:
        missing["reads"] = "no checkpoint given (its safetensors headers give the bytes)"
        return None
    steps = list(zip(r["tokens"], r["key_tokens"], strict=True)) or [(None, None)]
    rows = []
    for b, k in steps:
        b = tokens if tokens is not None else b
        k = key_tokens if key_tokens is not None else k
        if b is None:
            missing["reads"] = ("the tokens per step are unknown (the steps' annotations do not give them, as "
                                "with a --decode-pattern): pass tokens")
            return None
        rows.append(step_reads(checkpoint, tokens=b, tensor_parallel_size=tp, key_tokens=k,
                               kv_dtype_bytes=kv_dtype_bytes))
    out = {"tokens": fmean(row["tokens"] for row in rows), "tensor_parallel_size": tp, "steps": len(rows)}
    for term in ("key_tokens", "expected_experts", "always", "shared_experts", "routed_experts", "embedding",
                 "lm_head", "weights", "kv_cache", "total"):
        values = [row[term] for row in rows]
        out[term] = None if any(v is None for v in values) else fmean(values)
    for row in rows:
        for figure, why in row["missing"].items():
            missing.setdefault(figure, why)
    return out


def _allreduce_floor(r: dict, floor, missing: dict) -> dict:
    out = {"floor_ms": None, "floor_us": None, "floor_how": None, "calls_per_step": None, "message_bytes": None}
    ar = r["allreduce"]
    if ar is None or not ar.get("calls_per_step"):
        out["floor_ms"] = 0.0  # no all-reduce in the step: nothing to floor
        return out
    out.update(calls_per_step=ar["calls_per_step"], message_bytes=ar["message_bytes"])
    if floor is None:
        missing["allreduce"] = "no all-reduce floor given (playbooks/allreduce_bench.yml measures it)"
        return out
    why = allreduce_floor_mod.usable(floor, ar.get("group_size"))
    if why is None and ar["message_bytes"] is None:
        why = "the trace does not record the all-reduce message size"
    if why is None:
        us, how = allreduce_floor_mod.floor_at(floor, ar["message_bytes"])
        if us is None:
            why = how
        else:
            out.update(floor_us=round(us, 3), floor_how=how, floor_ms=ar["calls_per_step"] * us / 1000.0)
    if why is not None:
        missing["allreduce"] = f"the all-reduce floor does not apply: {why}"
    return out


def _gemm(gemm_ms, weights_floor, bw, missing) -> dict:
    out = {"kind": "not measured", "why": None, "measured_ms": _r(gemm_ms), "floor_ms": _r(weights_floor),
           "hbm_share": None, "factor": None, "bandwidth_gbps": bw.get("gbps"), "bandwidth_source": bw.get("source")}
    if gemm_ms is None:
        out["why"] = missing.get("kernel_parts") or missing.get("step")
        return out
    if weights_floor is None:
        out["why"] = missing.get("reads") or missing.get("weights") or missing.get("bandwidth")
        return out
    if gemm_ms <= 0:
        out["why"] = "the step ran no GEMM kernel"
        return out
    share = weights_floor / gemm_ms
    out.update(hbm_share=_r(share), factor=_r(gemm_ms / weights_floor) if weights_floor > 0 else None)
    if share > 1.0 + BELOW_FLOOR_TOLERANCE:
        out["kind"] = "below-weight-floor"
        out["why"] = ("the GEMMs ran faster than reading the weights allows: the checkpoint, the TP size or the "
                      "bandwidth does not fit this run")
    elif gemm_ms <= MEMORY_BOUND_FACTOR * weights_floor:
        out["kind"] = "memory-bound"
    else:
        out["kind"] = "above-weight-floor"
    return out


def _levers(parts: list[dict], period, known: Mapping) -> list[dict]:
    ranked = sorted((p for p in parts if p["above_floor_ms"] is not None and p["above_floor_ms"] > 0),
                    key=lambda p: (-p["above_floor_ms"], PARTS.index(p["part"])))
    out = []
    for p in ranked[:LEVER_COUNT]:
        what, experiments = LEVERS[p["part"]]
        out.append({"part": p["part"], "lever": what, "recoverable_ms": p["above_floor_ms"],
                    "share_of_period": _r(p["above_floor_ms"] / period) if period else None,
                    "next": [text for text, needs in experiments if fit.fits(needs, known)]})
    return out


def describe(rank: Mapping) -> str:
    """One rank's ledger in one line: the step, its floor, the headroom, the GEMMs, the levers."""
    head = f"rank {rank.get('rank')}: decode step {_fmt(rank.get('period_ms'))} ms"
    fl = rank.get("floors") or {}
    if fl.get("total") is not None:
        head += (f", floor {_fmt(fl['total'])} ms (weights {_fmt(fl['weights'])}, KV {_fmt(fl['kv_cache'])}, "
                 f"all-reduce {_fmt(fl['allreduce'])}), headroom {_fmt(rank.get('headroom_ms'))} ms "
                 f"({100 * (rank.get('headroom_share') or 0):.0f}%)")
    elif rank.get("headroom_at_most_ms") is not None:
        unknown = ", ".join(k for k in ("weights", "kv_cache", "allreduce") if fl.get(k) is None)
        head += f", floor not measured ({unknown}), headroom at most {_fmt(rank['headroom_at_most_ms'])} ms"
    gemm = rank.get("gemm") or {}
    bw = rank.get("bandwidth") or {}
    if gemm.get("hbm_share") is not None:
        source = "measured" if bw.get("source") == "measured" else "spec"
        what = GEMM_WORDS[gemm["kind"]]
        head += (f"; GEMMs at {100 * gemm['hbm_share']:.0f}% of HBM bandwidth ({bw.get('gbps'):.0f} GB/s, "
                 f"{source}): {what}")
    else:
        head += f"; GEMMs not measured ({gemm.get('why') or 'no reason given'})"
    if rank.get("levers"):
        head += "; levers: " + ", ".join(f"{lv['part']} {_fmt(lv['recoverable_ms'])} ms" for lv in rank["levers"])
    return head


def _why(name: str, reads, bw, missing) -> str:
    if reads is None:
        return missing.get("reads") or "no reads"
    if bw.get("gbps") is None:
        return missing["bandwidth"]
    term = "weights" if name == "weights" else "kv_cache"
    return missing.get(term) or missing.get("routed_experts") or missing.get("checkpoint") or "not computed"


def _ms(nbytes, gbps) -> float | None:
    if nbytes is None or not gbps:
        return None
    return nbytes / (gbps * 1e9) * 1e3


def _sum(compute: Mapping, categories) -> float:
    return sum(compute.get(c) or 0.0 for c in categories)


BYTE_TERMS = ("always", "shared_experts", "routed_experts", "embedding", "lm_head", "weights", "kv_cache", "total")


def _round_reads(reads: dict | None) -> dict | None:
    """Bytes to whole bytes, the counts to 4 decimals."""
    if reads is None:
        return None
    return {k: (None if v is None else round(v) if k in BYTE_TERMS else round(v, 4) if isinstance(v, float) else v)
            for k, v in reads.items()}


def _round_map(values: Mapping) -> dict:
    return {k: _r(v) for k, v in values.items()}


def _r(v) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else round(float(v), 4)


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.2f}"
