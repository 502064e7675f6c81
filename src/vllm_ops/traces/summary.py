"""Where decode time goes: per-rank category breakdown and skew-corrected all-reduce.

Semantics (issue 3):

* A *step* is a ``gpu_user_annotation`` span whose name matches the decode (or
  prefill) pattern. A GPU activity (``kernel``, ``gpu_memcpy``, ``gpu_memset``)
  belongs to a step when its start lies inside the span (``start <= ts < end``) on
  the same rank. The *CUDA time* of a step is the sum of its activities' durations
  (overlapping streams are summed, not merged).
* The default decode pattern matches vLLM's pure decode steps (no prefill, at least
  one generation request; an empty ``execute_context_0(0)_generation_0(0)`` step is
  not one); when no rank has any, spans named ``ProfilerStep#N`` are used instead (and
  a warning says so).
* GPU time is *measured* on a rank only when its trace holds GPU kernel events
  (``gpu_kernels`` > 0, ``gpu_time_measured``). A trace without any (vLLM's CPU
  backend, or a profile taken without CUDA activities) has nothing to measure: its
  CUDA time, category and all-reduce figures are null, never zero, it is left out of
  every group-wide figure, and a warning says so. Its steps are still counted, from
  the CPU annotations (``user_annotation`` spans of the same names, ``steps_from``),
  and ``step_wall_ms_per_step`` is then their CPU wall time.
* All-reduce skew: the k-th all-reduce call (in start order, inside decode steps)
  of every rank is one collective. Its transfer time is the *minimum* duration
  over ranks, since the last rank to arrive waits least; what a rank spends above
  that minimum is waiting for the others.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from statistics import fmean

from .categories import ALLREDUCE, Classifier, Rule, parse_rules
from .errors import TraceInputError
from .reader import KindTotals, TraceData, find_trace_files, rank_from_filename, read_trace

DEFAULT_DECODE_PATTERN = r"^execute_(?:\d+_)?context_0\([\d_]*\)_generation_[1-9]\d*\([\d_]*\)$"
FALLBACK_DECODE_PATTERN = r"^ProfilerStep#\d+$"
DEFAULT_PREFILL_PATTERN = r"^execute_(?:\d+_)?context_[1-9]\d*\([\d_]*\)_generation_\d+\([\d_]*\)$"
NCCL_ALLREDUCE_PATTERN = r"nccl(?:Dev)?Kernel_AllReduce"

_DECODE, _FALLBACK, _PREFILL = "decode", "fallback", "prefill"
# Said of a rank whose trace holds no GPU kernel events; the CLI, the Markdown and the
# campaign report use the same words.
NOT_MEASURED = "no GPU kernel events in the trace (CPU-only run?): GPU time and all-reduce share not measured"


def summarize(paths: str | Sequence[str], *, decode_pattern: str | None = None,
              prefill_pattern: str | None = None, keep_going: bool = False, top: int = 10,
              categories: object = None, jobs: int | None = None, parser: str = "auto") -> dict:
    """Summarize the traces of one run (one file per rank; directories are expanded).

    ``categories`` adds classification rules ahead of the built-in table (see
    :func:`vllm_ops.traces.categories.parse_rules` for the accepted shapes).
    ``jobs`` bounds the worker processes (default: one per file, at most one per
    CPU). Raises :class:`TraceInputError` with a one-line message on bad input;
    with ``keep_going`` a bad file only adds a warning, unless every file is bad.
    """
    if isinstance(top, bool) or not isinstance(top, int) or top < 0:
        raise TraceInputError(f"top must be a non-negative integer, got {top!r}")
    user_decode = decode_pattern is not None
    patterns = {
        _DECODE: _compile("decode_pattern", decode_pattern or DEFAULT_DECODE_PATTERN),
        _PREFILL: _compile("prefill_pattern", prefill_pattern or DEFAULT_PREFILL_PATTERN),
    }
    if not user_decode:
        patterns[_FALLBACK] = re.compile(FALLBACK_DECODE_PATTERN)
    rules = parse_rules(categories)
    Classifier(rules)  # validate the user's regexes here, once, with a clean message
    files = find_trace_files(paths)
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise TraceInputError(f"jobs must be a positive integer, got {jobs!r}")
    tasks = [(f, {k: p.pattern for k, p in patterns.items()}, rules, top, parser) for f in files]
    workers = min(len(files), jobs or _cpu_count())
    if workers <= 1:
        results = [_rank_worker(t) for t in tasks]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_rank_worker, tasks))

    warnings: list[str] = []
    ranks: list[dict] = []
    errors: list[str] = []
    for ok, value in results:
        if ok:
            ranks.append(value)
        else:
            errors.append(value)
    if errors and not keep_going:
        raise TraceInputError(errors[0] + ("" if len(errors) == 1 else f" (and {len(errors) - 1} more bad files)"))
    if not ranks:
        raise TraceInputError(f"{errors[0]} (no readable trace left)")
    warnings.extend(f"skipped {e}" for e in errors)
    return _combine(ranks, patterns, user_decode, warnings)


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

def _rank_worker(task) -> tuple[bool, object]:
    """Runs in a worker process: read one file and reduce it to small per-kind stats."""
    path, pattern_texts, rules, top, parser = task
    try:
        patterns = {k: re.compile(p) for k, p in pattern_texts.items()}
        classifier = Classifier(rules)
        data = read_trace(path, patterns, parser=parser, keep_calls=allreduce_calls(classifier))
        return True, summarize_rank(data, classifier, top)
    except TraceInputError as exc:
        return False, str(exc)


def allreduce_calls(classifier: Classifier):
    """The ``keep_calls`` for :func:`read_trace`: keep every all-reduce call inside a step,
    which the cross-rank skew correction pairs call by call."""
    return lambda name, cat: classifier.classify(name, cat) == ALLREDUCE


def summarize_rank(data: TraceData, classifier: Classifier, top: int = 10) -> dict:
    """Reduce one rank's TraceData (read with ``keep_calls=allreduce_calls(classifier)``)
    to the figures the combined summary needs."""
    cats = [classifier.classify(n, c) for n, c in zip(data.names, data.name_cats)]
    nccl = re.compile(NCCL_ALLREDUCE_PATTERN)
    is_nccl = [c == ALLREDUCE and bool(nccl.search(n)) for n, c in zip(data.names, cats)]
    out = {
        "file": data.path,
        "parser": data.parser,
        "rank": data.rank,
        "rank_from": "distributedInfo" if data.rank is not None else None,
        "world_size": data.world_size,
        "device": _device_name(data),
        "activities": data.activities,
        "gpu_kernels": data.kernels,
        "bad_events": data.bad_events,
        "gpu_annotation_names": data.gpu_annotation_names.most_common(8),
        "cpu_annotation_names": data.cpu_annotation_names.most_common(8),
        "graph_launches": len(data.graph_launch_corr),
        "graph_launches_without_activity": data.graph_launches_without_activity,
        "kinds": {},
    }
    for kind, totals in data.kinds.items():
        cpu_spans = data.cpu_spans.get(kind) or []
        if not data.kernels and not totals.spans and cpu_spans:
            out["kinds"][kind] = _cpu_kind_stats(cpu_spans)
        else:
            out["kinds"][kind] = _kind_stats(data, totals, cats, is_nccl, classifier, top)
    if out["kinds"].get(_DECODE, {}).get("steps"):
        out["kinds"].pop(_FALLBACK, None)  # the fallback only matters where nothing else matched
    return out


def _device_name(data: TraceData) -> str | None:
    if not data.activity_pids:
        return None
    pid = data.activity_pids.most_common(1)[0][0]
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return None
    return data.devices.get(pid)


def _kind_stats(data: TraceData, totals: KindTotals, cats: list, is_nccl: list,
                classifier: Classifier, top: int) -> dict:
    # The reader added the activities up per name, over the union of the spans (an
    # activity inside overlapping spans is counted once), and kept the all-reduce calls.
    spans = totals.spans
    tot, cnt = totals.total_us, totals.calls
    n_names = len(data.names)
    # same order whichever parser read the file
    ar_calls = sorted(totals.kept, key=lambda c: (c[0], c[1], data.names[c[2]]))
    steps = len(spans)
    cuda_us = sum(tot)
    by_cat = dict.fromkeys(classifier.categories, 0.0)
    for nid, us in enumerate(tot):
        if cnt[nid]:
            by_cat[cats[nid]] = by_cat.get(cats[nid], 0.0) + us
    ranked = sorted((i for i in range(n_names) if cnt[i]), key=lambda i: (-tot[i], data.names[i]))[:top]
    return {
        "steps": steps,
        "steps_from": "gpu_user_annotation" if steps else None,
        "overlapping_spans": totals.overlaps,
        "wall_us": sum(d for _, d, _ in spans),
        "cuda_us": cuda_us,
        "activities_in_steps": sum(cnt),
        "category_us": by_cat,
        "top": [(data.names[i], cats[i], tot[i], cnt[i]) for i in ranked],
        "allreduce_us": sum(d for _, d, _ in ar_calls),
        "allreduce_nccl_us": sum(d for _, d, nid in ar_calls if is_nccl[nid]),
        "allreduce_durations": [d for _, d, _ in ar_calls],
        "allreduce_names": [data.names[nid] for _, _, nid in ar_calls],
    }


def _cpu_kind_stats(spans: list[tuple[float, float, str]]) -> dict:
    """The steps of a rank without GPU kernels, from its CPU annotations: they are counted
    and timed (CPU wall time), but there is no GPU time in them to add up (None, not 0)."""
    totals = KindTotals(spans=list(spans))
    totals.close_spans()
    return {
        "steps": len(spans),
        "steps_from": "user_annotation",
        "overlapping_spans": totals.overlaps,
        "wall_us": sum(d for _, d, _ in spans),
        "cuda_us": None,
        "activities_in_steps": 0,
        "category_us": {},
        "top": [],
        "allreduce_us": None,
        "allreduce_nccl_us": None,
        "allreduce_durations": [],
        "allreduce_names": [],
    }


# --------------------------------------------------------------------------- across ranks

def _combine(ranks: list[dict], patterns: dict, user_decode: bool, warnings: list[str]) -> dict:
    _assign_ranks(ranks, warnings)
    ranks.sort(key=lambda r: r["rank"])
    world = max((r["world_size"] for r in ranks if r["world_size"]), default=None)
    if world is not None:
        present = {r["rank"] for r in ranks}
        missing = [i for i in range(world) if i not in present]
        if missing:
            warnings.append(
                f"world_size is {world} but {len(missing)} of the {world} ranks have no trace here "
                f"(missing: {_ranges(missing)}); group-wide figures cover only ranks {_ranges(sorted(present))}."
            )

    decode_kind = _DECODE
    decode_used = patterns[_DECODE].pattern
    if not user_decode and not any(r["kinds"][_DECODE]["steps"] for r in ranks):
        if any(r["kinds"].get(_FALLBACK, {}).get("steps") for r in ranks):
            decode_kind = _FALLBACK
            decode_used = patterns[_FALLBACK].pattern
            warnings.append(
                "no vLLM decode steps (execute_context_0(...)_generation_N(...)) were found; "
                "ProfilerStep#N spans are used as decode steps instead."
            )

    for r in ranks:
        _not_measured_warning(r, decode_kind, warnings)
        _graph_warning(r, warnings)
        if r["bad_events"]:
            warnings.append(f"rank {r['rank']} ({_base(r)}): {r['bad_events']} events lacked a name, ts or dur "
                            "and were ignored.")
    decode_entries = [_rank_entry(r, decode_kind, "decode_steps") for r in ranks]
    _step_warnings(ranks, decode_kind, decode_used, "decode", warnings)
    allreduce = _allreduce(ranks, decode_kind, warnings)
    unmeasured = [r["rank"] for r in ranks if not _measured(r)]
    if unmeasured and len(unmeasured) < len(ranks):
        measured = sorted(r["rank"] for r in ranks if _measured(r))
        one = len(unmeasured) == 1
        warnings.append(
            f"{len(unmeasured)} of the {len(ranks)} ranks ({_ranks_text(unmeasured)}) {'has' if one else 'have'} "
            f"no GPU kernel events in "
            f"{'its trace' if one else 'their traces'}: GPU time and all-reduce share not measured there, so the "
            f"group-wide figures (all-reduce means, skew correction) cover only {_ranks_text(measured)}."
        )
    prefill = [_rank_entry(r, _PREFILL, "prefill_steps") for r in ranks if r["kinds"][_PREFILL]["steps"]]
    for r in ranks:
        st = r["kinds"][_PREFILL]
        if st["steps"] and st["overlapping_spans"]:
            warnings.append(f"rank {r['rank']} ({_base(r)}): {st['overlapping_spans']} prefill spans overlap "
                            "the one before; activities in the overlap are counted once.")
    return {
        "decode_pattern": decode_used,
        "prefill_pattern": patterns[_PREFILL].pattern,
        "world_size": world,
        "gpu_time_measured": len(unmeasured) < len(ranks),
        "ranks_without_gpu_kernels": unmeasured,
        "ranks": decode_entries,
        "allreduce": allreduce,
        "prefill": prefill,
        "warnings": warnings,
    }


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


def _rank_entry(r: dict, kind: str, steps_key: str) -> dict:
    st = r["kinds"][kind]
    steps = st["steps"]
    has_time = steps > 0 and _measured(r)
    cuda_us = st["cuda_us"]

    def per_step(us: float) -> float | None:
        return _ms(us / steps) if has_time else None

    def share(us: float) -> float | None:
        return _share(us / cuda_us) if has_time and cuda_us > 0 else None

    ar_calls = len(st["allreduce_durations"])
    return {
        "rank": r["rank"],
        "file": r["file"],
        "device": r["device"],
        "gpu_kernels": r["gpu_kernels"],
        "gpu_time_measured": _measured(r),
        steps_key: steps,
        "steps_from": st["steps_from"],
        "cuda_ms_per_step": per_step(cuda_us),
        "step_wall_ms_per_step": _ms(st["wall_us"] / steps) if steps else None,
        "categories": {
            name: {"ms_per_step": per_step(us), "share": share(us)} for name, us in st["category_us"].items()
        } if has_time else {},
        "top_kernels": [
            {"name": name, "category": cat, "ms_per_step": per_step(us), "calls_per_step": round(n / steps, 3)}
            for name, cat, us, n in st["top"]
        ] if has_time else [],
        "allreduce_ms_per_step": per_step(st["allreduce_us"]),
        "allreduce_share": share(st["allreduce_us"]),
        "allreduce_nccl_ms_per_step": per_step(st["allreduce_nccl_us"]),
        "allreduce_calls_per_step": round(ar_calls / steps, 3) if has_time else None,
    }


def _allreduce(ranks: list[dict], kind: str, warnings: list[str]) -> dict:
    live = [r for r in ranks if r["kinds"][kind]["steps"] and _measured(r)]
    empty = {
        "share_mean": None, "ms_per_step_mean": None, "ms_per_step_skew_corrected": None,
        "wait_ms_per_step_by_rank": {}, "calls_matched": 0,
        "nccl_share_mean": None, "nccl_ms_per_step_mean": None,
        "share_by_rank": {}, "ms_per_step_by_rank": {},
    }
    if not live:
        return empty
    stats = {r["rank"]: r["kinds"][kind] for r in live}
    share_by = {k: s["allreduce_us"] / s["cuda_us"] if s["cuda_us"] else 0.0 for k, s in stats.items()}
    us_by = {k: s["allreduce_us"] / s["steps"] for k, s in stats.items()}
    nccl_share = [s["allreduce_nccl_us"] / s["cuda_us"] if s["cuda_us"] else 0.0 for s in stats.values()]
    nccl_us = [s["allreduce_nccl_us"] / s["steps"] for s in stats.values()]
    out = dict(empty)
    out.update({
        "share_mean": _share(fmean(share_by.values())),
        "ms_per_step_mean": _ms(fmean(us_by.values())),
        "nccl_share_mean": _share(fmean(nccl_share)),
        "nccl_ms_per_step_mean": _ms(fmean(nccl_us)),
        "share_by_rank": {str(k): _share(v) for k, v in share_by.items()},
        "ms_per_step_by_rank": {str(k): _ms(v) for k, v in us_by.items()},
    })
    calls = {k: s["allreduce_durations"] for k, s in stats.items()}
    counts = {k: len(v) for k, v in calls.items()}
    matched = min(counts.values())
    if matched == 0:
        if any(counts.values()):
            warnings.append("all-reduce calls do not match across ranks: some ranks have none in their "
                            f"steps ({_per_rank(counts)}); no skew correction.")
        return out
    if len(set(counts.values())) > 1:
        warnings.append(f"all-reduce calls do not match across ranks ({_per_rank(counts)} calls in decode "
                        f"steps); only the first {matched} of each rank were paired as collectives.")
    names = {k: s["allreduce_names"] for k, s in stats.items()}
    mismatched = sum(1 for k in range(matched) if len({names[r][k] for r in names}) > 1)
    if mismatched:
        warnings.append(f"{mismatched} of {matched} paired all-reduce calls run different kernels on different "
                        "ranks; the pairing by call order may be off.")
    mins = [min(t) for t in zip(*(v[:matched] for v in calls.values()))]
    per_call_min = sum(mins) / matched
    calls_per_step = {k: counts[k] / stats[k]["steps"] for k in stats}
    wait = {}
    for k, v in calls.items():
        extra = sum(d - m for d, m in zip(v, mins))
        wait[str(k)] = _ms(extra / matched * calls_per_step[k])
    out.update({
        "ms_per_step_skew_corrected": _ms(per_call_min * fmean(calls_per_step.values())),
        "wait_ms_per_step_by_rank": wait,
        "calls_matched": matched,
    })
    if len(live) == 1:
        warnings.append("only one rank has decode steps with GPU kernels: the skew correction needs every rank "
                        "of the group, so ms_per_step_skew_corrected is just that rank's own all-reduce time.")
    return out


def _step_warnings(ranks: list[dict], kind: str, pattern: str, label: str, warnings: list[str]) -> None:
    for r in ranks:
        st = r["kinds"][kind]
        where = f"rank {r['rank']} ({_base(r)})"
        if not st["steps"] and not _measured(r) and not r["gpu_annotation_names"]:
            seen = ", ".join(f"{n} x{c}" for n, c in r["cpu_annotation_names"]) or "none at all"
            warnings.append(f"{where}: no {label} steps match '{pattern}'; CPU annotation names seen: {seen}.")
        elif not st["steps"]:
            seen = ", ".join(f"{n} x{c}" for n, c in r["gpu_annotation_names"]) or "none at all"
            msg = f"{where}: no {label} steps match '{pattern}'; GPU annotation names seen: {seen}."
            if not r["gpu_annotation_names"] and r["cpu_annotation_names"]:
                cpu = ", ".join(f"{n} x{c}" for n, c in r["cpu_annotation_names"])
                msg += (f" CPU annotations exist ({cpu}) but have no GPU projection "
                        "(gpu_user_annotation), so kernels cannot be attributed to steps.")
            warnings.append(msg)
        elif _measured(r) and not st["activities_in_steps"]:
            warnings.append(f"{where}: {st['steps']} {label} steps found but no GPU activity starts inside them.")
        if st["overlapping_spans"]:
            warnings.append(f"{where}: {st['overlapping_spans']} {label} spans overlap the one before; "
                            "activities in the overlap are counted once.")
    counts = {r["rank"]: r["kinds"][kind]["steps"] for r in ranks}
    if len(set(counts.values())) > 1:
        warnings.append(f"ranks have different {label} step counts ({_per_rank(counts)}); "
                        "per-step figures are per rank.")


def _measured(r: dict) -> bool:
    """Whether the rank's trace holds GPU kernel events, so that its GPU time is a measurement."""
    return r["gpu_kernels"] > 0


