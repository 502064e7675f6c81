"""The verdict: what bounds the steady decode step, with the numbers that say so, and what to try next.

A verdict is data: ``{kind, rank, evidence: {figure: value, ...}, thresholds: {...},
reason, next: [experiment, ...], next_tests: [...]}``, rendered to words at the edge
(:func:`.words.describe`). ``next_tests[i]`` is the data form of ``next[i]``: the variants or sweeps that
test it, in the experiment's own format (:mod:`.experiments`), or ``test: null`` for one that is
no server variant (a check by hand, a fetch, another profile).
Rules, tried in this order (thresholds are the constants below and :mod:`.pace`'s; shares are
of the rank's mean steady period):

1. ``inconclusive`` when there is nothing to judge: no GPU kernels, no decode steps, fewer
   than :data:`MIN_STEADY_STEPS` steady steps with a period, CUDA graph launches whose
   kernels the trace lacks (the busy time would be an undercount), or impossible figures
   (:mod:`.sanity`). ``reason`` says what is missing, ``next`` what to run to get a verdict
   (:mod:`.findings`).
2. ``partial`` when ranks of the group have no trace (:mod:`.coverage`): the transfer cannot
   be told from waiting, and the rank that limits the run may be a missing one, so no verdict
   on the run and none on communication. The evidence gives each rank's all-reduce time as an
   interval (:func:`.collectives.bounds`) and what its own host and GPU need per step
   (:mod:`.pace`); ``next`` names the traces to fetch.
3. The rank that limits the run (``rank``) is :mod:`.pace`'s ``limit``: the rank whose host or
   GPU needs the most time per step, not merely the last to arrive at the collectives. Where
   no rank has a host figure (no CPU annotations, no launch calls), it is the straggler when
   one is named, else the rank with the largest idle share.
4. ``host-bound`` on that rank: its bound is its host (:mod:`.pace`); without a host figure,
   its GPU is idle (inside its step windows and outside them) for at least
   :data:`HOST_IDLE_MIN` of its period.
5. ``imbalanced`` on that rank: it is the named straggler, its GPU bounds it, and another rank
   waits for it at least :data:`WAIT_MIN` of its period.
6. ``communication-bound``: the all-reduce transfer (no waiting) takes at least
   :data:`COMM_MIN` of the period, on average over the ranks.
7. ``memory-bound`` where the category with the most busy time is a GEMM one (``gemm``,
   ``moe_gemm``) and the decode ledger calls that rank's GEMMs memory-bound: their time within
   :data:`vllm_ops.ledger.MEMORY_BOUND_FACTOR` of reading the weights once at the GPU's bandwidth
   (``hbm_share``, "GEMMs at 78% of HBM bandwidth"); or, without a ledger (no checkpoint given),
   their arithmetic intensity says so (:mod:`.intensity`: so few tokens a step that even 4-bit
   weights give less FLOP per byte than the GPU's ridge). Such GEMMs wait for memory, not for the
   ALUs. ``gemm_bound_from`` says which (``ledger`` or ``intensity``); with ``intensity`` the
   evidence carries ``tokens_per_step``, ``intensity_max_flop_per_byte``, ``ridge_flop_per_byte``
   and ``checkpoint_adds`` (what the floor would add).
8. ``compute-bound`` otherwise, on the category with the most busy time (``category``). (Up to
   issue 30 a batch-1 decode's GEMMs were compute-bound without a checkpoint and memory-bound with
   one, on the same trace.)

With a ledger (``ledger``: :func:`vllm_ops.ledger.decode_ledger` of the steady step), the evidence
of the verdict's rank also carries the ledger's figures: ``gemm_kind``, ``hbm_share``, ``gemm_ms``,
``weights_floor_ms``, ``bandwidth_gbps`` and ``bandwidth_source`` (``measured`` or ``spec``),
``floors_ms`` (weights, KV cache, all-reduce, total: null where not measured), ``headroom_ms`` or
``headroom_at_most_ms``, ``not_measured`` (the floors the ledger could not compute, and why) and
``levers`` (part -> milliseconds above its floor); the thresholds gain ``memory_bound_factor``;
after the advice, ``next`` gains one experiment per lever, largest first, with the milliseconds it
could recover.

A degraded PCIe link (``fabric``: :func:`vllm_ops.fabric.findings`) is evidence (``pcie_link``:
each degraded link's finding, naming its GPU and the rank on it); for a host-bound or imbalanced
rank whose own link is degraded, and for a communication-bound run with any degraded link, the
link's check comes first in ``next``.

The evidence's waiting is the decomposition's (exposed all-reduce waiting, one figure for the
page): ``allreduce_wait_ms_by_rank`` (every rank's; null where waiting cannot be told from
transfer, on one rank of a group) and ``other_wait_rank``, ``other_wait_ms``, ``other_wait_share``:
of the ranks other than the verdict's, the one that waits longest (for the verdict's rank, when it
is the straggler), its waiting and that over its period. (Up to issue 30 these three were named
``max_wait_*``, which read as the longest wait of any rank beside a rank that waited longer.)

The evidence says whether the capture is steady (``steady``) and, when it is not, the period
it drifts to (``predicted_period_ms``) and the rank whose lead moved (``drifting_rank``).
Where the steps are ProfilerStep#N spans of a trace that is no inference engine's
(:mod:`.findings`), the kind is ``inconclusive`` with the figures kept in the evidence and no
engine advice (``reason`` says why).

Where the host's all-reduce floor was measured (:mod:`.floor`), the evidence carries
``allreduce_floor_ratio`` (transfer over floor, the busiest group) and the advice for
communication-bound says whether all-reduce runs at the floor (no setting will help: fewer or
larger collectives, or fewer ranks) or above it (an NCCL sweep is worth it).

The advisor's next experiments depend on the kind and on the hardware: the interconnect
(``nvlink``, ``pcie`` or unknown; from ``nvidia-smi topo -m`` where the campaign recorded
it), the GPU, the TP size, whether CUDA graphs ran (graph launches seen), the engine (vLLM's
or SGLang's settings) and the API (CUDA or HIP).
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import fabric as fabric_mod
from ..allreduce.floor import ABOVE_FLOOR, AT_FLOOR
from ..ledger import MEMORY_BOUND_FACTOR, fit
from . import experiments
from . import intensity as intensity_mod
from . import pace as pace_rules
from .words import describe

MIN_STEADY_STEPS = 2
HOST_IDLE_MIN = 0.30
WAIT_MIN = 0.20
COMM_MIN = 0.25

THRESHOLDS = {"host_idle_min": HOST_IDLE_MIN, "wait_min": WAIT_MIN, "comm_min": COMM_MIN,
              "min_steady_steps": MIN_STEADY_STEPS, **pace_rules.THRESHOLDS}
GEMM_CATEGORIES = ("gemm", "moe_gemm")
# What the verdict's evidence keeps of a degraded link's finding (fabric.describe reads these).
LINK_EVIDENCE = ("kind", "rank", "gpu", "bus_id", "evidence")


def judge(decomposition: Mapping[str, Mapping], straggler: Mapping | None, context: Mapping,
          missing: str | None = None, floor_ratio: float | None = None, pace: Mapping | None = None,
          coverage: Mapping | None = None, withheld: str | None = None,
          missing_next: list[str] | None = None, ledger: Mapping | None = None,
          fabric: list[Mapping] | None = None, intensity: Mapping | None = None) -> dict:
    """The verdict over the ranks' steady decompositions (``{rank: decomposition}``), their
    pace (:func:`.summary` gives ``{limit, bound, ..., ranks: {rank: pace}}``), the group's
    coverage, and the decode ledger of the steady step and the PCIe findings where given."""
    base = {"kind": "inconclusive", "rank": None, "category": None, "evidence": {}, "thresholds": dict(THRESHOLDS),
            "reason": None, "next": [], "next_tests": []}
    usable = {r: d for r, d in decomposition.items() if d and d.get("period_ms")}
    if missing:
        base["reason"] = missing
    elif not usable:
        base["reason"] = "no steady decode step has a period (too few decode steps, or none with GPU activity)"
    elif min(d["steps"] for d in usable.values()) < MIN_STEADY_STEPS:
        base["reason"] = (f"fewer than {MIN_STEADY_STEPS} steady decode steps with a period: profile more "
                          "output tokens" if not withheld else
                          f"fewer than {MIN_STEADY_STEPS} steady steps with a period: capture more steps")
    if base["reason"]:
        base["next"] = list(missing_next) if missing and missing_next else [
            "profile again with more decode steps (more output tokens per request)" if not withheld else
            "profile again over more steps"]
        base["next_tests"] = [experiments.data_form(text, None) for text in base["next"]]
        return base
    pace = pace or {}
    paces = pace.get("ranks") or {}
    named = straggler.get("rank") if straggler and straggler.get("named") else None
    idle = {r: (d["idle_in_window_ms"] + d["host_ms"]) / d["period_ms"] for r, d in usable.items()}
    # waiting for other ranks, where it can be told from transfer (not on one rank of a group)
    wait = {r: d["allreduce_wait_ms"] / d["period_ms"] for r, d in usable.items() if d["allreduce_wait_ms"] is not None}
    transfer = {r: d["allreduce_transfer_ms"] / d["period_ms"] for r, d in usable.items()}
    limit = pace.get("limit")
    if limit is not None and str(limit) in usable and pace.get("bound"):
        candidate = str(limit)
    else:
        candidate = str(named) if named is not None and str(named) in usable else max(idle, key=idle.get)
    d = usable[candidate]
    own = paces.get(candidate) or {}
    ev = {
        "rank": int(candidate), "period_ms": d["period_ms"], "busy_ms": d["busy_ms"],
        "busy_share": _r(d["busy_ms"] / d["period_ms"]), "gpu_idle_share": _r(idle[candidate]),
        "gpu_idle_share_by_rank": {r: _r(v) for r, v in sorted(idle.items())},
        "idle_host_share_of_idle": d.get("idle_host_share"),
        "allreduce_transfer_ms": d["allreduce_transfer_ms"], "allreduce_transfer_share": _r(transfer[candidate]),
        "allreduce_wait_ms_by_rank": {r: d["allreduce_wait_ms"] for r, d in sorted(usable.items())},
        "other_wait_rank": None, "other_wait_ms": None, "other_wait_share": None,
        "straggler": named, "straggler_last_share": straggler.get("last_arrival_share") if straggler else None,
        "allreduce_floor_ratio": floor_ratio,
        "bound": own.get("bound"), "host_ms_per_step": own.get("host_ms_per_step"),
        "gpu_ms_per_step": own.get("gpu_ms_per_step"),
        "host_ms_per_step_by_rank": {r: p.get("host_ms_per_step") for r, p in paces.items()},
        "gpu_ms_per_step_by_rank": {r: p.get("gpu_ms_per_step") for r, p in paces.items()},
        "gpu_need_ms_per_step_by_rank": {r: p.get("gpu_need_ms_per_step") for r, p in paces.items()},
        "steady": pace.get("steady"), "predicted_period_ms": pace.get("predicted_period_ms"),
        "drifting_rank": pace.get("drifting_rank"),
    }
    drift = paces.get(str(pace.get("drifting_rank"))) or {}
    ev.update(lead_first_ms=drift.get("lead_first_ms"), lead_last_ms=drift.get("lead_last_ms"),
              lead_change_ms=drift.get("lead_change_ms"))
    others = {r: w for r, w in wait.items() if r != candidate}
    if others:
        worst = max(others, key=others.get)
        ev.update(other_wait_rank=int(worst), other_wait_ms=usable[worst]["allreduce_wait_ms"],
                  other_wait_share=_r(others[worst]))
    mean_transfer = sum(transfer.values()) / len(transfer)
    ev["mean_transfer_share"] = _r(mean_transfer)
    compute = {c: ms for c, ms in d["compute_ms"].items()}
    top = max(compute, key=compute.get) if compute else None
    ev["top_category"], ev["top_category_ms"] = top, compute.get(top) if top else None
    led = _ledger_rank(ledger, candidate)
    bound_by = (intensity or {}).get(candidate) if led is None and top in GEMM_CATEGORIES else None
    if led is not None:
        ev.update(_ledger_evidence(led), gemm_bound_from="ledger")
        base["thresholds"]["memory_bound_factor"] = MEMORY_BOUND_FACTOR
    elif bound_by and bound_by.get("kind"):
        ev.update(gemm_bound_from="intensity", tokens_per_step=bound_by["tokens_per_step"],
                  intensity_max_flop_per_byte=bound_by["intensity_max_flop_per_byte"],
                  ridge_flop_per_byte=bound_by["ridge_flop_per_byte"], ridge_gpu=bound_by["gpu"],
                  checkpoint_adds=bound_by["checkpoint_adds"])
        base["thresholds"].update(intensity_mod.THRESHOLDS)
    links = [{k: f.get(k) for k in LINK_EVIDENCE} for f in fabric or [] if f.get("kind") == "pcie-link-degraded"]
    if links:
        ev["pcie_link"] = links
    out = dict(base, evidence=ev)
    if coverage and not coverage.get("complete", True):
        return _partial(out, coverage, paces, context)
    bound = own.get("bound")
    if bound == "host" or (bound is None and idle[candidate] >= HOST_IDLE_MIN):
        out.update(kind="host-bound", rank=int(candidate))
    elif named is not None and int(candidate) == named and others and max(others.values()) >= WAIT_MIN:
        out.update(kind="imbalanced", rank=int(candidate))
    elif mean_transfer >= COMM_MIN:
        out.update(kind="communication-bound")
    elif top in GEMM_CATEGORIES and (ev.get("gemm_kind") == "memory-bound" or ev.get("gemm_bound_from") == "intensity"):
        out.update(kind="memory-bound", rank=int(candidate), category=top)
    else:
        out.update(kind="compute-bound", rank=int(candidate), category=top)
    if withheld:
        out["evidence"]["figures_say"] = describe(out)
        out.update(kind="inconclusive", rank=None, category=None, reason=withheld, next=[], next_tests=[])
        return out
    # The levers say where the step is above its floor; the advice is what the tune runs, each of its
    # tests with the milliseconds the ledger finds above the floor of its part (with_ledger).
    # The advice is what a tune runs, each test with the milliseconds the ledger finds above the floor
    # of its part (with_ledger); the link's check and the levers (where the step is above its floor)
    # are for the reader.
    pairs = ([(text, None) for text in _link_first(out, fabric or [])] + _advice(out, context)
             + [(text, None) for text in _lever_steps(led)])
    out["next"] = [text for text, _ in pairs]
    out["next_tests"] = experiments.with_ledger([experiments.data_form(text, test) for text, test in pairs], led,
                                                out.get("rank"))
    return out


def _ledger_rank(ledger: Mapping | None, rank: str) -> Mapping | None:
    """The ledger's figures of ``rank`` (a decomposition key), or None without a ledger."""
    if not ledger:
        return None
    return next((r for r in ledger.get("ranks") or [] if str(r.get("rank")) == rank), None)


