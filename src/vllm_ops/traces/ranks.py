"""Reading the files of one run: each rank's trace reduced, in a worker process, to its steps, its
all-reduce calls and its kernel tables (:func:`summarize_rank`), and the files that were no rank's trace
or could not be read set apart (:func:`load`), each said by a note (:mod:`.notes`)."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from . import timeline
from .annotations import DECODE, MIXED, PREFILL, StepMatcher
from .categories import ALLREDUCE, Classifier
from .errors import NotATraceError, TraceInputError
from .notes import Note, note
from .options import Resolved
from .reader import OWN_OUTPUT, TraceData, find_rank_traces, read_trace

__all__ = ["NCCL_ALLREDUCE_PATTERN", "Loaded", "allreduce_calls", "load", "summarize_rank"]

NCCL_ALLREDUCE_PATTERN = r"nccl(?:Dev)?Kernel_AllReduce"


@dataclass(frozen=True)
class Loaded:
    """The files of one run, read: ``ranks`` (each rank's reduction, :func:`summarize_rank`), ``paths``
    (as given), ``skipped`` (files a directory held that were not read, each with why), ``unreadable``
    (files that could not be read, with ``keep_going``) and ``notes``."""

    ranks: list[dict]
    paths: list[str]
    skipped: list[dict]
    unreadable: list[str]
    notes: list[Note]


def load(paths: str | Sequence[str], resolved: Resolved) -> Loaded:
    """Read every rank's file (directories expanded, :func:`.reader.find_rank_traces`), in worker
    processes; a :class:`TraceInputError` for a bad file unless ``keep_going``, or where none is left."""
    options = resolved.options
    files, skipped, to_prove = find_rank_traces(paths, resolved.excluded)
    tasks = [(f, options.decode_pattern, options.prefill_pattern, resolved.rules, options.top, options.parser)
             for f in files]
    workers = min(len(files), options.jobs or _cpu_count())
    if workers <= 1:
        results = [_rank_worker(t) for t in tasks]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_rank_worker, tasks))
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
    if errors and not options.keep_going:
        raise TraceInputError(errors[0] + ("" if len(errors) == 1 else f" (and {len(errors) - 1} more bad files)"))
    if not ranks and not errors:
        raise TraceInputError("no rank trace to read: " + "; ".join(f"{x['file']}: {x['why']}" for x in skipped))
    if not ranks:
        raise TraceInputError(f"{errors[0]} (no readable trace left)")
    # every file a directory held and the summary did not read is said, but the summary's own output
    notes = [note("unreadable", error=e) for e in errors] + [
        note("skipped", file=x["file"], why=x["why"]) for x in skipped if x["why"] != OWN_OUTPUT]
    return Loaded(ranks, given, skipped, unreadable, notes)


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


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
