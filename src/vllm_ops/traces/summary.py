"""Where decode time goes: one summary over the traces of one run (one file per rank).

This module only orchestrates; each question has its module and its definitions there:
:mod:`.annotations` (which spans are steps, and of which phase), :mod:`.findings` (which steps
to use, whose trace it is, what to say when there is nothing to judge), :mod:`.timeline` (a
step's window, busy, idle and period on one rank), :mod:`.sanity` (are the figures possible),
:mod:`.steady` (statistics and the steady-state rule), :mod:`.regimes` (left-out steps that run
apart), :mod:`.collectives` (transfer, waiting and the straggler across ranks),
:mod:`.coverage` (is the whole group here), :mod:`.pace` (who limits the run, and is the
capture steady) and :mod:`.verdict` (what bounds the step, and what to try).

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
them: why no decode steps were found and the pattern to try, then which ranks are missing and
what to fetch, then the rest.

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

import os
import re
import shlex
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from statistics import fmean

import numpy as np

from .. import fabric as fabric_mod
from .. import ledger as ledger_mod
from ..allreduce import floor
from . import (
    collectives,
    coverage,
    findings,
    graphs,
    intensity,
    pace,
    phases,
    regimes,
    runs,
    sanity,
    stalls,
    steady,
    timeline,
    verdict,
)
from .annotations import DECODE, MIXED, PREFILL, StepMatcher
from .categories import ALLREDUCE, Classifier, Rule, parse_rules
from .errors import NotATraceError, TraceInputError
from .reader import OWN_OUTPUT, TraceData, file_id, find_rank_traces, rank_from_filename, read_trace

# The decode steps the default finds (vLLM's native and detailed names, SGLang's), as one regex, for
# the record and the help text; the families in .annotations decide.
DEFAULT_DECODE_PATTERN = (r"^execute_(?:\d+_)?context_0\((?:[\d_]*|sq0sk0sqsq0sqsk0)\)"
                          r"_generation_[1-9]\d*\((?:[\d_]*|sq\d+sk\d+sqsq\d+sqsk\d+)\)$|^step\[DECODE bs=[1-9]")
FALLBACK_DECODE_PATTERN = r"^ProfilerStep#\d+$"
DEFAULT_PREFILL_PATTERN = (r"^execute_(?:\d+_)?context_[1-9]\d*\((?:[\d_]*|sq\d+sk\d+sqsq\d+sqsk\d+)\)"
                           r"_generation_0\((?:[\d_]*|sq0sk0sqsq0sqsk0)\)$|^step\[EXTEND bs=[1-9]")
NCCL_ALLREDUCE_PATTERN = r"nccl(?:Dev)?Kernel_AllReduce"

# Said of a rank whose trace holds no GPU kernel events; the CLI, the Markdown and the
# campaign report use the same words.
NOT_MEASURED = "no GPU kernel events in the trace (CPU-only run?): GPU time and all-reduce share not measured"
STEP_FIGURES = ("period_ms", "window_ms", "busy_ms", "idle_ms", "idle_host_ms", "host_ms", "cpu_ms",
                "allreduce_kernel_ms", "allreduce_transfer_ms", "allreduce_wait_ms")


def summarize(paths: str | Sequence[str], *, decode_pattern: str | None = None,
              prefill_pattern: str | None = None, keep_going: bool = False, top: int = 10,
              categories: object = None, jobs: int | None = None, parser: str = "auto",
              context: Mapping | None = None, allreduce_floor: object = None,
              exclude: Iterable = (), checkpoint: object = None, tokens: int | None = None,
              key_tokens: int | None = None, fabric: Sequence[Mapping] | None = None) -> dict:
    """Summarize the traces of one run (one file per rank; directories are expanded).

    ``decode_pattern`` / ``prefill_pattern`` override the annotation families for that phase
    (:class:`.annotations.StepMatcher`). ``categories`` adds classification rules ahead of the
    built-in table (:func:`.categories.parse_rules`). ``context`` tells the advisor about the
    hardware: ``interconnect`` (``nvlink``/``pcie``), ``gpu``, ``tensor_parallel_size``,
    ``cuda_graphs``; what it lacks comes from the traces where they say it. ``allreduce_floor`` is
    the host's measured all-reduce floor (:mod:`.floor`: a path to allreduce_bench's JSON, or
    the dict), set beside each collective's transfer, and its measured copy the bandwidth of the
    ledger's floors. ``checkpoint`` (a model directory, its record as ``capture.json`` keeps it,
    or a JSON file of either) turns on the decode ledger (``ledger``); ``tokens`` and
    ``key_tokens`` are given to it, replacing the steps' own (:func:`vllm_ops.ledger.decode_ledger`).
    ``fabric``: the capture's PCIe findings (:func:`vllm_ops.fabric.findings`), for the warnings
    and the verdict. ``jobs`` bounds the
    worker processes (default: one per file, at most one per CPU). ``exclude`` names files never
    to read, by path or as ``(st_dev, st_ino)`` (the file the summary is being written to;
    :func:`.reader.find_rank_traces` says how directories are read). Raises
    :class:`TraceInputError` with a one-line message on bad input; with ``keep_going`` a bad
    file only adds a warning, unless every file is bad.
    """
    if isinstance(top, bool) or not isinstance(top, int) or top < 0:
        raise TraceInputError(f"top must be a non-negative integer, got {top!r}")
    for what, pattern in (("decode_pattern", decode_pattern), ("prefill_pattern", prefill_pattern)):
        if pattern is not None:
            _compile(what, pattern)
    if context is not None and not isinstance(context, Mapping):
        raise TraceInputError(f"context must be a mapping, got {type(context).__name__}")
    measured_floor = floor.load_floor(allreduce_floor) if allreduce_floor is not None else None
    record = ledger_mod.load_checkpoint(checkpoint) if checkpoint is not None else None
    for what, value in (("tokens", tokens), ("key_tokens", key_tokens)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise TraceInputError(f"{what} must be a non-negative integer, got {value!r}")
    pcie = _fabric(fabric)
    rules = parse_rules(categories)
    Classifier(rules)  # validate the user's regexes here, once, with a clean message
    excluded = frozenset(i for i in (x if isinstance(x, tuple) else file_id(os.fspath(x)) for x in exclude)
                         if i is not None)
    files, skipped, to_prove = find_rank_traces(paths, excluded)
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise TraceInputError(f"jobs must be a positive integer, got {jobs!r}")
    tasks = [(f, decode_pattern, prefill_pattern, rules, top, parser) for f in files]
    workers = min(len(files), jobs or _cpu_count())
    if workers <= 1:
        results = [_rank_worker(t) for t in tasks]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_rank_worker, tasks))
    warnings: list[str] = []
    ranks: list[dict] = []
    errors: list[str] = []
    unreadable: list[str] = []
    given = [os.fspath(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
    named = {p for p in given if not os.path.isdir(p)}
    for (ok, value), path in zip(results, files, strict=True):
        if not ok and isinstance(value, NotATrace) and path not in named:
            skipped.append({"file": path, "why": "not a Chrome trace (no traceEvents array): another JSON file in "
                                                 "the directory"})
        elif ok and path in to_prove and value["rank"] is None:
            skipped.append({"file": path, "why": "no rank in its name and no distributedInfo: an engine or "
                                                 "front-end trace, not a rank's"})
        elif ok:
            ranks.append(value)
        else:
            errors.append(str(value))
            unreadable.append(path)
    if errors and not keep_going:
        raise TraceInputError(errors[0] + ("" if len(errors) == 1 else f" (and {len(errors) - 1} more bad files)"))
    if not ranks and not errors:
        raise TraceInputError("no rank trace to read: " + "; ".join(f"{x['file']}: {x['why']}" for x in skipped))
    if not ranks:
        raise TraceInputError(f"{errors[0]} (no readable trace left)")
    warnings.extend(f"skipped {e}" for e in errors)
    # every file a directory held and the summary did not read is said, but the summary's own output
    warnings.extend(f"skipped {x['file']}: {x['why']}." for x in skipped if x["why"] != OWN_OUTPUT)
    inputs = {"paths": given, "skipped": skipped, "unreadable": unreadable}
    return _combine(ranks, decode_pattern, prefill_pattern, dict(context or {}), warnings, measured_floor, inputs,
                    {"checkpoint": record, "tokens": tokens, "key_tokens": key_tokens,
                     "allreduce_floor": allreduce_floor}, pcie)


def _fabric(found: object) -> list[dict]:
    """The PCIe findings given, checked: a list of :func:`vllm_ops.fabric.findings`' mappings."""
    if found is None:
        return []
    if not isinstance(found, Sequence) or isinstance(found, (str, bytes)) or not all(
            isinstance(f, Mapping) and f.get("kind") in ("pcie-link-degraded", "p2p-unavailable") for f in found):
        raise TraceInputError("fabric: expected vllm_ops.fabric.findings' list of findings")
    return [dict(f) for f in found]