def _ledger_evidence(led: Mapping) -> dict:
    """The ledger's figures the verdict carries (see the module's docstring)."""
    gemm, bw, floors = led.get("gemm") or {}, led.get("bandwidth") or {}, led.get("floors") or {}
    return {"gemm_kind": gemm.get("kind"), "hbm_share": gemm.get("hbm_share"), "gemm_ms": gemm.get("measured_ms"),
            "weights_floor_ms": gemm.get("floor_ms"), "bandwidth_gbps": bw.get("gbps"),
            "bandwidth_source": bw.get("source"), "floors_ms": dict(floors) or None,
            "headroom_ms": led.get("headroom_ms"), "headroom_at_most_ms": led.get("headroom_at_most_ms"),
            "not_measured": dict(led.get("not_measured") or {}) or None,
            "levers": {lv["part"]: lv["recoverable_ms"] for lv in led.get("levers") or []} or None}


def _link_first(verdict: Mapping, fabric: list[Mapping]) -> list[str]:
    """A degraded link's check, first: on a host-bound or imbalanced verdict's own rank, or any
    link of a communication-bound run."""
    kind = verdict["kind"]
    if kind in ("host-bound", "imbalanced"):
        return fabric_mod.advice_for_rank(fabric, verdict.get("rank"))
    if kind == "communication-bound":
        return [step for f in fabric if f.get("kind") == "pcie-link-degraded" for step in f["next"][:1]]
    return []


