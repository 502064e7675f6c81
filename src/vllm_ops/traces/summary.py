"""Where decode time goes: one summary over the traces of one run (one file per rank).

:func:`summarize` is the one entry (its choices: :class:`.options.SummaryOptions`). It reads the files
(:mod:`.ranks`), makes the typed run every analyzer reads (:mod:`.run`: the ranks, the steps chosen
by :mod:`.annotations` and :mod:`.findings`, the steady state of :mod:`.steady`, each rank's step
table of :mod:`.timeline`), then asks each question of its own analyzer, in this order:
:mod:`.coverage` (is the whole group here), :mod:`.sanity` (are the figures possible; then
:mod:`.runs`: are the files of one run), :mod:`.collectives` (transfer, waiting and the straggler
across ranks; each rank's steps then carry the split, :mod:`.steps`), :mod:`.steady` (the steps left
out), :mod:`.stalls`, :mod:`.context` (what the advisor knows of the hardware), :mod:`.pace` (who
limits the run, and is the capture steady), :mod:`.decode_ledger` (each part against its floor),
:mod:`.verdict` (what bounds the step, and what to try), :mod:`.regimes` (left-out steps that run
apart) and :mod:`.legacy` (the figures of earlier versions). Analyzers return figures and notes
(:mod:`.notes`); only :mod:`.words` writes the notes' words (``warnings``) and :mod:`.render` the page.

The summary (JSON) holds, per rank (``ranks[]``): ``steps[]``, one row per step (decode,
prefill and mixed) with the figures of :mod:`.timeline` plus ``allreduce_transfer_ms`` and
``allreduce_wait_ms`` (sums over the step's calls, :mod:`.collectives`), ``steady`` (false
for a step the steady-state rule left out) and ``left_out`` (why); ``step_stats`` (median,
p90, mean, min, max over every decode step) and ``steady_stats`` (over the steady ones that
have a period, :func:`.steady.averaged`, as every steady mean of the page);
``decomposition``: the mean steady decode step split into parts that add up to its period
(``compute_ms`` by category, ``allreduce_transfer_ms``, ``allreduce_wait_ms``,
``idle_in_window_ms``, ``host_ms``); ``by_batch_size``. Each step row also carries
``lead_ms``, ``host_blocked_ms``, ``host_step_ms``, ``host_gap_ms``, ``context_tokens`` and
``generation_tokens`` and ``key_tokens`` (:mod:`.timeline`); per rank also
``graph_launches`` and ``graph_launches_without_activity`` (graph launches whose kernels the trace
lacks), and ``gemm_intensity`` (:func:`.intensity.gemm_bound` over the steady steps: the GEMMs'
bound by arithmetic intensity, for the verdict without a checkpoint). ``context.model``: what the
trace and the checkpoint show of the model (:func:`vllm_ops.ledger.fit.facts`), computed once for
every piece of advice. Across ranks: ``steady_state`` (the rule, the steps
left out and why), ``collectives`` (groups, per-rank waits, straggler), ``verdict`` and
``context`` (what the advisor knew of the hardware; also ``engine`` and ``api``,
:mod:`.findings`), and:

* ``pace``: :mod:`.pace` over the steady decode steps: ``ranks`` (each rank's
  ``host_ms_per_step``, ``gpu_ms_per_step``, ``period_ms``, lead figures, ``steady``,
  ``bound``), ``limit``, ``bound``, ``predicted_period_ms``, ``steady``, ``drifting_rank``.
* ``regimes``: :mod:`.regimes`, each with its own ``verdict`` and ``graphs``
  (:func:`.graphs.contrast`: ``cause`` ``eager`` where its steps ran without CUDA graphs while the
  steady ones ran in graphs; its verdict's advice is then the capture sizes, not the host).
* ``stalls``: :mod:`.stalls`: ``steps`` (each ``rank``, ``index``, ``host_ms``,
  ``median_host_ms``, ``ratio``, ``time_share``, ``first_in_capture``) and the ``thresholds``;
  each also a warning.
* per rank, ``phases``: :mod:`.phases` over every step of the rank (decode, prefill and mixed,
  each its own figures: steps, time and share of the profiled step time, median period).
* ``coverage``: :mod:`.coverage` (``world_size``, ``present``, ``missing``, ``unreadable``,
  ``complete``, ``fetch``), and ``allreduce_bounds`` where ranks are missing: per rank
  :func:`.collectives.bounds` over its steady decode steps, with ``low_share`` and
  ``high_share``, those bounds over the rank's mean steady period.
* ``inputs``: ``skipped``, the files a directory held that were not read, each with why
  (:func:`.reader.find_rank_traces`; a file from a directory of rank traces with neither a rank
  in its name nor ``distributedInfo`` is skipped after it was read).
* Before any figure is set across ranks (and where :mod:`.sanity` found no impossible step),
  :mod:`.runs` checks that the files belong to one run
  (time ranges, world size, NCCL version, all-reduce calls and sizes a decode step, periods), and
  refuses them otherwise (:class:`TraceInputError` naming the files).
* ``sanity``: :mod:`.sanity`'s checks (negative durations, repeated ids and the pairing used,
  impossible steps, and ``refused``, the reason the verdict is withheld).
* ``ledger``: where a checkpoint is given (its directory, its record, or a JSON file of it), the
  decode ledger of the steady decode step (:func:`vllm_ops.ledger.decode_ledger`, whose module
  defines every figure): per rank the floors (weights and KV cache at the GPU's bandwidth, measured
  or the labelled spec; the all-reduce at the host's floor), each part measured against its floor,
  the headroom, the GEMMs' share of the bandwidth and the levers; else null. The verdict reads it
  (:mod:`.verdict`: memory-bound GEMMs, the levers in ``next``).
* ``fabric``: the PCIe findings given (:func:`vllm_ops.fabric.findings` of the capture's links,
  which the campaign's report passes), each also a warning (:func:`vllm_ops.fabric.describe`) and
  the verdict's evidence ``pcie_link``; ``[]`` when none were given.

``decode_pattern`` records the steps used: the user's, the families' (as one regex), or
``ProfilerStep#N`` (the fallback, :mod:`.findings`). Warnings come in the order a reader needs
them (:mod:`.notes`): why no decode steps were found and the pattern to try, then which ranks are
missing and what to fetch, then the PCIe findings, then the rest.

Kept from earlier versions, with their meaning unchanged: per rank ``decode_steps``,
``cuda_ms_per_step`` (kernel-time sum per decode step over *all* decode steps, so it includes
waiting inside collectives and double-counts overlapping streams), ``categories`` (the same
sum per category), ``allreduce_share`` (all-reduce kernel time over that sum: it measures
waiting as much as communication), ``top_kernels``; and ``allreduce`` across ranks, whose
``ms_per_step_skew_corrected`` is the transfer per decode step over all decode steps.

GPU time is *measured* on a rank only when its trace holds GPU kernel events
(``gpu_time_measured``). A trace without any (vLLM's CPU backend) has null GPU figures,
never zeros; it is left out of every group-wide figure, and a warning says so. Its steps
are still counted from the CPU annotations.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import (
    collectives,
    context,
    coverage,
    decode_ledger,
    findings,
    legacy,
    pace,
    regimes,
    runs,
    sanity,
    stalls,
    steady,
    steps,
    verdict,
    words,
)
from .annotations import DECODE, PREFILL
from .notes import Note, note
from .options import SummaryOptions
from .ranks import load
from .run import DEFAULT_PREFILL_PATTERN, Run, build, step_notes, unmeasured_notes

__all__ = ["SummaryOptions", "summarize"]

# What the summary keeps of the host's measured all-reduce floor.
FLOOR_FIELDS = ("source", "world_size", "backend", "gpu_name", "nccl_version", "torch_version", "environment",
                "timing", "started_at")


def summarize(paths: str | Sequence[str], options: SummaryOptions | None = None) -> dict:
    """Summarize the traces of one run (one file per rank; directories are expanded), as
    ``options`` asks (:class:`.options.SummaryOptions`). Raises :class:`TraceInputError` with a
    one-line message on bad input; with ``keep_going`` a bad file only adds a warning, unless every
    file is bad."""
    resolved = (options or SummaryOptions()).resolve()
    loaded = load(paths, resolved)
    run, notes = build(loaded, resolved)
    return _analyze(run, loaded.notes + notes)


def _analyze(run: Run, notes: list[Note]) -> dict:
    """Every analyzer over the run, in the order the module's docstring gives, and the summary."""
    resolved, options = run.resolved, run.options
    cover, found = coverage.analyze(run)
    notes += found
    checks, found = sanity.analyze(run)
    if not checks["refused"]:  # impossible figures say the trace is damaged: no run to compare
        runs.check(run.ranks)  # files of different runs get no figure set across ranks
    notes += found + step_notes(run)
    coll, per_step, found = collectives.analyze(run, resolved.floor)
    notes += found
    entries = [steps.entry(r, run.left_by_rank.get(r["rank"], {}), per_step.get(r["rank"], {})) for r in run.ranks]
    collectives.steady_waits(coll, entries)
    steady_state, found = steady.analyze(run.left, run.left_by_rank)
    notes += found
    stall_list, found = stalls.analyze(entries)
    notes += found
    ctx, found = context.analyze(run)
    notes += found
    live = [e for e in entries if e["gpu_time_measured"] and e["decode_steps"]]
    steady_rows = {e["rank"]: [s for s in e["steps"] if s["phase"] == DECODE and s["steady"]] for e in live}
    pace_ = pace.analyze(steady_rows, not cover["complete"], {e["rank"]: e["decomposition"] for e in live})
    cover["allreduce_bounds"] = {} if cover["complete"] else collectives.partial_bounds(live, run.ranks, steady_rows)
    nothing = findings.nothing_to_judge(run.ranks, run.decode_used, options.decode_pattern is not None,
                                        run.loaded.paths, run.api, run.engine)
    ratios = [g["floor_ratio"] for g in sorted(coll["groups"], key=lambda g: -g["calls"]) if g["floor_ratio"]]
    ctx["model"] = decode_ledger.facts(entries, ctx, resolved.checkpoint)
    ledger, found = decode_ledger.analyze(entries, coll, ctx, run.world, resolved)
    notes += found
    grounds = {"straggler": coll.get("straggler"), "context": ctx, "refused": checks["refused"],
               "floor_ratio": ratios[0] if ratios else None, "coverage": cover, "withheld": run.withheld,
               "fabric": resolved.fabric}
    v = verdict.judge({str(e["rank"]): e["decomposition"] for e in entries if e.get("decomposition")},
                      grounds["straggler"], ctx, nothing[0] if nothing else checks["refused"],
                      floor_ratio=grounds["floor_ratio"], pace=pace_, coverage=cover, withheld=run.withheld,
                      missing_next=nothing[1] if nothing else None, ledger=ledger, fabric=resolved.fabric,
                      intensity={str(e["rank"]): e["gemm_intensity"] for e in entries if e.get("gemm_intensity")})
    found_regimes: list[dict] = []
    if v["kind"] != "inconclusive" or run.withheld:
        found_regimes, found = regimes.analyze(live, run.lockstep, {r["rank"]: bool(r.get("launch_apis"))
                                                                    for r in run.ranks}, steady_rows, grounds)
        notes += found
    allreduce, found = legacy.allreduce(entries, coll)
    notes += found + unmeasured_notes(run) + [note("fabric", "fabric", finding=f) for f in resolved.fabric]
    unmeasured = run.unmeasured
    return {
        "decode_pattern": run.decode_used,
        "prefill_pattern": options.prefill_pattern or DEFAULT_PREFILL_PATTERN,
        "world_size": run.world,
        "gpu_time_measured": len(unmeasured) < len(run.ranks),
        "ranks_without_gpu_kernels": unmeasured,
        "ranks": entries,
        "steady_state": steady_state,
        "pace": pace_,
        "regimes": found_regimes,
        "stalls": stall_list,
        "coverage": cover,
        "inputs": {"skipped": list(run.loaded.skipped)},
        "sanity": checks,
        "collectives": coll,
        "allreduce_floor": None if resolved.floor is None else {k: resolved.floor.get(k) for k in FLOOR_FIELDS},
        "verdict": v,
        "context": ctx,
        "ledger": ledger,
        "fabric": resolved.fabric,
        "allreduce": allreduce,
        "prefill": [legacy.phase(r, e, PREFILL) for r, e in zip(run.ranks, entries, strict=True)
                    if any(s["phase"] == PREFILL for s in r["set"]["steps"])],
        "warnings": words.warnings(notes),
    }
