"""``vllm-campaign-report``: the campaign's controller-side files.

    vllm-campaign-report analyze DIR [--history CSV] [--template J2] [--decode-pattern RE]
                                     [--allreduce-floor FLOOR_JSON | --floors-under DIR2]

``analyze`` is the campaign's report, one process (:mod:`.report`); the playbook runs it with
``ansible.builtin.command`` on the controller, since filters do no I/O. ``estimate`` sizes the
next capture's traces for the preflight; ``chart``, ``steps``, ``history`` and ``headline`` redo one
output from a ``summary.json`` already written.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..cliutil import read_json, run_command
from ..records import RecordError, SummaryRecord
from .chart import chart_line, steps_line, write_chart, write_steps_chart
from .diskspace import estimate
from .errors import CampaignInputError
from .figures import headline
from .history import COLUMN_DOCS, append_history, history_row
from .report import analyze

PROG = "vllm-campaign-report"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Controller-side files of a profiling campaign.",
        epilog="Exit status: 0 on success, 2 on bad input or usage (one line on stderr).",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    an = sub.add_parser(
        "analyze", help="the campaign's directory in, every output out: summary.json, campaign.json, decode.png, "
                        "steps.png, report.md, the history row; prints the headline last",
        epilog="DIR holds the traces (*.pt.trace.json.gz), capture.json, topology.txt (may be absent) and "
               "job.json (absent: finished now, downtime not recorded). History columns: "
               + "; ".join(f"{k}: {v}" for k, v in COLUMN_DOCS.items()))
    an.add_argument("dir", metavar="DIR", help="the campaign's directory, e.g. artifacts/HOST/CAMPAIGN_ID")
    an.add_argument("--history", metavar="CSV", help="append the campaign's row to this CSV, e.g. "
                                                     "artifacts/HOST/history.csv")
    an.add_argument("--template", metavar="J2", help="render report.md from this template instead of the "
                                                     "package's campaign_report.md.j2")
    an.add_argument("--decode-pattern", metavar="RE", default=None,
                    help="regex of decode-step annotations (empty or absent: the summarizer's default)")
    floor = an.add_mutually_exclusive_group()
    floor.add_argument("--allreduce-floor", metavar="FLOOR_JSON",
                       help="the host's all-reduce floor (allreduce_bench.py's JSON)")
    floor.add_argument("--floors-under", metavar="DIR2",
                       help="use the newest allreduce-unit.json at most 3 levels below DIR2 (last by sorted path), "
                            "e.g. artifacts/HOST")
    c = sub.add_parser("chart", help="write the PNG bar chart of decode time per category and rank")
    c.add_argument("summary", metavar="SUMMARY_JSON", help="the trace summary (summary.json) as JSON")
    c.add_argument("out", metavar="OUT_PNG", help="where to write the PNG")
    c.add_argument("--title", help="chart title (default: built from --host and --campaign-id)")
    c.add_argument("--host", help="host named in the default title")
    c.add_argument("--campaign-id", help="campaign id named in the default title")
    st = sub.add_parser("steps", help="write the PNG chart of each decode step's parts, per rank")
    st.add_argument("summary", metavar="SUMMARY_JSON", help="the trace summary as JSON")
    st.add_argument("out", metavar="OUT_PNG", help="where to write the PNG")
    st.add_argument("--host", help="host named in the title")
    st.add_argument("--campaign-id", help="campaign id named in the title")
    h = sub.add_parser(
        "history", help="append the campaign's line to a history CSV",
        epilog="Columns: " + "; ".join(f"{k}: {v}" for k, v in COLUMN_DOCS.items()),
    )
    h.add_argument("summary", metavar="SUMMARY_JSON", help="the trace summary as JSON")
    h.add_argument("meta", metavar="META_JSON", help="the report's campaign dict as JSON (id, host, report, ...)")
    h.add_argument("csv", metavar="CSV_PATH", help="the history file, e.g. artifacts/HOST/history.csv")
    es = sub.add_parser("estimate", help="print, as JSON, the room the next capture's traces need on the host")
    es.add_argument("--last", metavar="CAMPAIGN_JSON", help="the host's last campaign.json (default: none)")
    for flag in ("--requests", "--concurrency", "--output-tokens", "--ranks"):
        es.add_argument(flag, type=int, required=True)
    hl = sub.add_parser("headline", help="print the one-line headline")
    hl.add_argument("summary", metavar="SUMMARY_JSON", help="the trace summary as JSON")
    hl.add_argument("--host", required=True, help="host named in the line")
    hl.add_argument("--report", default=None, help="report path shown after '->'")
    return p


def _load_json(path: str, what: str) -> object:
    return read_json(path, what, CampaignInputError)


def _summary(path: str) -> dict:
    """``path`` read as :class:`vllm_ops.records.SummaryRecord`, as a dict of its fields."""
    try:
        return SummaryRecord.load(path).to_dict()
    except RecordError as exc:
        raise CampaignInputError(str(exc)) from None


def run(args: argparse.Namespace) -> str:
    """Do one command; return the lines to print."""
    if args.command == "analyze":
        return "\n".join(analyze(args.dir, history=args.history, template=args.template,
                                 decode_pattern=args.decode_pattern, allreduce_floor=args.allreduce_floor,
                                 floors_under=args.floors_under))
    if args.command == "estimate":
        last = _load_json(args.last, "campaign record") if args.last else None
        return json.dumps(estimate(last, requests=args.requests, concurrency=args.concurrency,
                                   output_tokens=args.output_tokens, ranks=args.ranks))
    summary = _summary(args.summary)
    if args.command == "chart":
        return chart_line(write_chart(summary, args.out, host=args.host, campaign_id=args.campaign_id,
                                      title=args.title))
    if args.command == "steps":
        return steps_line(write_steps_chart(summary, args.out, host=args.host, campaign_id=args.campaign_id))
    if args.command == "history":
        meta = _load_json(args.meta, "metadata")
        row = history_row(meta, summary)
        created = append_history(args.csv, row)
        return f"{'created' if created else 'appended to'} {args.csv}: campaign {row['campaign_id']}"
    return headline(args.host, summary, args.report)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(PROG, lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