def _lever_steps(led: Mapping | None) -> list[str]:
    """The ledger's levers as experiments, largest first, each with the milliseconds it could recover."""
    if led is None:
        return []
    return [f"{lv['lever']}: {lv['recoverable_ms']:.2f} ms a step above its floor; {lv['next'][0]}"
            for lv in led.get("levers") or [] if lv.get("next")]


def _partial(out: dict, coverage: Mapping, paces: Mapping, context: Mapping) -> dict:
    """Rule 2: the ranks present, the ranks missing, and each present rank's own figures."""
    ev = out["evidence"]
    bounds = coverage.get("allreduce_bounds") or {}
    b = bounds.get(str(ev["rank"])) or {}
    ev.update(ranks_present=list(coverage.get("present") or []), ranks_missing=list(coverage.get("missing") or []),
              world_size=coverage.get("world_size"), allreduce_low_ms=b.get("low_ms_per_step"),
              allreduce_high_ms=b.get("high_ms_per_step"), allreduce_low_share=b.get("low_share"),
              allreduce_high_share=b.get("high_share"))
    for k in ("allreduce_transfer_ms", "allreduce_transfer_share", "mean_transfer_share", "other_wait_rank",
              "other_wait_ms", "other_wait_share", "straggler", "straggler_last_share", "allreduce_wait_ms_by_rank"):
        ev[k] = None  # what one rank of a group cannot tell
    missing = coverage.get("missing") or []
    fetch = "; ".join(f"rank {f['rank']}: {f['glob']}" for f in (coverage.get("fetch") or [])[:4])
    out.update(kind="partial", rank=None, category=None,
               reason=(f"{len(coverage.get('present') or [])} of the {coverage.get('world_size')} ranks have a trace "
                       f"(missing: {', '.join(str(m) for m in missing[:8])}{', ...' if len(missing) > 8 else ''}): "
                       "a collective's transfer cannot be told from waiting for the missing ranks, and one of them "
                       "may limit the run"),
               next=[f"fetch the missing ranks' traces ({fetch}) from the host, beside these, and summarize every "
                     "rank together (vllm-trace-summary DIR)"])
    out["next_tests"] = [experiments.data_form(text, None) for text in out["next"]]
    return out


