"""Markdown tables of a summary, fit to paste into a report.

A rank whose trace holds no GPU kernel events (``gpu_time_measured`` false) gets no row of
GPU figures: the text says plainly that its GPU time and all-reduce share were not
measured, and a small table gives what is known (steps, their wall time and where they
were found). Summaries written before that key existed count as measured.
"""

from __future__ import annotations

from collections.abc import Mapping

from .errors import TraceInputError
from .summary import NOT_MEASURED

_NAME_WIDTH = 90


def to_markdown(summary: Mapping) -> str:
    """Render the dict :func:`vllm_ops.traces.summarize` returns as Markdown."""
    if not isinstance(summary, Mapping) or not isinstance(summary.get("ranks"), list):
        raise TraceInputError("expected a trace summary (a mapping with a 'ranks' list)")
    out: list[str] = []
    ranks = summary["ranks"]
    measured = [r for r in ranks if _measured(r)]
    out.append(f"## Decode steps (`{summary.get('decode_pattern', '')}`)")
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