def _compile(what: str, pattern: str) -> re.Pattern:
    if not isinstance(pattern, str) or not pattern:
        raise TraceInputError(f"{what}: expected a non-empty regular expression, got {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise TraceInputError(f"{what}: invalid regular expression {pattern!r}: {exc}") from None


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# --------------------------------------------------------------------------- per rank

class NotATrace(str):
    """A worker's message for a file that is no Chrome trace at all (:class:`.errors.NotATraceError`)."""


def _rank_worker(task) -> tuple[bool, object]:
    """Runs in a worker process: read one file and reduce it to the rank's steps and calls."""
    path, decode_pattern, prefill_pattern, rules, top, parser = task
    try:
        classifier = Classifier(rules)
        with read_trace(path, StepMatcher(decode_pattern, prefill_pattern), parser=parser,
                        keep_calls=allreduce_calls(classifier)) as data:
            return True, summarize_rank(data, classifier, top)
    except NotATraceError as exc:
        return False, NotATrace(str(exc))
    except TraceInputError as exc:
        return False, str(exc)
    except OSError as exc:  # the per-step analysis' tables on disk (the reader's own are reported above)
        return False, f"{path}: cannot write a temporary file ({tempfile.gettempdir()}): {exc.strerror or exc}"


def allreduce_calls(classifier: Classifier):
    """The ``keep_calls`` for :func:`read_trace`: the all-reduce kernels, whose collective
    arguments (size, process group) the cross-rank matching uses."""
    return lambda name, cat: classifier.classify(name, cat) == ALLREDUCE


def summarize_rank(data: TraceData, classifier: Classifier, top: int = 10) -> dict:
    """Reduce one rank's TraceData to its steps, all-reduce calls and kernel tables."""
    out = {
        "file": data.path, "parser": data.parser, "rank": data.rank,
        "rank_from": "distributedInfo" if data.rank is not None else None,
        "world_size": data.world_size, "device": _device_name(data), "activities": data.activities,
        "gpu_kernels": data.kernels, "bad_events": data.bad_events,
        "negative_durations": data.negative_durations, "vllm_version": data.vllm_version,
        "launch_apis": dict(data.launch_apis),
        "gpu_annotation_names": data.gpu_annotation_names.most_common(8),
        "cpu_annotation_names": data.cpu_annotation_names.most_common(8),
        "graph_launches": len(data.graph_launches),
        "graph_launches_without_activity": data.graph_launches_without_activity,
        "process_groups": data.process_groups, "timeline": timeline.trace_timeline(data),
        "categories": classifier.categories, "sets": {}, "nccl_version": data.nccl_version,
        "base_time_ns": data.base_time_ns,
    }
    out["time_range_us"] = _time_range(data, out["timeline"])
    launch_ts = timeline.launch_times(data)
    try:
        _summarize_sets(data, classifier, top, launch_ts, out)
    finally:
        launch_ts.close()
    return out


def _summarize_sets(data: TraceData, classifier: Classifier, top: int, launch_ts, out: dict) -> None:
    out["activities_without_launch"] = sum(int(np.isnan(lt).sum()) for _, lt in launch_ts.chunks())
    primary = ([s for s in data.gpu_spans if s.step.phase], [s for s in data.cpu_spans if s.step.phase])
    fallback = ([s for s in data.gpu_spans if not s.step.phase], [s for s in data.cpu_spans if not s.step.phase])
    for key, (gpu, cpu) in (("primary", primary), ("fallback", fallback)):
        if key == "fallback" and (primary[0] or primary[1]):
            continue
        if not gpu and not cpu:
            continue
        (gpu, nested_gpu), (cpu, nested_cpu) = timeline.outermost(gpu), timeline.outermost(cpu)
        rows = timeline.pick_steps(data, gpu, cpu, launch_ts)
        try:
            table = timeline.step_table(data, classifier, rows)
            cats = timeline.name_categories(data, classifier)
            per_phase = {}
            for phase in (DECODE, PREFILL, MIXED):
                idx = np.array([s["index"] for s in table if s["phase"] == phase], np.int64)
                tot, cnt = timeline.kernel_totals(data, rows, idx)
                ranked = sorted((i for i in range(len(data.names)) if cnt[i]),
                                key=lambda i: (-tot[i], data.names[i]))
                per_phase[phase] = [(data.names[i], cats[i], float(tot[i]), int(cnt[i])) for i in ranked[:top]]
            calls = timeline.allreduce_calls(data, classifier, rows)
        finally:
            rows.close()
        nccl = re.compile(NCCL_ALLREDUCE_PATTERN)
        is_nccl = {n: bool(nccl.search(n)) for n in set(calls["name"])}
        calls["nccl"] = [is_nccl[n] for n in calls["name"]]
        out["sets"][key] = {"steps_from": rows.steps_from, "steps": table, "calls": calls, "top": per_phase,
                            "overlapping_spans": _overlaps(rows.spans), "pairing": rows.pairing,
                            "repeated_ids": rows.repeated_ids, "nested_spans": max(nested_gpu, nested_cpu)}


def _time_range(data: TraceData, tl: dict | None) -> list[float] | None:
    """``[first, last]`` µs of the trace's GPU activities and step annotations, in its own ``ts``
    (null when it has neither); the timeline's ``first_us``/``last_us`` are moved here."""
    ends = [(s.ts, s.ts + s.dur) for s in data.gpu_spans + data.cpu_spans]
    if tl is not None:
        ends.append((tl.pop("first_us"), tl.pop("last_us")))
    if not ends:
        return None
    return [min(a for a, _ in ends), max(b for _, b in ends)]


def _overlaps(spans) -> int:
    n, end = 0, None
    for s in spans:
        if end is not None and s.ts < end:
            n += 1
        end = max(end or s.ts + s.dur, s.ts + s.dur)
    return n


def _device_name(data: TraceData) -> str | None:
    if not data.activity_pids:
        return None
    pid = data.activity_pids.most_common(1)[0][0]
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return None
    return data.devices.get(pid)


# --------------------------------------------------------------------------- across ranks

def _combine(ranks: list[dict], decode_pattern: str | None, prefill_pattern: str | None, context: dict,
             warnings: list[str], measured_floor: dict | None = None, inputs: Mapping | None = None,
             ledger_args: Mapping | None = None, pcie: list[dict] | None = None) -> dict:
    inputs = dict(inputs or {})
    ledger_args = dict(ledger_args or {})
    pcie = list(pcie or [])
    _assign_ranks(ranks, warnings)
    ranks.sort(key=lambda r: r["rank"])
    front: list[str] = []  # what the reader needs first: why no decode steps were found
    missing_msgs: list[str] = []  # then which ranks are missing
    cover = coverage.check([r["rank"] for r in ranks], [r["file"] for r in ranks], [r["world_size"] for r in ranks],
                           inputs.get("unreadable", ()))
    world = max((r["world_size"] for r in ranks if r["world_size"]), default=None)
    if cover["missing"]:
        fetch = ", ".join(f"rank {f['rank']} ({f['glob']})" for f in cover["fetch"][:4])
        more = f" and {len(cover['fetch']) - 4} more" if len(cover["fetch"]) > 4 else ""
        world_ = cover["world_size"]
        missing_msgs.append(
            f"world_size is {world_} but {len(cover['missing'])} of the {world_} ranks have no "
            f"trace here (missing: {_ranges(cover['missing'])}); group-wide figures cover only ranks "
            f"{_ranges(cover['present'])}. No communication verdict without them: fetch {fetch}{more} and summarize "
            "every rank together."
        )
    choice = findings.choose_steps(ranks, decode_pattern)
    key = choice["key"]
    decode_used = FALLBACK_DECODE_PATTERN if choice["fallback"] else (decode_pattern or DEFAULT_DECODE_PATTERN)
    engine = findings.engine(ranks)
    api = findings.api(ranks)
    withheld = None
    if choice["fallback"]:
        msg = ("no vLLM decode steps (execute_context_0(...)_generation_N(...)) were found; ProfilerStep#N spans are "
               "used as decode steps instead")
        if engine is None:
            withheld = ("not an inference engine's trace: its steps are ProfilerStep#N spans and nothing in it is "
                        "vLLM's or SGLang's (no engine step annotation, no vllm_version), so the figures are given "
                        "and no engine advice")
            msg += f"; {withheld}"
        front.append(msg + ".")
    elif choice["phase_names"]:
        suggested = findings.suggest_pattern(ranks)
        front.append(f"ProfilerStep#N spans are not used as decode steps: the annotations name phases "
                     f"({', '.join(choice['phase_names'][:4])}), which a ProfilerStep would mix; "
                     + (f"run {findings.command(inputs.get('paths') or [], '--decode-pattern', shlex.quote(suggested))}"
                        "." if suggested else "name the decode steps with --decode-pattern REGEX."))
    for r in ranks:
        r["set"] = r["sets"].get(key) or {"steps_from": None, "steps": [], "calls": None, "top": {},
                                          "overlapping_spans": 0, "pairing": None, "repeated_ids": 0,
                                          "nested_spans": 0}
        r["decode"] = [s for s in r["set"]["steps"] if s["phase"] == DECODE]
        _not_measured_warning(r, warnings)
        _graph_warning(r, warnings, api)
        if r["bad_events"]:
            warnings.append(f"rank {r['rank']} ({_base(r)}): {r['bad_events']} events lacked a name, ts or dur "
                            "and were ignored.")
        if r["set"]["steps_from"] == "user_annotation" and _measured(r) and r["activities_without_launch"]:
            warnings.append(f"rank {r['rank']} ({_base(r)}): steps found from CPU annotations, but "
                            f"{r['activities_without_launch']} of {r['activities']} GPU activities have no launch "
                            "call with their correlation in the trace, so they could not be attributed to a step.")
    checks = sanity.check(ranks)
    if not checks["refused"]:  # impossible figures say the trace is damaged: no run to compare
        runs.check(ranks)  # files of different runs get no figure set across ranks
    _sanity_warnings(ranks, checks, warnings)
    _step_warnings(ranks, decode_used, front, warnings)
    measured = [r for r in ranks if _measured(r) and r["decode"]]

    # steady state, rule 3 across ranks with equal step counts
    lockstep = bool(measured) and len({len(r["decode"]) for r in measured}) == 1
    steady_idx = None
    if lockstep:
        left = steady.group_left_out({r["rank"]: r["decode"] for r in measured})
        left_by_rank = {r["rank"]: left for r in ranks}
        steady_idx = {s["index"] for s in measured[0]["decode"] if s["index"] not in left}
    else:
        left_by_rank = {r["rank"]: {i: "; ".join(w) for i, w in steady.left_out(r["decode"]).items()}
                        for r in measured}
        left = {}
    # collectives over every step, figures over the steady decode steps
    calls = {r["rank"]: r["set"]["calls"] for r in measured if r["set"]["calls"] is not None}
    groups = {}
    for r in measured:
        groups.update(r["process_groups"])
    decode_idx = {r["rank"]: {s["index"] for s in r["decode"]} for r in measured}
    steady_by_rank = steady_idx if lockstep else {
        r["rank"]: {s["index"] for s in r["decode"] if s["index"] not in left_by_rank.get(r["rank"], {})}
        for r in measured}
    coll = collectives.match(calls, groups, steady_by_rank, warnings, decode_idx)
    per_step = coll.pop("per_step")
    floor.annotate(coll["groups"], measured_floor)
    if measured_floor is not None:
        for g in coll["groups"]:
            if g["floor_note"]:
                warnings.append(f"all-reduce floor {measured_floor['source']}: not used for group "
                                f"{g['group'] or '(unnamed)'}: {g['floor_note']}.")
    entries = []
    for r in ranks:
        entries.append(_rank_entry(r, left_by_rank.get(r["rank"], {}), per_step.get(r["rank"], {})))
    for e in entries:
        if e["steady_steps"] is not None and e["decode_steps"]:
            wait = [s.get("allreduce_wait_ms") for s in steady.averaged(e["steps"], e["gpu_time_measured"])]
            if str(e["rank"]) in coll["by_rank"] and wait:  # not measured where a step's waiting is unknown
                coll["by_rank"][str(e["rank"])]["wait_ms_per_step"] = (
                    None if None in wait else round(fmean(wait), 4))
    steady_state = {
        "rule": steady.RULE,
        "outlier_rel": steady.OUTLIER_REL, "first_step_min_steps": steady.FIRST_STEP_MIN_STEPS,
        "left_out": [{"index": i, "reason": why} for i, why in sorted(left.items())] if left else
                    [{"rank": r, "index": i, "reason": why} for r, d in sorted(left_by_rank.items())
                     for i, why in sorted(d.items())],
    }
    for item in steady_state["left_out"]:
        who = f"rank {item['rank']} " if "rank" in item else ""
        warnings.append(f"steady state: {who}decode step {item['index']} left out of the steady figures: "
                        f"{item['reason']}.")
    stall_list = []
    for e in entries:
        if e["gpu_time_measured"] and e["decode_steps"]:
            for x in stalls.find([s for s in e["steps"] if s["phase"] == DECODE]):
                stall_list.append({"rank": e["rank"], **x})
                first = " (its capture's first step)" if x["first_in_capture"] else ""
                warnings.append(f"rank {e['rank']}: decode step {x['index']}{first} is a host stall: "
                                f"{x['host_ms']:.2f} ms outside its GPU window, {x['ratio'] or '>'}x the rank's "
                                f"median host time ({x['median_host_ms']:.2f} ms), "
                                f"{100 * (x['time_share'] or 0):.0f}% of its decode time.")
    ctx = _context(ranks, context)
    ctx.update(engine=engine, api=api)
    _check_tp(context.get("tensor_parallel_size"), world, warnings)
    live = [e for e in entries if e["gpu_time_measured"] and e["decode_steps"]]
    steady_rows = {e["rank"]: [s for s in e["steps"] if s["phase"] == DECODE and s["steady"]] for e in live}
    pace_ = _pace(steady_rows, not cover["complete"], {e["rank"]: e["decomposition"] for e in live})
    cover["allreduce_bounds"] = _bounds(live, ranks, steady_rows) if not cover["complete"] else {}
    nothing = findings.nothing_to_judge(ranks, decode_used, decode_pattern is not None, inputs.get("paths") or [],
                                        api, engine)
    missing = nothing[0] if nothing else checks["refused"]
    ratios = [g["floor_ratio"] for g in sorted(coll["groups"], key=lambda g: -g["calls"]) if g["floor_ratio"]]
    floor_ratio = ratios[0] if ratios else None
    ctx["model"] = _facts(entries, ctx, ledger_args.get("checkpoint"))
    ledger = _ledger(entries, coll, ctx, world, ledger_args, warnings)
    decomp = {str(e["rank"]): e["decomposition"] for e in entries if e.get("decomposition")}
    bound_by = {str(e["rank"]): e["gemm_intensity"] for e in entries if e.get("gemm_intensity")}
    v = verdict.judge(decomp, coll.get("straggler"), ctx, missing, floor_ratio=floor_ratio, pace=pace_,
                      coverage=cover, withheld=withheld, missing_next=nothing[1] if nothing else None,
                      ledger=ledger, fabric=pcie, intensity=bound_by)
    found = [] if v["kind"] == "inconclusive" and not withheld else regimes.find(
        {e["rank"]: [s for s in e["steps"] if s["phase"] == DECODE] for e in live}, lockstep)
    device_of = {e["rank"]: e["device"] for e in entries}
    for reg in found:
        rows = {e["rank"]: [s for s in e["steps"] if s["index"] in set(reg["steps"]) and s["phase"] == DECODE]
                for e in live if reg.get("rank", e["rank"]) == e["rank"]}
        reg_decomp = {k: _decomposition(v_) for k, v_ in rows.items()}
        seen = {r["rank"]: bool(r.get("launch_apis")) for r in ranks}
        how = [graphs.contrast(v_, steady_rows.get(k) or [], seen.get(k, False)) for k, v_ in rows.items()]
        reg["graphs"] = how[0] if how and all(h["cause"] == how[0]["cause"] for h in how) else (
            {"cause": None, "regime": None, "steady": None, "batch_sizes": []})
        reg_ctx = dict(ctx)
        if reg["graphs"]["cause"] == "eager":  # the advice for steps that ran outside the graphs
            reg_ctx.update(cuda_graphs=False, graphs_elsewhere=True, eager_batch_sizes=reg["graphs"]["batch_sizes"])
        reg["verdict"] = verdict.judge({str(k): d_ for k, d_ in reg_decomp.items() if d_},
                                       coll.get("straggler"), reg_ctx, checks["refused"], floor_ratio=floor_ratio,
                                       pace=_pace(rows, not cover["complete"], reg_decomp), coverage=cover,
                                       withheld=withheld, intensity={str(k): intensity.gemm_bound(v_, device_of.get(k))
                                                                     for k, v_ in rows.items()},
                                       fabric=pcie)
        warnings.append(f"steady state: {reg['count']} of {reg['decode_steps']} decode steps "
                        f"({100 * reg['time_share']:.0f}% of the decode time) left out of the steady figures are a "
                        f"regime of their own ({reg['side']} steps"
                        + (", run without CUDA graphs" if reg["graphs"]["cause"] == "eager" else "")
                        + f"): {verdict.describe(reg['verdict'])}.")
    allreduce = _allreduce_legacy(entries, coll, warnings)
    prefill = [_legacy_phase(r, e, PREFILL) for r, e in zip(ranks, entries, strict=True)
               if any(s["phase"] == PREFILL for s in r["set"]["steps"])]
    unmeasured = [r["rank"] for r in ranks if not _measured(r)]
    if unmeasured and len(unmeasured) < len(ranks):
        ok = sorted(r["rank"] for r in ranks if _measured(r))
        one = len(unmeasured) == 1
        warnings.append(
            f"{len(unmeasured)} of the {len(ranks)} ranks ({_ranks_text(unmeasured)}) {'has' if one else 'have'} "
            f"no GPU kernel events in {'its trace' if one else 'their traces'}: GPU time and all-reduce share not "
            f"measured there, so the group-wide figures (all-reduce means, skew correction) cover only "
            f"{_ranks_text(ok)}.")
    return {
        "decode_pattern": decode_used,
        "prefill_pattern": prefill_pattern or DEFAULT_PREFILL_PATTERN,
        "world_size": world,
        "gpu_time_measured": len(unmeasured) < len(ranks),
        "ranks_without_gpu_kernels": unmeasured,
        "ranks": entries,
        "steady_state": steady_state,
        "pace": pace_,
        "regimes": found,
        "stalls": {"steps": stall_list, "thresholds": dict(stalls.THRESHOLDS)},
        "coverage": cover,
        "inputs": {"skipped": list(inputs.get("skipped") or [])},
        "sanity": checks,
        "collectives": coll,
        "allreduce_floor": None if measured_floor is None else {
            k: measured_floor.get(k) for k in ("source", "world_size", "backend", "gpu_name", "nccl_version",
                                               "torch_version", "environment", "timing", "started_at")},
        "verdict": v,
        "context": ctx,
        "ledger": ledger,
        "fabric": pcie,
        "allreduce": allreduce,
        "prefill": prefill,
        "warnings": front + missing_msgs + [f"{fabric_mod.describe(f)}." for f in pcie] + warnings,
    }


def _ledger(entries: list[dict], coll: Mapping, ctx: Mapping, world: int | None, args: Mapping,
            warnings: list[str]) -> dict | None:
    """The decode ledger of the steady decode step (:func:`vllm_ops.ledger.decode_ledger`) where a
    checkpoint was given, over the summary's own figures; a warning for GEMMs faster than their
    weights allow (the checkpoint, the TP size or the bandwidth does not fit the run)."""
    if args.get("checkpoint") is None:
        return None
    if ctx.get("tensor_parallel_size") is None:
        raise TraceInputError("the decode ledger (checkpoint) needs the tensor-parallel size, and the traces give "
                              "none (no distributedInfo world_size): give it (context tensor_parallel_size; "
                              "--tensor-parallel-size N on the command line)")
    partial = {"ranks": entries, "collectives": coll, "context": ctx, "world_size": world}
    out = ledger_mod.decode_ledger(partial, args["checkpoint"], allreduce_floor=args.get("allreduce_floor"),
                                   tokens=args.get("tokens"), key_tokens=args.get("key_tokens"),
                                   facts=ctx.get("model"))
    for r in out["ranks"]:
        if r["gemm"]["kind"] == "below-weight-floor":
            warnings.append(f"decode ledger: rank {r['rank']}'s GEMMs took {r['gemm']['measured_ms']:.3f} ms a step, "
                            f"less than reading its weights at {r['bandwidth']['gbps']:.0f} GB/s allows "
                            f"({r['gemm']['floor_ms']:.3f} ms): {r['gemm']['why']}.")
    return out


def _facts(entries: list[dict], ctx: Mapping, checkpoint: Mapping | None) -> dict:
    """What the trace and the checkpoint show of the model, once, for the advice of the verdict, the
    regimes and the ledger (:func:`vllm_ops.ledger.fit.facts`): MoE and quantize kernels seen in the
    steady decode steps of the ranks whose kernels are all recorded."""
    seen = [e["decomposition"] for e in entries if e.get("decomposition") and not e["graph_launches_without_activity"]]
    moe = any((d["compute_ms"].get("moe_gemm") or 0) > 0 for d in seen) if seen else None
    quantized = any((d["compute_ms"].get("quantize") or 0) > 0 for d in seen) or any(
        "marlin" in k["name"].lower() for e in entries for k in e.get("top_kernels") or [])
    return ledger_mod.fit.facts(checkpoint, ctx.get("tensor_parallel_size"), ctx.get("cuda_graphs"), moe, quantized)


def _pace(rows_by_rank: Mapping[int, list[dict]], partial: bool, decomposition: Mapping[int, dict | None]) -> dict:
    """Each rank's pace over its rows and the group's (:mod:`.pace`); ``decomposition``: each
    rank's mean of the same rows (:func:`_decomposition`, computed once by the caller)."""
    per_rank = {r: pace.rank_pace(rows, [exposed_allreduce(s)[1] for s in rows], partial, decomposition.get(r))
                for r, rows in sorted(rows_by_rank.items()) if rows}
    return {**pace.group(per_rank), "ranks": {str(r): p for r, p in per_rank.items()}}


def _bounds(live: list[dict], ranks: list[dict], steady_rows: Mapping[int, list[dict]]) -> dict:
    """The all-reduce interval of each rank of a partial group (:func:`.collectives.bounds`), with
    its shares of the rank's mean steady period."""
    out = {}
    by_rank = {r["rank"]: r for r in ranks}
    for e in live:
        calls = by_rank[e["rank"]]["set"]["calls"]
        rows = steady.averaged(steady_rows.get(e["rank"]) or [])
        b = collectives.bounds(calls, [s["index"] for s in rows]) if calls is not None else None
        if b is None:
            continue
        periods = [s["period_ms"] for s in rows if s.get("period_ms") is not None]
        period = fmean(periods) if periods else None
        b["low_share"] = round(b["low_ms_per_step"] / period, 4) if period else None
        b["high_share"] = round(b["high_ms_per_step"] / period, 4) if period else None
        out[str(e["rank"])] = b
    return out


def _sanity_warnings(ranks: list[dict], checks: Mapping, warnings: list[str]) -> None:
    for r in ranks:
        key, where = str(r["rank"]), f"rank {r['rank']} ({_base(r)})"
        if key in checks["negative_durations"]:
            warnings.append(f"{where}: {checks['negative_durations'][key]} GPU activities or step annotations have a "
                            "negative duration and were dropped.")
        if key in checks["repeated_ids"]:
            how = checks["pairing"].get(key)
            captures = max((s.get("capture", 0) for s in r["set"]["steps"]), default=0) + 1
            seen = (f": {captures} captures concatenated (the ids start again), each with its own first step"
                    if captures > 1 else " (a trace concatenated from several captures?)")
            warnings.append(f"{where}: {checks['repeated_ids'][key]} step annotations repeat the External id of "
                            f"another{seen}: "
                            + ("CPU and GPU step spans are paired by order instead." if how == "order" else
                               "their CPU and GPU spans are not paired." if r["set"]["steps_from"] ==
                               "gpu_user_annotation" else "the steps come from the CPU annotations alone."))
    if checks["refused"]:
        warnings.append(checks["refused"][0].upper() + checks["refused"][1:] + ".")


def _check_tp(given: object, world: int | None, warnings: list[str]) -> None:
    """A tensor-parallel size given beside the traces' world size: refused where it cannot hold
    (larger than the world size, or not dividing it), said where it differs (pipeline or data
    parallel ranks make the world larger than the group)."""
    if given is None or world is None:
        return
    if isinstance(given, bool) or not isinstance(given, int) or given < 1:
        raise TraceInputError(f"tensor_parallel_size must be a positive integer, got {given!r}")
    if given > world or world % given:
        raise TraceInputError(f"tensor_parallel_size {given} contradicts the traces: their distributedInfo gives a "
                              f"world size of {world}, which a tensor-parallel group of {given} cannot fill; give "
                              "the server's own size, or none (the traces' world size is then used)")
    if given != world:
        warnings.append(f"tensor-parallel size {given} given, the traces' world size is {world}: taken as given "
                        "(pipeline or data parallel ranks?).")


def _context(ranks: list[dict], given: dict) -> dict:
    devices = sorted({r["device"] for r in ranks if r.get("device")})
    launches = sum(r["graph_launches"] for r in ranks)
    ctx = {
        "interconnect": given.get("interconnect"),
        "gpu": given.get("gpu") or (", ".join(devices) if devices else None),
        "tensor_parallel_size": given.get("tensor_parallel_size") or max(
            (r["world_size"] for r in ranks if r["world_size"]), default=None),
        "cuda_graphs": given.get("cuda_graphs") if given.get("cuda_graphs") is not None else (
            (launches > 0) if any(_measured(r) for r in ranks) else None),
    }
    ctx["sources"] = {k: ("given" if given.get(k) is not None else "traces" if v is not None else None)
                      for k, v in ctx.items()}
    return ctx


def _rank_entry(r: dict, left: Mapping[int, str], per_step: Mapping[int, tuple[float, float]]) -> dict:
    st = r["set"]
    rows = [dict(s) for s in st["steps"]]
    measured = _measured(r)
    for s in rows:
        t, w = per_step.get(s["index"], (None, None))
        if measured:
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
    averaged = steady.averaged(steady_rows, measured)
    entry = {
        "rank": r["rank"], "file": r["file"], "parser": r["parser"], "rank_from": r["rank_from"],
        "device": r["device"], "gpu_kernels": r["gpu_kernels"], "gpu_time_measured": measured,
        "graph_launches": r["graph_launches"], "graph_launches_without_activity": r["graph_launches_without_activity"],
        "decode_steps": len(decode), "steady_steps": len(steady_rows) if decode else None,
        "steps_from": st["steps_from"] if rows else None,
        "timeline": r["timeline"] if measured else None,
        "step_stats": {k: steady.stats(s.get(k) for s in decode) for k in STEP_FIGURES} if decode else {},
        "steady_stats": {k: steady.stats(s.get(k) for s in averaged) for k in STEP_FIGURES} if decode else {},
        "decomposition": _decomposition(averaged) if measured else None,
        "gemm_intensity": intensity.gemm_bound(averaged, r["device"]) if measured else None,
        "by_batch_size": _by_batch_size(decode),
        "phases": phases.split(rows),
        "steps": rows,
    }
    entry.update(_legacy_figures(r, decode, measured, "decode"))
    return entry


def exposed_allreduce(step: Mapping) -> tuple[float, float]:
    """A step's exposed all-reduce time (busy time when only all-reduce ran) split into
    (transfer, waiting) in proportion to its calls' transfer and waiting (ms); all of it is
    transfer where nothing was matched across ranks."""
    exposed = (step.get("busy_ms_by_category") or {}).get(ALLREDUCE, 0.0)
    t, w = step.get("allreduce_transfer_ms") or 0.0, step.get("allreduce_wait_ms") or 0.0
    return (exposed * t / (t + w), exposed * w / (t + w)) if t + w > 0 else (exposed, 0.0)


def _decomposition(rows: list[dict]) -> dict | None:
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


def _by_batch_size(decode: list[dict]) -> dict:
    groups: dict[str, list[dict]] = {}
    for s in decode:
        groups.setdefault(str(s["batch_size"]) if s["batch_size"] is not None else "unknown", []).append(s)
    return {bs: {"steps": len(rows), "steady_steps": sum(1 for s in rows if s["steady"]),
                 **{k: (steady.stats(s.get(k) for s in rows if s["steady"]) or {}).get("median")
                    for k in ("period_ms", "busy_ms", "idle_ms", "allreduce_transfer_ms", "allreduce_wait_ms")}}
            for bs, rows in sorted(groups.items(), key=lambda kv: (kv[0] == "unknown", int(kv[0]) if kv[0].isdigit()
                                                                   else 0))}


def _legacy_figures(r: dict, steps: list[dict], measured: bool, phase: str) -> dict:
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


def _legacy_phase(r: dict, entry: dict, phase: str) -> dict:
    steps = [s for s in entry["steps"] if s["phase"] == phase]
    out = {"rank": r["rank"], "file": r["file"], "device": r["device"], "gpu_kernels": r["gpu_kernels"],
           "gpu_time_measured": _measured(r), f"{phase}_steps": len(steps), "steps_from": entry["steps_from"]}
    out.update(_legacy_figures(r, steps, _measured(r), phase))
    return out


def _allreduce_legacy(entries: list[dict], coll: dict, warnings: list[str]) -> dict:
    live = [e for e in entries if e["decode_steps"] and e["gpu_time_measured"]]
    out = {"share_mean": None, "ms_per_step_mean": None, "ms_per_step_skew_corrected": None,
           "wait_ms_per_step_by_rank": {}, "calls_matched": 0, "nccl_share_mean": None,
           "nccl_ms_per_step_mean": None, "share_by_rank": {}, "ms_per_step_by_rank": {}}
    if not live:
        return out
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
        return out
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
    if len(live) == 1:
        warnings.append("only one rank has decode steps with GPU kernels: the skew correction needs every rank "
                        "of the group, so ms_per_step_skew_corrected is just that rank's own all-reduce time.")
    return out


def _assign_ranks(ranks: list[dict], warnings: list[str]) -> None:
    for r in ranks:
        if r["rank"] is None:
            guess = rank_from_filename(r["file"])
            if guess is not None:
                r["rank"], r["rank_from"] = guess, "file name"
    seen: dict[int, str] = {}
    for r in ranks:
        if r["rank"] is not None:
            if r["rank"] in seen:
                raise TraceInputError(f"{r['file']}: rank {r['rank']} is also claimed by {seen[r['rank']]}; "
                                      "give one file per rank")
            seen[r["rank"]] = r["file"]
    for r in ranks:
        if r["rank"] is None:
            free = 0
            while free in seen:
                free += 1
            r["rank"], r["rank_from"] = free, "order"
            seen[free] = r["file"]
            warnings.append(f"{r['file']}: no distributedInfo and no rank{{N}} in the file name; "
                            f"treated as rank {free}.")


def _step_warnings(ranks: list[dict], pattern: str, front: list[str], warnings: list[str]) -> None:
    """What was found instead of decode steps goes to ``front`` (the first thing to read)."""
    for r in ranks:
        where = f"rank {r['rank']} ({_base(r)})"
        steps = r["decode"]
        if not steps:
            gpu = ", ".join(f"{n} x{c}" for n, c in r["gpu_annotation_names"])
            cpu = ", ".join(f"{n} x{c}" for n, c in r["cpu_annotation_names"])
            other = [s for s in r["set"]["steps"] if s["phase"] in (PREFILL, MIXED)]
            mixed = [s for s in other if s["phase"] == MIXED]
            suggested = findings.suggest_pattern([r])
            extra = ""
            if other:
                extra = (f" (found instead: {len(other) - len(mixed)} prefill and {len(mixed)} mixed steps"
                         + (f", the mixed ones holding {sum(s['generation_requests'] or 0 for s in mixed)} decode "
                            "requests" if mixed else "") + ")")
            elif suggested and suggested != pattern:
                extra = f" (try --decode-pattern {shlex.quote(suggested)})"
            msg = (f"{where}: no decode steps match '{pattern}'{extra}; GPU annotation names seen: "
                   f"{gpu or 'none at all'}")
            if not r["gpu_annotation_names"]:
                msg += f"; CPU annotation names seen: {cpu or 'none at all'}"
            front.append(msg + ".")
        elif _measured(r) and not any(s["activities"] for s in steps):
            warnings.append(f"{where}: {len(steps)} decode steps found but no GPU activity starts inside them.")
        if r["set"].get("nested_spans"):
            warnings.append(f"{where}: {r['set']['nested_spans']} step annotations lie inside another step "
                            "annotation (two names for one step, as SGLang's step[...] inside execute_...): each "
                            "step is counted once, as its outer annotation.")
        if r["set"]["overlapping_spans"]:
            warnings.append(f"{where}: {r['set']['overlapping_spans']} step spans overlap the one before; each "
                            "activity is counted in the latest-starting span that holds it.")
    counts = {r["rank"]: len(r["decode"]) for r in ranks}
    if len(set(counts.values())) > 1:
        warnings.append(f"ranks have different decode step counts ({_per_rank(counts)}); per-step figures are per "
                        "rank and the steady state is chosen rank by rank.")


def _measured(r: dict) -> bool:
    """Whether the rank's trace holds GPU kernel events, so that its GPU time is a measurement."""
    return r["gpu_kernels"] > 0


def _not_measured_warning(r: dict, warnings: list[str]) -> None:
    if _measured(r):
        return
    msg = f"rank {r['rank']} ({_base(r)}): {NOT_MEASURED}; its GPU figures are null, not zero"
    if r["set"]["steps_from"] == "user_annotation" and r["decode"]:
        msg += f"; its {len(r['decode'])} decode steps are counted from the CPU annotations (user_annotation)"
    if r["activities"]:
        msg += f" ({r['activities']} memory copies or sets are all the GPU activity it recorded)"
    warnings.append(msg + ".")


def _graph_warning(r: dict, warnings: list[str], api: str | None) -> None:
    missing = r["graph_launches_without_activity"]
    if missing:
        hip = api == "HIP"
        warnings.append(
            f"rank {r['rank']} ({_base(r)}): {missing} of {r['graph_launches']} {'hip' if hip else 'cuda'}GraphLaunch "
            f"calls have no recorded GPU activity: kernels replayed from {'HIP' if hip else 'CUDA'} graphs are missing "
            "from the trace, so busy time and shares cover only what was recorded (profile with graph kernels "
            "traced, or --enforce-eager)."
        )


def _base(r: dict) -> str:
    return os.path.basename(r["file"])


def _ranks_text(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_ranges(ranks)}"


def _per_rank(d: dict) -> str:
    return ", ".join(f"rank {k}: {v}" for k, v in sorted(d.items()))


def _ranges(nums: Iterable[int]) -> str:
    nums = sorted(nums)
    parts, i = [], 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ", ".join(parts)


__all__ = [
    "DEFAULT_DECODE_PATTERN", "DEFAULT_PREFILL_PATTERN", "FALLBACK_DECODE_PATTERN",
    "NCCL_ALLREDUCE_PATTERN", "NOT_MEASURED", "Rule", "summarize", "summarize_rank",
]