def _not_measured_warning(r: dict, kind: str, warnings: list[str]) -> None:
    if _measured(r):
        return
    msg = f"rank {r['rank']} ({_base(r)}): {NOT_MEASURED}; its GPU figures are null, not zero"
    st = r["kinds"][kind]
    if st["steps_from"] == "user_annotation":
        msg += f"; its {st['steps']} decode steps are counted from the CPU annotations (user_annotation)"
    if r["activities"]:
        msg += f" ({r['activities']} memory copies or sets are all the GPU activity it recorded)"
    warnings.append(msg + ".")


def _graph_warning(r: dict, warnings: list[str]) -> None:
    missing = r["graph_launches_without_activity"]
    if missing:
        warnings.append(
            f"rank {r['rank']} ({_base(r)}): {missing} of {r['graph_launches']} cudaGraphLaunch calls have no "
            "recorded GPU activity: kernels replayed from CUDA graphs are missing from the trace, so CUDA time "
            "and shares cover only what was recorded (profile with graph kernels traced, or --enforce-eager)."
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


def _ms(us: float) -> float:
    return round(us / 1000.0, 4)


def _share(x: float) -> float:
    return round(x, 4)


__all__ = [
    "DEFAULT_DECODE_PATTERN", "DEFAULT_PREFILL_PATTERN", "FALLBACK_DECODE_PATTERN",
    "NCCL_ALLREDUCE_PATTERN", "NOT_MEASURED", "Rule", "summarize", "summarize_rank",
]
