"""``vllm-campaign-report analyze DIR``: one process takes a campaign's files in and writes every
output, as ``vllm-experiment-report analyze`` does for an experiment.

In (DIR, written by the Ansible side; :mod:`.inputs`): the traces, ``capture.json`` (with the
checkpoint's record and the PCIe links read during the capture), ``topology.txt``, optionally
``job.json``; the all-reduce floor given, or the newest ``allreduce-unit.json`` under
``--floors-under``.
Out (DIR, each file written atomically): ``summary.json`` (the trace summary, with the
interconnect and TP size as context, the decode ledger from the capture's checkpoint record and the
PCIe findings, :func:`pcie`), ``campaign.json`` (:func:`campaign_record`), ``decode.png``,
``steps.png``, ``ledger.png`` (with a ledger), ``report.md`` (the template shipped in the package, or
``--template``, rendered with :func:`report_figures`), and with ``--history`` the campaign's row
appended to that CSV. Printed: one line per file, the headline last (computed once, here, and
passed to the report).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping

from .. import artifacts, fabric, loadcost
from ..allreduce import UNIT_RESULT, AllreduceInputError
from ..job import JobInputError, downtime_text, duration, now_iso
from ..ledger import LedgerInputError
from ..records import SummaryRecord
from ..render import render
from ..traces import SummaryOptions, summarize, to_markdown
from .chart import chart_line, ledger_line, steps_line, write_chart, write_ledger_chart, write_steps_chart
from .errors import CampaignInputError
from .figures import headline
from .history import append_history, history_row
from .inputs import load_capture, load_job, read_topology, trace_files
from .latency import latency_stats

__all__ = ["TEMPLATE", "analyze", "campaign_record", "pcie", "render_report", "report_figures"]

TEMPLATE = "campaign_report.md.j2"
# Environment names that look like secrets: the report prints "(hidden)" instead of their value.
SECRET_NAME = re.compile(r"(?i)token|secret|passw|credential|key")
FLOOR_DEPTH = 3  # levels below --floors-under: <host>/<job id>/allreduce/allreduce-unit.json from artifacts/<host>


def choose_floor(floor: str | None, floors_under: str | None) -> str | None:
    """The floor given, else the newest host floor (:data:`~vllm_ops.allreduce.UNIT_RESULT`) under
    ``floors_under``, else None."""
    if floor:
        return floor
    return artifacts.find_newest(floors_under, UNIT_RESULT, FLOOR_DEPTH) if floors_under else None


def pcie(capture: Mapping) -> dict:
    """The capture's PCIe links judged (:func:`vllm_ops.fabric.assess`) and their findings
    (:func:`vllm_ops.fabric.findings`), once: ``{assessment, findings}``."""
    try:
        assessment = fabric.assess(capture)
    except fabric.FabricInputError as exc:
        raise CampaignInputError(f"{artifacts.CAPTURE_JSON}: {exc}; re-run the campaign (its capture reads the "
                                 "links)") from None
    return {"assessment": assessment, "findings": fabric.findings(assessment)}


def campaign_record(directory: str, capture: Mapping, job: Mapping | None, topology: Mapping,
                    floor: str | None, links: Mapping, ledger: bool = False) -> dict:
    """``campaign.json``: what the campaign did and measured, the report's ``campaign`` dict less
    its summary. ``finished_at`` and ``downtime`` are the job's, when it recorded them (job.json);
    else now and null (a profiled variant, reported mid-experiment). ``fabric`` is :func:`pcie`'s
    answer (``links``); ``checkpoint`` what the ledger was given (the record's path and bytes, or
    why there are none), null when the capture read no checkpoint; ``ledger_png`` the ledger's chart,
    null without a ledger (``ledger`` false: no checkpoint record, so none is drawn); ``model_loads`` the
    job's loads (:func:`vllm_ops.loadcost.summary`), null without job.json."""
    return {
        "id": capture["id"], "host": capture["host"], "started_at": capture["started_at"],
        "finished_at": job["finished_at"] if job else now_iso(), "model": capture["model"],
        "vllm_version": capture["vllm_version"], "tensor_parallel_size": capture["tensor_parallel_size"],
        "topology": dict(topology), "variant": capture["variant"], "environment": capture["environment"],
        "downtime": job["downtime"] if job else None, "path": capture["path"], "allreduce_floor": floor,
        "settings": capture["settings"], "profiler_config": capture["profiler_config"], "load": capture["load"],
        "latency": {key: latency_stats(capture["samples"][key]) for key in ("ttft_ms", "tpot_ms")},
        "traces": capture["traces"],
        "checkpoint": None if capture.get("checkpoint") is None else {
            k: capture["checkpoint"].get(k) for k in ("path", "bytes", "tensors", "error")},
        "fabric": dict(links),
        "summary_json": artifacts.SUMMARY_JSON, "chart_png": artifacts.DECODE_PNG, "steps_png": artifacts.STEPS_PNG,
        "ledger_png": artifacts.LEDGER_PNG if ledger else None, "report": os.path.join(directory, artifacts.REPORT_MD),
        # The model loads the job caused, each phase by phase against the disk's floor (vllm_ops.loadcost);
        # null without job.json.
        "model_loads": loadcost.summary(job["loads"], job["disk"]) if job else None,
    }


