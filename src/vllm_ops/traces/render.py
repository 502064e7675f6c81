"""Markdown tables of a summary, fit to paste into a report.

A rank whose trace holds no GPU kernel events (``gpu_time_measured`` false) gets no row of
GPU figures: the text says plainly that its GPU time and all-reduce share were not
measured, and a small table gives what is known (steps, their wall time and where they
were found). Summaries written before that key existed count as measured.

The decode ledger (the summary's ``ledger``, :mod:`vllm_ops.ledger`) gets a section of its own:
each part of the steady step beside its floor, per rank, what the ledger could not measure and
why, and what it cannot see; a figure it left null is written "not measured", never a number.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import fabric
from ..ledger import GEMM_WORDS, PARTS
from ..ledger import describe as describe_ledger
from ..records.summary import checked
from .words import NOT_MEASURED, describe

_NAME_WIDTH = 90


def to_markdown(summary: Mapping) -> str:
    """Render the dict :func:`vllm_ops.traces.summarize` returns as Markdown."""
    summary = checked(summary)
    out: list[str] = []
    ranks = summary["ranks"]
    measured = [r for r in ranks if _measured(r)]
    if measured:
        out.extend(_verdict(summary))
        out.extend(_pace(summary))
        out.extend(_coverage(summary))
        out.extend(_regimes(summary))
    out.extend(_decomposition(measured))
    out.extend(_ledger(summary))
    out.extend(_steady(summary, measured))
    out.extend(_phases(measured))
    out.extend(_stalls(summary))
    out.extend(_collectives(summary))
    out.extend(_by_batch_size(measured))
    out.extend(_steps(measured))
    out.append(f"## Decode steps (`{summary.get('decode_pattern', '')}`): kernel-time sums")
    out.append("")
    if measured:
        out.append("Kernel-time sums over every decode step, outlier steps included: overlapping streams count twice "
                   "and all-reduce time includes waiting for other ranks, so the all-reduce share measures waiting as "
                   "much as communication. The steady decomposition above is the answer; these are the raw sums.")
        out.append("")
    out.extend(_overview(ranks, "decode_steps"))
    ar = summary.get("allreduce") or {}
    if ar.get("share_mean") is not None:
        out.append("")
        out.append("### All-reduce across ranks")
        out.append("")
        out.append("| figure | value |")
        out.append("| --- | --- |")
        out.append(f"| mean share of CUDA time | {_pct(ar.get('share_mean'))} |")
        out.append(f"| mean ms per step | {_num(ar.get('ms_per_step_mean'))} |")
        out.append(f"| NCCL-only mean share | {_pct(ar.get('nccl_share_mean'))} |")
        out.append(f"| skew-corrected ms per step (min over ranks per call) | "
                   f"{_num(ar.get('ms_per_step_skew_corrected'))} |")
        out.append(f"| calls matched across ranks | {ar.get('calls_matched', 0)} |")
        for rank, wait in (ar.get("wait_ms_per_step_by_rank") or {}).items():
            out.append(f"| rank {rank}: waiting for other ranks, ms per step | {_num(wait)} |")
        if len(measured) < len(ranks):
            left_out = ", ".join(str(r.get("rank")) for r in ranks if not _measured(r))
            out.append(f"| left out: no GPU kernel events (not measured) | rank {left_out} |")
    out.extend(_categories(measured))
    out.extend(_top(measured, "decode"))
    prefill = summary.get("prefill") or []
    if prefill:
        out.append("")
        out.append(f"## Prefill steps (`{summary.get('prefill_pattern', '')}`)")
        out.append("")
        out.extend(_overview(prefill, "prefill_steps", said=len(measured) < len(ranks)))
        out.extend(_categories([r for r in prefill if _measured(r)]))
        out.extend(_top([r for r in prefill if _measured(r)], "prefill"))
    warnings = summary.get("warnings") or []
    if warnings:
        out.append("")
        out.append("### Warnings")
        out.append("")
        out.extend(f"- {_cell(w)}" for w in warnings)
    return "\n".join(out) + "\n"


def verdict_sentence(summary: Mapping) -> str:
    """The verdict and the steady step it rests on, in one line (the campaign headline's body):
    ``host-bound on rank 1, not steady: decode step 16.49 ms drifting to 19.48 ms (rank 1's host;
    rank 0's 15.17 ms); GPU 7.08 ms a step; all-reduce transfer 0.459 ms (2.8%)``; a steady one
    ``host-bound on rank 0: decode step 16.46 ms; host 15.17 ms, GPU 7.10 ms a step; ...``. A
    second regime adds ``; 7 of 19 decode steps (64% of the decode time) run apart: host-bound on
    rank 0 at 30.1 ms a step``."""
    v = summary.get("verdict") or {}
    words = describe(v)
    ev = v.get("evidence") or {}
    kind = v.get("kind")
    if kind == "partial":
        return f"{words}: " + "; ".join(_partial_parts(v, summary))
    if kind in (None, "inconclusive") or not ev.get("period_ms"):
        return words + _regimes_part(summary)
    beside_decode = _phases_part(summary, ev.get("rank")) + _stalls_part(summary)
    period = ev["period_ms"]
    host, gpu = ev.get("host_ms_per_step"), ev.get("gpu_ms_per_step")
    if ev.get("steady") is False and ev.get("predicted_period_ms"):
        limit = ev["rank"]
        others = {r: h for r, h in (ev.get("host_ms_per_step_by_rank") or {}).items()
                  if h is not None and str(r) != str(limit)}
        beside = ""
        if ev.get("bound") == "host" and others:
            r_, h_ = max(others.items(), key=lambda kv: kv[1])
            beside = f"; rank {r_}'s {_ms(h_)} ms"
        parts = [f"decode step {_ms(period)} ms drifting to {_ms(ev['predicted_period_ms'])} ms "
                 f"(rank {limit}'s {ev.get('bound') or 'pace'}{beside})"]
        if gpu is not None and ev.get("bound") == "host":
            parts.append(f"GPU {_ms(gpu)} ms a step")
    else:
        parts = [f"decode step {_ms(period)} ms"]
        if host is not None and gpu is not None:
            parts.append(f"host {_ms(host)} ms, GPU {_ms(gpu)} ms a step")
        else:
            parts.append(f"GPU busy {_ms(ev['busy_ms'])} ms ({100 * ev['busy_ms'] / period:.0f}%)")
    if ev.get("allreduce_transfer_ms"):  # none without all-reduce calls (one GPU)
        parts.append(f"all-reduce transfer {_ms(ev['allreduce_transfer_ms'])} ms "
                     f"({100 * ev['allreduce_transfer_ms'] / period:.1f}%)")
    if ev.get("steady") is not False and ev.get("other_wait_rank") is not None and ev.get("other_wait_ms"):
        whom = f" for rank {ev['rank']}" if ev.get("straggler") is not None else ""
        parts.append(f"rank {ev['other_wait_rank']} waits {_ms(ev['other_wait_ms'])} ms{whom}")
    if kind == "compute-bound" and ev.get("top_category"):
        parts.append(f"{ev['top_category']} {_ms(ev['top_category_ms'])} ms")
    parts += _ledger_parts(ev, kind)
    return f"{words}: " + "; ".join(parts) + beside_decode + _regimes_part(summary)


_PHASE_WORDS = {"prefill": "prefill", "mixed": "mixed"}


def _phases_part(summary: Mapping, rank) -> str:
    """The steps beside the decode steps, each phase its own figure (the verdict's rank's, else the
    first rank's ``phases``): ``; beside them 3 prefill steps (6.78 ms each, 46% of the step time)``."""
    ranks = [r for r in summary.get("ranks") or [] if r.get("phases")]
    r = next((x for x in ranks if str(x.get("rank")) == str(rank)), ranks[0] if ranks else None)
    if r is None:
        return ""
    bits = []
    for phase, word in _PHASE_WORDS.items():
        f = (r.get("phases") or {}).get(phase)
        if not f:
            continue
        each = " each" if f["steps"] != 1 else ""
        what = [f"{_ms(f['period_ms'])} ms{each}"] if f.get("period_ms") is not None else []
        if f.get("decode_token_share") is not None:
            what.append(f"decode {100 * f['decode_token_share']:.0f}% of their tokens")
        if f.get("time_share") is not None:
            what.append(f"{100 * f['time_share']:.0f}% of the step time")
        bits.append(f"{f['steps']} {word} step{'s' if f['steps'] != 1 else ''}"
                    + (f" ({', '.join(what)})" if what else ""))
    return f"; beside them {' and '.join(bits)}" if bits else ""


def _stalls_part(summary: Mapping) -> str:
    """The host stalls (:mod:`.stalls`), the largest named: ``; a host stall in decode step 3: 53.2 ms
    outside its GPU window (70% of the decode time)``."""
    found = (summary.get("stalls") or {}).get("steps") or []
    if not found:
        return ""
    top = max(found, key=lambda x: (x.get("time_share") or 0, x["host_ms"]))
    steps = sorted({x["index"] for x in found})
    share = f" ({100 * top['time_share']:.0f}% of the decode time)" if top.get("time_share") is not None else ""
    head = "a host stall" if len(steps) == 1 else f"{len(steps)} host stalls, the largest"
    return (f"; {head} in decode step {top['index']}{_first_words(top)}: {_ms(top['host_ms'])} ms outside its GPU "
            "window, "
            + (f"{top['ratio']:.0f}x the median" if top.get("ratio") is not None else "far above the median")
            + share)


def _first_words(stall: Mapping) -> str:
    """What a stall on the first step of its capture adds to its name: the profiler's start-up is there too."""
    return (" (the capture's first step: the profiler's start-up may hold part of it)"
            if stall.get("first_in_capture") else "")


FLOOR_WORDS = {"weights": "weight", "kv_cache": "KV-cache", "allreduce": "all-reduce"}


def _ledger_parts(ev: Mapping, kind: str | None) -> list[str]:
    """What the decode ledger adds to the sentence (the verdict's rank): the GEMMs against the
    weight floor, and the headroom above the step's floor, or the floors it could not measure."""
    if ev.get("gemm_bound_from") == "intensity":
        return [f"GEMMs {_ms(ev.get('top_category_ms'))} ms, their floor not measured (no checkpoint)"]
    if "gemm_kind" not in ev:
        return []
    out = []
    source = ev.get("bandwidth_source")
    bw = f"{ev['bandwidth_gbps']:.0f} GB/s, {source}" if ev.get("bandwidth_gbps") else "bandwidth unknown"
    if kind == "memory-bound":
        out.append(f"GEMMs {_ms(ev['gemm_ms'])} ms against a weight floor of {_ms(ev['weights_floor_ms'])} ms ({bw})")
    elif ev.get("hbm_share") is not None:
        out.append(f"GEMMs at {100 * ev['hbm_share']:.0f}% of HBM bandwidth ({bw}): "
                   f"{GEMM_WORDS.get(ev['gemm_kind'], ev['gemm_kind'])}")
    floors = ev.get("floors_ms") or {}
    unknown = [k for k in FLOOR_WORDS if floors.get(k) is None]
    if ev.get("headroom_ms") is not None:
        out.append(f"floor {_ms(floors.get('total'))} ms, headroom {_ms(ev['headroom_ms'])} ms")
    elif ev.get("headroom_at_most_ms") is not None and len(unknown) < len(FLOOR_WORDS):
        out.append(f"headroom at most {_ms(ev['headroom_at_most_ms'])} ms above the floor "
                   f"({', '.join(FLOOR_WORDS[k] for k in unknown)} floor not measured)")
    else:
        out.append("decode floor not measured (the decode ledger says why)")
    return out


def _partial_parts(v: Mapping, summary: Mapping) -> list[str]:
    ev = v.get("evidence") or {}
    parts = []
    lo, hi = ev.get("allreduce_low_ms"), ev.get("allreduce_high_ms")
    if lo is not None and hi is not None:
        share = (f" ({100 * ev['allreduce_low_share']:.1f}-{100 * ev['allreduce_high_share']:.1f}%)"
                 if ev.get("allreduce_low_share") is not None and ev.get("allreduce_high_share") is not None else "")
        parts.append(f"all-reduce {_ms(lo)}-{_ms(hi)} ms a step{share}")
    if ev.get("host_ms_per_step") is not None and ev.get("gpu_ms_per_step") is not None:
        parts.append(f"rank {ev['rank']}'s host {_ms(ev['host_ms_per_step'])} ms a step, its GPU at most "
                     f"{_ms(ev['gpu_ms_per_step'])} ms" + (", not steady" if ev.get("steady") is False else ""))
    fetch = ((summary.get("coverage") or {}).get("fetch") or [])
    if fetch:
        parts.append("fetch " + ", ".join(f"rank {f['rank']}" for f in fetch[:4]) + (" ..." if len(fetch) > 4 else ""))
    return parts


def _regimes_part(summary: Mapping) -> str:
    regs = summary.get("regimes") or []
    if not regs:
        return ""
    r = max(regs, key=lambda x: x.get("time_share") or 0)
    v = r.get("verdict") or {}
    what = describe(v) if v.get("kind") != "inconclusive" else "no verdict"
    at = f" at {_ms(r['period_ms'])} ms a step" if r.get("period_ms") is not None else ""
    return (f"; {r['count']} of {r['decode_steps']} decode steps ({100 * r['time_share']:.0f}% of the decode time) "
            f"run apart{_graphs_words(r)}: {what}{at}")


def _graphs_words(regime: Mapping) -> str:
    """`` without CUDA graphs (0 graph launches a step; the steady steps 1)`` for a regime of eager
    steps among graph steps (:mod:`.graphs`), else nothing."""
    g = regime.get("graphs") or {}
    if g.get("cause") != "eager":
        return ""
    return (f" without CUDA graphs ({_num(g['regime']['launches_per_step'], 0)} graph launches a step; the steady "
            f"steps {_num(g['steady']['launches_per_step'], 1)})")


def _ms(v) -> str:
    return "-" if v is None else (f"{v:.2f}" if abs(v) >= 0.995 or v == 0 else f"{v:.3g}")


def _verdict(summary: Mapping) -> list[str]:
    v = summary.get("verdict")
    if not v:
        return []
    out = ["## Verdict", "", f"**{verdict_sentence(summary)}**", ""]
    ev = v.get("evidence") or {}
    if v.get("reason"):
        out += [f"Why: {v['reason']}.", ""]
    if ev:
        out += ["| evidence | value |", "| --- | --- |"]
        for key, value in ev.items():
            if key == "pcie_link" and value:
                value = "; ".join(fabric.describe(f) for f in value)
            elif isinstance(value, Mapping):
                pre = "rank " if key.endswith("_by_rank") else ""
                value = ", ".join(f"{pre}{k}: {v}" for k, v in value.items() if v is not None) or None
            if value is not None:
                out.append(f"| {key} | {_cell(value)} |")
        out.append("| thresholds | " + ", ".join(f"{k} {val}" for k, val in (v.get("thresholds") or {}).items()) + " |")
        out.append("")
    if v.get("next"):
        out += ["Next experiments:", ""] + [f"{i}. {_cell(x)}" for i, x in enumerate(v["next"], 1)] + [""]
    ctx = summary.get("context") or {}
    if ctx:
        known = ", ".join(f"{k} {ctx[k]}" for k in ("gpu", "interconnect", "tensor_parallel_size", "cuda_graphs")
                          if ctx.get(k) is not None)
        unknown = "" if ctx.get("interconnect") else " (interconnect unknown: no nvidia-smi topo -m recorded)"
        out += [f"Hardware as the advisor knew it: {known or 'nothing'}{unknown}.", ""]
    return out


def _pace(summary: Mapping) -> list[str]:
    """Each rank's host and GPU time per step beside its period, and its lead (``pace``)."""
    p = summary.get("pace") or {}
    ranks = p.get("ranks") or {}
    if not ranks:
        return []
    out = ["## Pace: which rank limits the run, and is the capture steady", "",
           "Per rank over its steady decode steps (medians, ms): the host's own time to issue a step (its CPU step "
           "annotation, else its launch span, less its waits for the GPU, plus the gap to the next step), the GPU's "
           "own work (busy time less waiting for other ranks), what the GPU needs (its window less the idle where "
           "the host had not launched the next kernel, less waiting for other ranks: no period can be shorter), the "
           "period, the lead of the host over its GPU (GPU step start less host step start) at the first step and "
           "the last, and the lead's trend: its robust slope (Theil-Sen) over the steps times their range. A host "
           "call that waits for its GPU lets the GPU catch up at once, so the lead falls by the wait in one step "
           "while the trend does not move: first and last can differ by far more than the trend.", "",
           "| rank | host per step | GPU work per step | GPU need per step | period | lead first, last | lead trend "
           "| steady | bound |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for r, x in ranks.items():
        most = " (at most)" if x.get("gpu_upper_bound") else ""
        out.append(f"| {r} | {_num(x.get('host_ms_per_step'))} | {_num(x.get('gpu_ms_per_step'))}{most} "
                   f"| {_num(x.get('gpu_need_ms_per_step'))}{most} | {_num(x.get('period_ms'))} "
                   f"| {_num(x.get('lead_first_ms'))}, {_num(x.get('lead_last_ms'))} | {_num(x.get('lead_change_ms'))} "
                   f"| {'yes' if x.get('steady') else 'no'} | {x.get('bound') or '-'} |")
    out.append("")
    if p.get("limit") is not None:
        out += [pace_sentence(p), ""]
    return out


def pace_sentence(p: Mapping) -> str:
    """The pace in words (:mod:`.pace`): who sets it, the period predicted, and what the rest of the
    limit's period is (the GPU's waits)."""
    ranks = p.get("ranks") or {}
    x = ranks.get(str(p["limit"])) or {}
    side = {"host": "host", "gpu": "GPU"}.get(p.get("bound"), "step")
    need = x.get("need_ms_per_step")
    line = f"The run's pace is set by rank {p['limit']}'s {side}: it needs {_num(need)} ms a step"
    gpu_need = x.get("gpu_need_ms_per_step")
    if p.get("bound") == "host" and gpu_need is not None:
        line += f" (its GPU {_num(gpu_need)} ms)"
    if p.get("steady") is False:
        d = ranks.get(str(p.get("drifting_rank"))) or {}
        moved = "shrank" if (d.get("lead_change_ms") or 0) < 0 else "grew"
        ends = ""
        if d.get("lead_first_ms") is not None and d.get("lead_last_ms") is not None:
            waited = d.get("lead_waited_ms")
            ends = (f" (from {_num(d['lead_first_ms'])} ms at the first step to {_num(d['lead_last_ms'])} ms at the "
                    "last" + (f", {_num(waited)} ms of that in its host's waits for its GPU, which move the lead "
                              "but not the trend" if waited else "") + ")")
        line += (f". The capture is not steady: rank {p['drifting_rank']}'s lead over its GPU {moved} by "
                 f"{_num(abs(d.get('lead_change_ms') or 0))} ms on its trend{ends}, so the periods measured will not "
                 f"last; a longer run drifts towards {_num(p.get('predicted_period_ms'))} ms a step.")
    elif p.get("predicted_period_ms") is not None and need is not None and p["predicted_period_ms"] > need:
        line += f"; the capture is steady at {_num(p['predicted_period_ms'])} ms a step, and keeps that period."
    else:
        line += f"; the capture is steady at {_num(p.get('predicted_period_ms'))} ms a step."
    waits = x.get("gpu_waits") or {}
    if waits.get("total_ms"):
        parts = [(waits.get("for_host_between_steps_ms"), "for its host between steps"),
                 (waits.get("for_host_in_window_ms"), "for its host inside the window"),
                 (waits.get("for_other_ranks_ms"), "for other ranks")]
        line += (f" The rest of rank {p['limit']}'s period (mean {_num(waits['period_ms'])} ms) is its GPU waiting, "
                 f"{_num(waits['total_ms'])} ms a step: " + ", ".join(f"{_num(v)} ms {w}" for v, w in parts if v)
                 + " (means over its steady steps).")
    return line


def _coverage(summary: Mapping) -> list[str]:
    """What is missing from the group, and each present rank's all-reduce time as an interval."""
    c = summary.get("coverage") or {}
    if c.get("complete", True):
        return []
    out = ["## Ranks missing", "",
           f"{len(c.get('present') or [])} of the {c.get('world_size')} ranks have a trace here; missing: "
           f"{', '.join(str(m) for m in c.get('missing') or [])}. Without them a collective's transfer cannot be told "
           "from waiting, so the all-reduce time is an interval: at least each call at this rank's shortest call of "
           "its size, at most its all-reduce kernel time (waiting included).", ""]
    bounds = c.get("allreduce_bounds") or {}
    if bounds:
        out += ["| rank | all-reduce ms per step, at least | at most | share of the period |",
                "| ---: | ---: | ---: | ---: |"]
        for r, b in bounds.items():
            share = (f"{_pct(b.get('low_share'))} - {_pct(b.get('high_share'))}"
                     if b.get("low_share") is not None else "-")
            out.append(f"| {r} | {_num(b.get('low_ms_per_step'))} | {_num(b.get('high_ms_per_step'))} | {share} |")
        out.append("")
    out += ["To fetch: " + ", ".join(f"rank {f['rank']} `{_cell(f['glob'])}`" for f in c.get("fetch") or []) + ".", ""]
    return out


def _regimes(summary: Mapping) -> list[str]:
    regs = summary.get("regimes") or []
    if not regs:
        return []
    out = ["## Regimes", "", "Decode steps the steady state left out that are a way of running of their own, judged "
           "apart:", ""]
    for r in regs:
        v = r.get("verdict") or {}
        who = f"rank {r['rank']}: " if "rank" in r else ""
        steps = ", ".join(str(i) for i in r["steps"][:12]) + (", ..." if len(r["steps"]) > 12 else "")
        out.append(f"- {who}{r['count']} of {r['decode_steps']} decode steps, {r['side']}{_graphs_words(r)} "
                   f"({_pct(r.get('time_share'))} of the decode time; steps {steps}), "
                   f"{_num(r.get('period_ms'))} ms a step: **{_cell(verdict_sentence({'verdict': v}))}**"
                   + (f"; next: {_cell('; '.join(v['next']))}" if v.get("next") else ""))
    return [*out, ""]


def _decomposition(ranks: list) -> list[str]:
    rows = [(r, r.get("decomposition")) for r in ranks if r.get("decomposition")]
    if not rows:
        return []
    cats: list[str] = []
    for _, d in rows:
        cats += [c for c in d["compute_ms"] if c not in cats]
    head = ("| part of the mean steady decode step (ms) | "
            + " | ".join(f"rank {r.get('rank')}" for r, _ in rows) + " |")
    out = ["## The steady decode step, decomposed", "",
           "Means over the steady decode steps (see the steady state below); the parts add up to the period. "
           "Compute is busy time by category with overlaps given once; all-reduce is the time only all-reduce "
           "ran, split into transfer (the last arriver's time) and waiting for other ranks.", "",
           head, "| --- |" + " ---: |" * len(rows)]

    def line(label, values):
        out.append(f"| {label} | " + " | ".join(values) + " |")

    line("period (step start to next step start)", [_num(d["period_ms"]) for _, d in rows])
    for c in cats:
        line(f"compute: {c}", [_num(d["compute_ms"].get(c)) for _, d in rows])
    line("all-reduce transfer", [_num(d["allreduce_transfer_ms"])
                                 + ("" if d.get("allreduce_told_apart", True) else " (waiting included: one rank)")
                                 for _, d in rows])
    line("all-reduce waiting for other ranks", [_num(d["allreduce_wait_ms"]) for _, d in rows])
    line("GPU idle inside the step window", [_num(d["idle_in_window_ms"]) for _, d in rows])
    line("host time outside the window", [_num(d["host_ms"]) for _, d in rows])
    line("(GPU busy, the union of activities)", [_num(d["busy_ms"]) for _, d in rows])
    line("(share of idle where the host had not launched the next kernel)",
         [_pct(d.get("idle_host_share")) for _, d in rows])
    line("(steps averaged)", [str(d["steps"]) for _, d in rows])
    return [*out, ""]


_PART_WORDS = {"weights": "weights: GEMM and MoE GEMM kernels", "kv_cache": "KV cache: attention kernels",
               "other_kernels": "other kernels", "allreduce_transfer": "all-reduce transfer",
               "allreduce_wait": "all-reduce waiting", "gpu_idle": "GPU idle inside the window",
               "host": "host time outside the window"}


def _ledger(summary: Mapping) -> list[str]:
    """The decode ledger: each part of the steady step beside its floor, per rank (see the module)."""
    led = summary.get("ledger")
    if not led:
        return []
    ranks = [r for r in led.get("ranks") or [] if r.get("parts")]
    ck = led.get("checkpoint") or {}
    where = (f"`{_cell(ck.get('path'))}`, {ck['bytes']:,} bytes" if ck.get("bytes") is not None else
             f"`{_cell(ck.get('path'))}`: {_cell(ck.get('error') or 'not read')}")
    out = ["## The steady decode step against its floor (the decode ledger)", "",
           "Each part of the mean steady decode step (the decomposition above) beside the least it can take: the "
           "weights and the KV cache read once from HBM at the GPU's bandwidth, the all-reduces at the host's "
           "measured floor; the other parts have no floor term (0), so all of their time is headroom. Measured / "
           "floor / above the floor, ms per step; \"-\" where not measured. Definitions: `vllm_ops.ledger`.", "",
           f"Checkpoint {where}; tensor parallel size {led.get('tensor_parallel_size')}; all-reduce floor "
           + (f"`{_cell(led['allreduce_floor'])}`." if led.get("allreduce_floor") else "none given."), ""]
    bws = {}
    for r in led.get("ranks") or []:
        bw = r.get("bandwidth") or {}
        text = (f"{bw['gbps']:.0f} GB/s, {bw.get('source')}: {bw.get('how')}" if bw.get("gbps") else
                f"not known ({bw.get('note')})")
        bws.setdefault(text, []).append(str(r.get("rank")))
    out += [f"Bandwidth ({_ranks_words(v)}): {_cell(k)}." for k, v in bws.items()] + [""]
    if ranks:
        out += ["| part | " + " | ".join(f"rank {r.get('rank')}" for r in ranks) + " |",
                "| --- |" + " ---: |" * len(ranks)]
        for part in PARTS:
            cells = []
            for r in ranks:
                p = next((x for x in r["parts"] if x["part"] == part), {})
                cells.append(f"{_num(p.get('measured_ms'))} / {_num(p.get('floor_ms'))} / "
                             f"{_num(p.get('above_floor_ms'))}")
            out.append(f"| {_PART_WORDS.get(part, part)} | " + " | ".join(cells) + " |")
        out.append("| **the step** (period / floor / headroom) | " + " | ".join(
            f"{_num(r.get('period_ms'))} / {_num((r.get('floors') or {}).get('total'))} / "
            + (_num(r["headroom_ms"]) if r.get("headroom_ms") is not None else
               f"at most {_num(r.get('headroom_at_most_ms'))}") for r in ranks) + " |")
        out.append("")
    out += [f"- {_cell(describe_ledger(r))}" for r in led.get("ranks") or []] + [""]
    missing = [(r.get("rank"), k, v) for r in led.get("ranks") or [] for k, v in (r.get("not_measured") or {}).items()]
    if missing:
        out += ["Not measured, and why:", ""] + [f"- rank {rank}, {k}: {_cell(v)}" for rank, k, v in missing] + [""]
    free = [(r.get("rank"), k, v) for r in led.get("ranks") or [] for k, v in (r.get("not_charged") or {}).items()]
    if free:
        out += ["Not charged (floor 0), and why:", ""] + [f"- rank {rank}, {k}: {_cell(v)}"
                                                          for rank, k, v in free] + [""]
    spots = led.get("blind_spots") or []
    if spots:
        out += ["What the ledger cannot see:", ""] + [f"- {_cell(x)}" for x in spots] + [""]
    return out


def _ranks_words(ranks: list[str]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(ranks)


_STEADY_FIGURES = (("period_ms", "period"), ("busy_ms", "GPU busy"), ("idle_ms", "GPU idle in window"),
                   ("allreduce_kernel_ms", "all-reduce kernel time (includes waiting)"),
                   ("allreduce_transfer_ms", "all-reduce transfer"), ("allreduce_wait_ms", "all-reduce waiting"))


def _steady(summary: Mapping, ranks: list) -> list[str]:
    """The steady-state rule, the steps it left out, and what leaving them out changes."""
    st = summary.get("steady_state") or {}
    if not ranks or not st:
        return []
    out = ["## Steady state", "", f"Rule: {_cell(st.get('rule', ''))}.", ""]
    left = st.get("left_out") or []
    if left:
        out += [f"- {'rank ' + str(x['rank']) + ' ' if 'rank' in x else ''}step {x['index']}: {_cell(x['reason'])}"
                for x in left] + [""]
    else:
        out += ["No step was left out.", ""]
    out += ["| figure, ms per decode step | " + " | ".join(f"rank {r.get('rank')}: every step, steady (median)"
                                                          for r in ranks) + " |",
            "| --- |" + " ---: |" * len(ranks)]
    for key, label in _STEADY_FIGURES:
        cells = []
        for r in ranks:
            every = ((r.get("step_stats") or {}).get(key) or {}).get("mean")
            kept = (r.get("steady_stats") or {}).get(key) or {}
            cells.append(f"{_num(every)}, {_num(kept.get('mean'))} ({_num(kept.get('median'))})")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return [*out, "", "Means over every decode step, then over the steady ones (their median in brackets).", ""]


def _phases(ranks: list) -> list[str]:
    """Each phase's steps on each rank, its own figure (``phases``), where a rank has steps of
    another phase than decode."""
    if not any(set(r.get("phases") or {}) - {"decode"} for r in ranks):
        return []
    out = ["## Steps by phase", "",
           "Each step's period ends where the next step of any phase begins, so the phases share the profiled time "
           "and no decode figure holds a prefill's work (medians, ms).", "",
           "| rank | phase | steps | time share | period | window | busy | all-reduce calls | decode share of tokens |",
           "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in ranks:
        for phase, f in (r.get("phases") or {}).items():
            out.append(f"| {r.get('rank')} | {phase} | {f['steps']} | {_pct(f.get('time_share'))} "
                       f"| {_num(f.get('period_ms'))} | {_num(f.get('window_ms'))} | {_num(f.get('busy_ms'))} "
                       f"| {_num(f.get('allreduce_calls'), 0)} | {_pct(f.get('decode_token_share'))} |")
    return [*out, ""]


def _stalls(summary: Mapping) -> list[str]:
    """The host stalls (``stalls``), one line each."""
    st = summary.get("stalls") or {}
    found = st.get("steps") or []
    if not found:
        return []
    th = st.get("thresholds") or {}
    out = ["## Host stalls", "",
           f"Decode steps whose host time outside the GPU window is at least {th.get('stall_rel')}x the rank's median "
           f"host time and at least {th.get('stall_periods')} median periods:", ""]
    out += [f"- rank {x['rank']} step {x['index']}{_first_words(x)}: {_num(x['host_ms'])} ms ({x['ratio']}x the "
            f"median {_num(x['median_host_ms'])} ms), {_pct(x.get('time_share'))} of the rank's decode time"
            for x in found]
    return [*out, ""]


def _collectives(summary: Mapping) -> list[str]:
    coll = summary.get("collectives") or {}
    groups = coll.get("groups") or []
    if not groups:
        return []
    out = ["## All-reduce across ranks (steady steps)", "",
           "| group | ranks | calls/step | bytes (median) | transfer µs (median, p90) | floor µs (transfer / floor) "
           "| bus GB/s | skew µs (median, p90) | last arriver |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for g in groups:
        t, sk, b = g.get("transfer_us") or {}, g.get("skew_us") or {}, g.get("message_bytes") or {}
        last = max((g.get("last_arriver_share") or {}).items(), key=lambda kv: kv[1], default=(None, None))
        alone = g.get("told_apart") is False
        out.append(f"| {_cell(g.get('group') or '(unnamed)')} | {', '.join(str(x) for x in g.get('ranks', []))} "
                   f"| {_num(g.get('calls_per_step'), 1)} | {_num(b.get('median'), 0)} "
                   f"| {_num(t.get('median'))}, {_num(t.get('p90'))}{' (own kernel time)' if alone else ''} "
                   f"| {_floor_cell(g)} | {_num(g.get('busbw_gbps'))} "
                   f"| {_num(sk.get('median'), 1)}, {_num(sk.get('p90'), 1)} "
                   f"| {'-' if last[0] is None else f'rank {last[0]} ({_pct(last[1])})'} |")
    if any(g.get("told_apart") is False for g in groups):
        out += ["", "A group whose calls only one rank's trace holds: its calls cannot be split into transfer and "
                    "waiting, so its transfer is that rank's own kernel time, and its waiting, skew, bandwidth and "
                    "last arriver are not measured."]
    fl = summary.get("allreduce_floor")
    if fl:
        out += ["", f"Floor: `{_cell(fl.get('source'))}`, measured with {fl.get('world_size')} ranks "
                    f"({_cell(fl.get('backend') or '-')}, NCCL {_cell(fl.get('nccl_version') or '-')}, "
                    f"{_cell(fl.get('gpu_name') or '-')}; {_cell(fl.get('timing') or '-')}; environment "
                    + (", ".join(f"`{_cell(f'{k}={v}')}`" for k, v in sorted((fl.get("environment") or {}).items()))
                       or "none") + "): it holds for the service only under the same settings."]
        notes = sorted({g["floor_note"] for g in groups if g.get("floor_note")})
        out += [f"Not used: {_cell(n)}." for n in notes]
    else:
        out += ["", "No all-reduce floor given: measure one with playbooks/allreduce_bench.yml (a later campaign "
                    "on the host uses the newest), or run allreduce_bench.py on the host and pass it with "
                    "--allreduce-floor."]
    st = coll.get("straggler")
    if st:
        out += ["", (f"Straggler: rank {st['rank']}, last to arrive at {_pct(st['last_arrival_share'])} of the "
                     f"collectives." if st.get("named") else
                     f"No clear straggler: the most frequent last arriver, rank {st['rank']}, is last at only "
                     f"{_pct(st['last_arrival_share'])} (threshold {_pct(st['threshold'])}).")]
    waits = coll.get("by_rank") or {}
    if waits:
        out.append("Waiting per steady step: " + ", ".join(
            f"rank {k} {_num(v['wait_ms_per_step'])} ms" if v.get("wait_ms_per_step") is not None else
            f"rank {k} not measured (no other rank of its group)" for k, v in waits.items()) + ".")
    return [*out, ""]


def _by_batch_size(ranks: list) -> list[str]:
    """Medians over the steady decode steps of each batch size, when the steps have several."""
    if not any(len(r.get("by_batch_size") or {}) > 1 for r in ranks):
        return []
    out = ["## Decode steps by batch size (medians over steady steps, ms)", "",
           "| rank | batch size | steps | steady | period | busy | idle | AR transfer | AR wait |",
           "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in ranks:
        for bs, g in (r.get("by_batch_size") or {}).items():
            out.append(f"| {r.get('rank')} | {bs} | {g['steps']} | {g['steady_steps']} | {_num(g.get('period_ms'))} "
                       f"| {_num(g.get('busy_ms'))} | {_num(g.get('idle_ms'))} "
                       f"| {_num(g.get('allreduce_transfer_ms'))} | {_num(g.get('allreduce_wait_ms'))} |")
    return [*out, ""]


def _floor_cell(g: Mapping) -> str:
    if g.get("floor_us") is None:
        return "-"
    ratio = f" ({g['floor_ratio']:.2f}x)" if g.get("floor_ratio") is not None else ""
    return f"{_num(g['floor_us'])}{ratio}"


STEP_ROWS = 40  # per rank; a longer trace shows its first steps, every step left out, and its last


def _shown_steps(steps: list) -> tuple[list, int]:
    """The steps a rank's table shows, and how many it leaves for the JSON."""
    if len(steps) <= STEP_ROWS:
        return steps, 0
    keep = {s["index"] for s in steps[:STEP_ROWS // 2]} | {s["index"] for s in steps[-5:]}
    keep |= {s["index"] for s in steps if s.get("phase") == "decode" and not s.get("steady")}
    shown = [s for s in steps if s["index"] in keep]
    return shown, len(steps) - len(shown)


def _steps(ranks: list) -> list[str]:
    out: list[str] = []
    for r in ranks:
        steps, hidden = _shown_steps(r.get("steps") or [])
        if not steps:
            continue
        if not out:
            out += ["## Steps", "", "Per rank and step (ms): period from this step's start to the next step's "
                    "(any phase), the GPU window (first activity to last), busy (union of activities), idle inside "
                    "the window, host time outside it, all-reduce transfer and waiting.", ""]
        out += [f"Rank {r.get('rank')} (steps from {_STEPS_FROM.get(r.get('steps_from'), '-')}):", "",
                "| step | phase | batch | period | window | busy | idle | host | AR transfer | AR wait | graphs "
                "| steady |",
                "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for s in steps:
            batch = s.get("batch_size") if s.get("batch_size") is not None else "-"
            if s["phase"] != "decode":
                kept = "-"
            else:
                kept = "yes" if s.get("steady") else "left out: " + _cell(s.get("left_out") or "")
            cells = [str(s["index"]), s["phase"], str(batch)] + [
                _num(s.get(k)) for k in ("period_ms", "window_ms", "busy_ms", "idle_ms", "host_ms",
                                         "allreduce_transfer_ms", "allreduce_wait_ms")
            ] + [str(s.get("graph_launches", 0)), kept]
            out.append("| " + " | ".join(cells) + " |")
        if hidden:
            out += ["", f"{hidden} more steps of rank {r.get('rank')} are in the JSON summary (`ranks[].steps`): "
                        f"shown are the first {STEP_ROWS // 2}, every step left out of the steady state, and the "
                        "last 5."]
        out.append("")
    return out


def _measured(r) -> bool:
    return r.get("gpu_time_measured") is not False


def _overview(ranks: list, steps_key: str, said: bool = False) -> list[str]:
    """The GPU table of the measured ranks, then what is known of the others, said plainly
    (shortly where ``said``: the decode section said it already)."""
    measured = [r for r in ranks if _measured(r)]
    rows = _gpu_table(measured, steps_key) if measured else []
    unmeasured = [r for r in ranks if not _measured(r)]
    if not unmeasured:
        return rows
    if said:
        if rows:
            rows.append("")
        rows.append(f"GPU time not measured on {_ranks(unmeasured)} (no GPU kernel events).")
    elif measured:
        rows += ["", f"{_ranks(unmeasured).capitalize()}: {NOT_MEASURED}; left out of the figures above."]
    elif len(ranks) == 1:
        rows.append(f"Rank {ranks[0].get('rank')}: {NOT_MEASURED}.")
    else:
        rows.append(f"No GPU kernel events in the traces of {_ranks(ranks)} (CPU-only run?): "
                    "GPU time and all-reduce share not measured.")
    rows += ["", "| rank | steps | step wall ms | steps found in |", "| ---: | ---: | ---: | --- |"]
    for r in unmeasured:
        rows.append(f"| {r.get('rank')} | {r.get(steps_key, 0)} | {_num(r.get('step_wall_ms_per_step'))} "
                    f"| {_STEPS_FROM.get(r.get('steps_from'), '-')} |")
    return rows


_STEPS_FROM = {"user_annotation": "CPU annotations", "gpu_user_annotation": "GPU annotations"}


def _ranks(ranks: list) -> str:
    nums = ", ".join(str(r.get("rank")) for r in ranks)
    return f"rank {nums}" if len(ranks) == 1 else f"ranks {nums}"


def _gpu_table(ranks: list, steps_key: str) -> list[str]:
    rows = ["| rank | device | steps | CUDA ms/step | step wall ms | all-reduce ms/step | all-reduce share "
            "| NCCL all-reduce ms/step |",
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in ranks:
        rows.append(
            f"| {r.get('rank')} | {_cell(r.get('device') or '-')} | {r.get(steps_key, 0)} "
            f"| {_num(r.get('cuda_ms_per_step'))} | {_num(r.get('step_wall_ms_per_step'))} "
            f"| {_num(r.get('allreduce_ms_per_step'))} | {_pct(r.get('allreduce_share'))} "
            f"| {_num(r.get('allreduce_nccl_ms_per_step'))} |"
        )
    return rows


def _categories(ranks: list) -> list[str]:
    names: list[str] = []
    for r in ranks:
        for name, v in (r.get("categories") or {}).items():
            if name not in names and (v.get("ms_per_step") or 0) > 0:
                names.append(name)
    if not names:
        return []
    rows = ["", "### CUDA time per step by category (ms, share)", "",
            "| category | " + " | ".join(f"rank {r.get('rank')}" for r in ranks) + " |",
            "| --- |" + " ---: |" * len(ranks)]
    for name in names:
        cells = []
        for r in ranks:
            v = (r.get("categories") or {}).get(name) or {}
            cells.append(f"{_num(v.get('ms_per_step'))} ({_pct(v.get('share'))})")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return rows


def _top(ranks: list, label: str) -> list[str]:
    rows: list[str] = []
    for r in ranks:
        top = r.get("top_kernels") or []
        if not top:
            continue
        rows += ["", f"### Top kernels, {label}, rank {r.get('rank')}", "",
                 "| kernel | category | ms/step | calls/step |", "| --- | --- | ---: | ---: |"]
        for k in top:
            name = str(k.get("name", ""))
            if len(name) > _NAME_WIDTH:
                name = name[: _NAME_WIDTH - 1] + "…"
            rows.append(f"| `{_cell(name)}` | {k.get('category')} | {_num(k.get('ms_per_step'))} "
                        f"| {_num(k.get('calls_per_step'), 1)} |")
    return rows


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("`", "'").replace("\n", " ")


def _num(v, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"