def advise(verdict: Mapping, context: Mapping) -> list[str]:
    """The one or two experiments most likely to help, for this verdict on this hardware."""
    return [text for text, _ in _advice(verdict, context)]


def _advice(verdict: Mapping, context: Mapping) -> list[tuple[str, str | None]]:
    """:func:`advise`'s experiments, each with the name of the test that runs it
    (:data:`.experiments.TESTS`), or None for one that is no server variant."""
    kind = verdict["kind"]
    link = context.get("interconnect")
    tp = context.get("tensor_parallel_size")
    rank = verdict.get("rank")
    # The tests are vLLM's arguments and environment: none for another engine's trace.
    vllm = (context.get("engine") or "vllm") == "vllm"
    model = context.get("model") or {}  # what the trace and the checkpoint show (vllm_ops.ledger.fit)

    def t(name: str) -> str | None:
        return name if vllm else None

    if kind == "host-bound":
        return _host_advice(verdict, context)
    if kind == "imbalanced":
        return [(f"check rank {rank}'s GPU: clocks and throttling (nvidia-smi -q -d PERFORMANCE,CLOCK), its PCIe "
                 "link width and speed, and its position in the topology", None),
                (f"profile again to see whether rank {rank} is always the late one", None)]
    if kind == "memory-bound":
        ev = verdict.get("evidence") or {}
        share = ev.get("hbm_share")
        why = (f"the GEMMs read their weights at {100 * share:.0f}% of HBM bandwidth" if share is not None else
               f"the GEMMs multiply each weight by {ev.get('tokens_per_step'):g} tokens a step, too few to be bound by "
               "the ALUs")
        tail = ([] if share is not None else
                [(f"pass --checkpoint (the model's directory) for {ev.get('checkpoint_adds')}", None)])
        return [(f"{why}, so only fewer bytes per token make them faster: more tokens per step for the same weights "
                 "(more concurrency, speculative decoding)", t("speculative")),
                (("fewer bytes per weight: a 4-bit checkpoint (its kernels compared), or more ranks per instance "
                  "(each reads less, for more all-reduce)") if model.get("quantized") else
                 ("fewer bytes per weight: a lower-precision checkpoint (FP8, or INT4 with its kernels compared), or "
                  "more ranks per instance (each reads less, for more all-reduce)"), None), *tail]
    ratio = (verdict.get("evidence") or {}).get("allreduce_floor_ratio")
    if kind == "communication-bound" and ratio is not None and ratio <= AT_FLOOR:
        return [(f"all-reduce already runs at the host's measured floor ({ratio:.2f}x): no NCCL setting will help; "
                 "fewer or larger collectives (speculative decoding, more requests per step)", t("speculative")),
                ("fewer ranks per instance (a smaller TP group, replicas for throughput)", None)]
    if kind == "communication-bound":
        if ratio is not None and ratio >= ABOVE_FLOOR:
            return [(f"all-reduce runs {ratio:.1f}x above the host's measured floor: an NCCL sweep "
                     f"({experiments.sweep_words()}) can close the gap; pre-screen it with allreduce_bench",
                     t("nccl-sweep")),
                    ("speculative decoding: fewer decode steps per output token", t("speculative"))]
        if link == "nvlink":
            return [("keep vLLM's custom / FlashInfer all-reduce on (not --disable-custom-all-reduce) and compare "
                     "with NCCL symmetric memory", t("allreduce-paths")),
                    ("speculative decoding: fewer decode steps per output token", t("speculative"))]
        where = "on PCIe" if link == "pcie" else "(interconnect unknown: record nvidia-smi topo -m)"
        smaller = f" (TP {tp // 2} x 2 replicas)" if isinstance(tp, int) and tp >= 4 else ""
        return [(f"an NCCL sweep {where}: {experiments.sweep_words()}, pre-screened against the measured "
                 "all-reduce floor", t("nccl-sweep")),
                (f"speculative decoding (fewer steps per token), or a smaller TP group{smaller}", t("speculative"))]
    if kind == "compute-bound":
        cat = verdict.get("category")
        quantized = fit.fits(("quantized",), model)
        hints = {
            "moe_gemm": ("MoE kernels: compare the MoE backend" + (" (Marlin W4A16 and the alternatives)" if quantized
                                                                   else "") + " and expert parallelism", None),
            "gemm": ("dense GEMMs: a larger batch (more concurrency per step) amortizes them"
                     + ("; check the quantized kernels chosen" if quantized else ""), t("max-num-seqs")),
            "attention": ("attention: compare attention backends and the KV-cache dtype", None),
        }
        return [hints.get(cat, (f"the {cat} kernels take most of the step: look at the top kernels", None)),
                ("speculative decoding: more tokens per step for the same weights read", t("speculative"))]
    return [("profile again with more decode steps and GPU activities recorded", None)]