def report_figures(campaign: Mapping, headline_text: str | None = None) -> dict:
    """What the template prints but does not compute (the ``figures`` of campaign_report.md.j2),
    from the report's ``campaign`` dict (the record with its ``summary``). ``headline_text`` is the
    headline without the report's path; computed here when not given."""
    summary = campaign["summary"]
    downtime = campaign.get("downtime")
    try:
        took = duration(campaign["started_at"], campaign["finished_at"])
        down = downtime_text(downtime)
    except JobInputError as exc:
        raise CampaignInputError(f"campaign {campaign.get('id')}: {exc}") from None
    if headline_text is None:
        headline_text = headline(campaign["host"], summary, None, downtime)
    gpus, seen = [], set()
    for r in summary["ranks"]:  # in rank order, each GPU once (case-insensitive, as Jinja's unique)
        device = r.get("device")
        key = device.lower() if isinstance(device, str) else device
        if device and key not in seen:
            seen.add(key)
            gpus.append(str(device))
    profiler = campaign.get("profiler_config")
    return {
        "headline": headline_text,
        "duration": took,
        "downtime": down,
        "gpus": ", ".join(gpus),
        "hidden": sorted(name for name in (campaign.get("environment") or {}) if SECRET_NAME.search(str(name))),
        "profiler_json": json.dumps(profiler, indent=2, sort_keys=True, separators=(",", ": "))
        if isinstance(profiler, Mapping) else None,
        "traces": [{"rank": t.get("rank"), "name": os.path.basename(str(t.get("file"))), "bytes": t.get("bytes"),
                    "sha256": t.get("sha256")}
                   for t in sorted(campaign.get("traces") or [], key=lambda t: t.get("rank"))],
        "trace_tables": to_markdown({**summary, "warnings": []}),
        "pcie_links": pcie_rows(campaign.get("fabric")),
    }


def pcie_rows(links: Mapping | None) -> dict:
    """The report's table of the PCIe links (``campaign.fabric``, :func:`pcie`), in words: ``{checked,
    reason, during, rank_basis, rows: [{gpu, bus_id, rank, width, generation, utilization, share,
    degraded}], findings: [sentence]}``; a figure nvidia-smi did not give is "-"."""
    assessment = (links or {}).get("assessment") or {}
    rows = []
    for link in assessment.get("links") or []:
        def pair(cur, top, prefix=""):
            return "-" if cur is None and top is None else f"{prefix}{_dash(cur)} of {prefix}{_dash(top)}"
        generation = pair(link.get("gen_current"), link.get("gen_max"), "Gen")
        if link.get("generation_judged") is False and link.get("gen_max") is not None:
            generation += " (idle reading: not judged)"
        share = link.get("bandwidth_share")
        rows.append({"gpu": link.get("index"), "bus_id": link.get("bus_id") or "-",
                     "rank": _dash(link.get("rank")), "width": pair(link.get("width_current"), link.get("width_max"),
                                                                    "x"),
                     "generation": generation, "utilization": _dash(link.get("utilization_pct"), "%"),
                     "share": "-" if share is None else f"{100 * share:.0f}%",
                     "degraded": ", ".join(link.get("degraded") or []) or "no"})
    return {"checked": bool(assessment.get("checked")), "reason": assessment.get("reason"),
            "during": assessment.get("during"), "rank_basis": assessment.get("rank_basis"), "rows": rows,
            "findings": [fabric.describe(f) for f in (links or {}).get("findings") or []]}


