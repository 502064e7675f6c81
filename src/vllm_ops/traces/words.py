"""The summary's prose: the analyzers' :class:`.notes.Note` as the ``warnings`` a reader reads
(:func:`warnings`), and the verdict in a few words (:func:`describe`). Nothing here computes a figure;
every number is a note's fact or the verdict's evidence, as the analyzers set it."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence

from .. import fabric as fabric_mod
from .notes import SECTIONS, Note

__all__ = ["NOT_MEASURED", "WORDS", "describe", "note_words", "ranges", "warnings"]

# Said of a rank whose trace holds no GPU kernel events; the CLI, the Markdown and the
# campaign report use the same words.
NOT_MEASURED = "no GPU kernel events in the trace (CPU-only run?): GPU time and all-reduce share not measured"


def warnings(notes: Iterable[Note]) -> list[str]:
    """The notes' words, section by section (:data:`.notes.SECTIONS`), each section in the notes' order."""
    notes = list(notes)
    return [note_words(n) for section in SECTIONS for n in notes if n.section == section]


def note_words(n: Note) -> str:
    """One note's words (:data:`WORDS`)."""
    try:
        say = WORDS[n.code]
    except KeyError:
        raise ValueError(f"no words for a note of code {n.code!r}") from None
    return say(n.facts)


def _where(f: Mapping) -> str:
    return f"rank {f['rank']} ({os.path.basename(f['file'])})"


def _ranks_missing(f: Mapping) -> str:
    cover = f["coverage"]
    fetch = ", ".join(f"rank {x['rank']} ({x['glob']})" for x in cover["fetch"][:4])
    more = f" and {len(cover['fetch']) - 4} more" if len(cover["fetch"]) > 4 else ""
    world = cover["world_size"]
    return (f"world_size is {world} but {len(cover['missing'])} of the {world} ranks have no "
            f"trace here (missing: {ranges(cover['missing'])}); group-wide figures cover only ranks "
            f"{ranges(cover['present'])}. No communication verdict without them: fetch {fetch}{more} and summarize "
            "every rank together.")


def _profiler_steps(f: Mapping) -> str:
    msg = ("no vLLM decode steps (execute_context_0(...)_generation_N(...)) were found; ProfilerStep#N spans are "
           "used as decode steps instead")
    if f["withheld"]:
        msg += f"; {f['withheld']}"
    return msg + "."


def _phases_named(f: Mapping) -> str:
    return (f"ProfilerStep#N spans are not used as decode steps: the annotations name phases "
            f"({', '.join(f['phase_names'][:4])}), which a ProfilerStep would mix; "
            + (f"run {f['command']}." if f["command"] else "name the decode steps with --decode-pattern REGEX."))


def _not_measured(f: Mapping) -> str:
    msg = f"{_where(f)}: {NOT_MEASURED}; its GPU figures are null, not zero"
    if f["cpu_steps"]:
        msg += f"; its {f['cpu_steps']} decode steps are counted from the CPU annotations (user_annotation)"
    if f["activities"]:
        msg += f" ({f['activities']} memory copies or sets are all the GPU activity it recorded)"
    return msg + "."


def _graphs_missing(f: Mapping) -> str:
    hip = f["api"] == "HIP"
    return (f"{_where(f)}: {f['missing']} of {f['launches']} {'hip' if hip else 'cuda'}GraphLaunch "
            f"calls have no recorded GPU activity: kernels replayed from {'HIP' if hip else 'CUDA'} graphs are missing "
            "from the trace, so busy time and shares cover only what was recorded (profile with graph kernels "
            "traced, or --enforce-eager).")


def _repeated_ids(f: Mapping) -> str:
    seen = (f": {f['captures']} captures concatenated (the ids start again), each with its own first step"
            if f["captures"] > 1 else " (a trace concatenated from several captures?)")
    return (f"{_where(f)}: {f['n']} step annotations repeat the External id of another{seen}: "
            + ("CPU and GPU step spans are paired by order instead." if f["pairing"] == "order" else
               "their CPU and GPU spans are not paired." if f["steps_from"] == "gpu_user_annotation" else
               "the steps come from the CPU annotations alone."))