ENGINE_GRAPHS = {"vllm": "drop --enforce-eager, and make the capture sizes cover the batch size",
                 "sglang": "drop --disable-cuda-graph, and make --cuda-graph-max-bs cover the batch size"}
ENGINE_OVERLAP = {"vllm": "vLLM's --async-scheduling",
                  "sglang": "SGLang's overlap scheduler (do not pass --disable-overlap-schedule)"}


def _host_advice(verdict: Mapping, context: Mapping) -> list[tuple[str, str | None]]:
    """Host-bound: the slow rank's host first when it is slower than the others', then graphs
    (when the steps launched none) or overlapping the host's work with the GPU's. When every
    rank's host is slower than its GPU needs, the slow rank's fix alone reaches the other hosts'
    pace at best: then graphs (which bind every rank) come first, and the slow rank's advice says
    how far it reaches."""
    rank = verdict.get("rank")
    ev = verdict.get("evidence") or {}
    hosts = {str(r): v for r, v in (ev.get("host_ms_per_step_by_rank") or {}).items() if v is not None}
    needs = {str(r): v for r, v in (ev.get("gpu_need_ms_per_step_by_rank") or {}).items() if v is not None}
    mine, others = hosts.get(str(rank)), [v for r, v in hosts.items() if r != str(rank)]
    slower = mine is not None and others and mine > max(others) * (1 + pace_rules.TIE_REL)
    every = bool(hosts) and all(r in needs and v > needs[r] * (1 + pace_rules.TIE_REL) for r, v in hosts.items())
    engine = context.get("engine") or "vllm"
    graphs_test, overlap_test = ("cuda-graphs", "async-scheduling") if engine == "vllm" else (None, None)
    graphs = f"{'HIP' if context.get('api') == 'HIP' else 'CUDA'} graphs"
    no_graph = f"the steps launched no graph: {ENGINE_GRAPHS.get(engine, 'capture the step in a graph')}"
    graph_advice = f"turn {graphs} on ({no_graph})"
    overlap = ENGINE_OVERLAP.get(engine, "overlapping the host's work with the GPU's")
    contention = (f"find what slows rank {rank}'s host"
                  + (f" ({mine:.1f} ms a step; the other ranks' {max(others):.1f} ms at most)" if slower else "")
                  + ": CPU contention and affinity of its worker (other processes, NUMA placement; pin the workers)")
    if context.get("graphs_elsewhere"):  # eager steps among graph steps (.graphs): not the host's contention
        sizes = context.get("eager_batch_sizes") or []
        bs = f" ({', '.join(str(b) for b in sizes[:6])})" if sizes else ""
        how = {"vllm": "vLLM's cudagraph_capture_sizes / max_cudagraph_capture_size in --compilation-config",
               "sglang": "SGLang's --cuda-graph-max-bs / --cuda-graph-bs"}.get(engine, "the graphs' capture sizes")
        return [(f"these steps ran without {graphs} while the steady ones ran in graphs: make the capture sizes "
                 f"cover their batch size{'s' if len(sizes) > 1 else ''}{bs} ({how})", None),
                (f"if the host is not contended: {overlap}, to overlap scheduling with the GPU", overlap_test)]
    if slower and every:
        every_host = ("every rank's host is slower than its GPU needs (ms a step: "
                      + ", ".join(f"rank {r} {v:.1f} against {needs[r]:.1f}" for r, v in sorted(hosts.items())) + ")")
        reach = f"; that alone brings the pace to the other ranks' hosts, {max(others):.1f} ms a step at best"
        if context.get("cuda_graphs") is False:
            return [(f"turn {graphs} on first, as {every_host} and graphs cut every rank's launches ({no_graph})",
                     graphs_test),
                    (f"then {contention}{reach}", None)]
        return [(f"{contention}{reach}: {every_host}", None), (f"then {overlap}, on every rank", overlap_test)]
    if slower:
        return [(contention, None), (graph_advice, graphs_test) if context.get("cuda_graphs") is False
                else (f"then {overlap}", overlap_test)]
    if context.get("cuda_graphs") is False:
        return [(graph_advice, graphs_test),
                (f"if the host is not contended: {overlap}, to overlap scheduling with the GPU", overlap_test)]
    return [(f"{contention}, then {overlap}", overlap_test),
            ("compare with a run on an idle host, to tell contention from the engine's own per-step CPU time", None)]


def _r(v: float) -> float:
    return round(float(v), 4)