def _dash(value, unit: str = "") -> str:
    return "-" if value is None else f"{value}{unit}"


def render_report(campaign: Mapping, figures: Mapping | None = None, template: str | os.PathLike | None = None) -> str:
    """``report.md``: the template (None: the package's) rendered with ``campaign`` (the record and
    its ``summary``) and ``figures`` (:func:`report_figures`, computed when not given)."""
    figures = report_figures(campaign) if figures is None else figures
    return render(template, TEMPLATE, {"campaign": campaign, "figures": figures}, error=CampaignInputError)


def analyze(directory: str, *, history: str | None = None, template: str | None = None,
            decode_pattern: str | None = None, allreduce_floor: str | None = None,
            floors_under: str | None = None) -> list[str]:
    """Write every output of the campaign in ``directory``; return the lines to print, the headline last."""
    if not os.path.isdir(directory):
        raise CampaignInputError(f"{directory}: no such directory; give the campaign's directory "
                                 "(artifacts/<host>/<campaign id>)")
    capture = load_capture(directory)
    job = load_job(directory, capture)
    topology = read_topology(directory)
    floor = choose_floor(allreduce_floor, floors_under)
    context = {"interconnect": topology["interconnect"], "tensor_parallel_size": capture["tensor_parallel_size"]}
    links = pcie(capture)
    try:
        summary = summarize(trace_files(directory, capture), SummaryOptions(
            decode_pattern=decode_pattern or None, context=context, allreduce_floor=floor,
            checkpoint=capture["checkpoint"], fabric=links["findings"]))
    except AllreduceInputError as exc:
        raise CampaignInputError(f"{exc}; give another --allreduce-floor, or measure the floor again "
                                 "(playbooks/allreduce_bench.yml)") from None
    except LedgerInputError as exc:
        raise CampaignInputError(f"{os.path.join(directory, artifacts.CAPTURE_JSON)}: 'checkpoint': {exc}; re-run the "
                                 "campaign (its capture reads the checkpoint's headers)") from None
    record = campaign_record(directory, capture, job, topology, floor, links, ledger=summary["ledger"] is not None)
    campaign = {**record, "summary": summary}
    line = headline(record["host"], summary, None, record["downtime"])
    text = render_report(campaign, report_figures(campaign, line), template)
    row = history_row(record, summary) if history else None

    out = os.path.join
    lines = [f"wrote {SummaryRecord.from_dict(summary, 'the summary').dump(directory)}",
             f"wrote {artifacts.write_json(out(directory, artifacts.CAMPAIGN_JSON), record)}"]
    lines.append(chart_line(write_chart(summary, out(directory, artifacts.DECODE_PNG), host=record["host"],
                                        campaign_id=record["id"])))
    lines.append(steps_line(write_steps_chart(summary, out(directory, artifacts.STEPS_PNG), host=record["host"],
                                              campaign_id=record["id"])))
    if record["ledger_png"]:
        lines.append(ledger_line(write_ledger_chart(summary, out(directory, record["ledger_png"]), host=record["host"],
                                                    campaign_id=record["id"])))
    lines.append(f"wrote {artifacts.write_text(record['report'], text)}")
    if row is not None:
        created = append_history(history, row)
        lines.append(f"{'created' if created else 'appended to'} {history}: campaign {row['campaign_id']}")
    lines.append(f"{line} -> {record['report']}")
    return lines