def _no_decode_steps(f: Mapping) -> str:
    extra = ""
    if f["prefill"] or f["mixed"]:
        extra = (f" (found instead: {f['prefill']} prefill and {f['mixed']} mixed steps"
                 + (f", the mixed ones holding {f['mixed_requests']} decode requests" if f["mixed"] else "") + ")")
    elif f["suggested"]:
        extra = f" (try --decode-pattern {shlex.quote(f['suggested'])})"
    gpu = ", ".join(f"{n} x{c}" for n, c in f["gpu_names"])
    msg = (f"{_where(f)}: no decode steps match '{f['pattern']}'{extra}; GPU annotation names seen: "
           f"{gpu or 'none at all'}")
    if not f["gpu_names"]:
        cpu = ", ".join(f"{n} x{c}" for n, c in f["cpu_names"])
        msg += f"; CPU annotation names seen: {cpu or 'none at all'}"
    return msg + "."


def _group(f: Mapping) -> str:
    return f"all-reduce group {f['group'] or '(unnamed)'}"


def _left_out(f: Mapping) -> str:
    who = "" if f["rank"] is None else f"rank {f['rank']} "
    return f"steady state: {who}decode step {f['index']} left out of the steady figures: {f['reason']}."


def _stall(f: Mapping) -> str:
    first = " (its capture's first step)" if f["first_in_capture"] else ""
    return (f"rank {f['rank']}: decode step {f['index']}{first} is a host stall: "
            f"{f['host_ms']:.2f} ms outside its GPU window, {f['ratio'] or '>'}x the rank's "
            f"median host time ({f['median_host_ms']:.2f} ms), {100 * (f['time_share'] or 0):.0f}% of its decode time.")


def _regime(f: Mapping) -> str:
    return (f"steady state: {f['count']} of {f['decode_steps']} decode steps "
            f"({100 * f['time_share']:.0f}% of the decode time) left out of the steady figures are a "
            f"regime of their own ({f['side']} steps" + (", run without CUDA graphs" if f["eager"] else "")
            + f"): {describe(f['verdict'])}.")


def _ranks_unmeasured(f: Mapping) -> str:
    unmeasured, one = f["unmeasured"], len(f["unmeasured"]) == 1
    return (f"{len(unmeasured)} of the {f['ranks']} ranks ({_ranks_text(unmeasured)}) {'has' if one else 'have'} "
            f"no GPU kernel events in {'its trace' if one else 'their traces'}: GPU time and all-reduce share not "
            f"measured there, so the group-wide figures (all-reduce means, skew correction) cover only "
            f"{_ranks_text(f['measured'])}.")


# A note's code -> its words (over the note's facts).
WORDS: dict[str, Callable[[Mapping], str]] = {
    # reading the files (.summary)
    "unreadable": lambda f: f"skipped {f['error']}",
    "skipped": lambda f: f"skipped {f['file']}: {f['why']}.",
    "rank_by_order": lambda f: (f"{f['file']}: no distributedInfo and no rank{{N}} in the file name; "
                                f"treated as rank {f['rank']}."),
    # the group (.coverage) and the steps chosen (.findings)
    "ranks_missing": _ranks_missing,
    "profiler_steps": _profiler_steps,
    "phases_named": _phases_named,
    # what a rank's trace lacks (.run)
    "not_measured": _not_measured,
    "graphs_missing": _graphs_missing,
    "bad_events": lambda f: f"{_where(f)}: {f['n']} events lacked a name, ts or dur and were ignored.",
    "unattributed": lambda f: (f"{_where(f)}: steps found from CPU annotations, but {f['n']} of {f['activities']} "
                               "GPU activities have no launch call with their correlation in the trace, so they could "
                               "not be attributed to a step."),
    # .sanity
    "negative_durations": lambda f: (f"{_where(f)}: {f['n']} GPU activities or step annotations have a negative "
                                     "duration and were dropped."),
    "repeated_ids": _repeated_ids,
    "refused": lambda f: f["reason"][0].upper() + f["reason"][1:] + ".",
    # the step spans (.run)
    "no_decode_steps": _no_decode_steps,
    "no_activity_in_steps": lambda f: f"{_where(f)}: {f['steps']} decode steps found but no GPU activity starts inside "
                                      "them.",
    "nested_spans": lambda f: (f"{_where(f)}: {f['n']} step annotations lie inside another step annotation (two names "
                               "for one step, as SGLang's step[...] inside execute_...): each step is counted once, as "
                               "its outer annotation."),
    "overlapping_spans": lambda f: (f"{_where(f)}: {f['n']} step spans overlap the one before; each activity is "
                                    "counted in the latest-starting span that holds it."),
    "step_counts_differ": lambda f: (f"ranks have different decode step counts ({_per_rank(f['counts'])}); per-step "
                                     "figures are per rank and the steady state is chosen rank by rank."),
    # .collectives
    "call_counts_differ": lambda f: (f"{_group(f)}: ranks have different call counts ({_per_rank(f['counts'])}); "
                                     f"only the first {f['matched']} of each were matched as collectives."),
    "one_rank_group": lambda f: (f"{_group(f)}: only rank {f['rank']} has a trace with its calls, so transfer and "
                                 "waiting cannot be told apart (the transfer shown is that rank's own kernel time)."),
    "kernels_differ": lambda f: (f"{_group(f)}: {f['n']} of {f['matched']} matched calls run different kernels on "
                                 "different ranks; the matching by call order may be off."),
    "steps_differ": lambda f: (f"{_group(f)}: {f['n']} of {f['matched']} matched calls fall in different step "
                               "indices on different ranks (ranks profiled different steps?)."),
    "floor_not_used": lambda f: (f"all-reduce floor {f['source']}: not used for group {f['group'] or '(unnamed)'}: "
                                 f"{f['why']}."),
    # .steady, .stalls, the context, the ledger, .regimes
    "left_out": _left_out,
    "stall": _stall,
    "tp_differs": lambda f: (f"tensor-parallel size {f['given']} given, the traces' world size is {f['world']}: taken "
                             "as given (pipeline or data parallel ranks?)."),
    "below_weight_floor": lambda f: (f"decode ledger: rank {f['rank']}'s GEMMs took {f['measured_ms']:.3f} ms a step, "
                                     f"less than reading its weights at {f['gbps']:.0f} GB/s allows "
                                     f"({f['floor_ms']:.3f} ms): {f['why']}."),
    "regime": _regime,
    # the figures of earlier versions (.legacy)
    "one_rank_skew": lambda f: ("only one rank has decode steps with GPU kernels: the skew correction needs every rank "
                                "of the group, so ms_per_step_skew_corrected is just that rank's own all-reduce time."),
    "ranks_unmeasured": _ranks_unmeasured,
    # the PCIe findings given (vllm_ops.fabric)
    "fabric": lambda f: f"{fabric_mod.describe(f['finding'])}.",
}


def describe(verdict: Mapping) -> str:
    """The verdict in a few words, for a headline: ``host-bound on rank 0`` (``, not steady``
    when the capture drifts; ``partial: ...`` with ranks missing)."""
    kind = verdict.get("kind") or "inconclusive"
    ev = verdict.get("evidence") or {}
    if kind == "inconclusive":
        return f"inconclusive: {verdict.get('reason') or 'nothing to judge'}"
    if kind == "partial":
        present, missing = ev.get("ranks_present") or [], ev.get("ranks_missing") or []
        return (f"partial: {_shown(present)} of {ev.get('world_size')} only ({_shown(missing)} missing), "
                "no verdict on the run")
    words = kind
    if kind == "compute-bound":
        cat = verdict.get("category")
        words = f"compute-bound ({cat})" if cat else "compute-bound"
    elif kind == "memory-bound":
        share = ev.get("hbm_share")
        if share is not None:
            words = f"memory-bound ({verdict.get('category')} at {100 * share:.0f}% of HBM bandwidth)"
        elif ev.get("gemm_bound_from") == "intensity":
            n = ev["tokens_per_step"]
            words = (f"memory-bound ({verdict.get('category')}: {n:g} token{'' if n == 1 else 's'} a step, at most "
                     f"{ev['intensity_max_flop_per_byte']:g} FLOP per weight byte against the "
                     f"{ev.get('ridge_gpu')}'s ridge of {ev['ridge_flop_per_byte']:.0f})")
        else:
            words = "memory-bound"
    elif verdict.get("rank") is not None and kind in ("host-bound", "imbalanced"):
        words = f"{kind} on rank {verdict['rank']}"
    return words + (", not steady" if ev.get("steady") is False else "")


def _shown(ranks: list) -> str:
    shown = ", ".join(str(r) for r in ranks[:8]) + (", ..." if len(ranks) > 8 else "")
    return f"rank {shown}" if len(ranks) == 1 else f"ranks {shown}"


def _ranks_text(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranges(ranks)}"


def _per_rank(d: Mapping) -> str:
    return ", ".join(f"rank {k}: {v}" for k, v in sorted(d.items()))


def ranges(nums: Iterable[int]) -> str:
    """``0-3, 5``: the numbers, runs joined."""
    nums = sorted(nums)
    parts, i = [], 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ", ".join(parts)
