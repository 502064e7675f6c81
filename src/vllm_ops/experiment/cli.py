"""``vllm-experiment-report``: the controller-side files of an experiment (report.json, charts,
CSV rows, headline). The playbook runs it with ``ansible.builtin.command`` on the controller.

    vllm-experiment-report analyze DIR [--history CSV] [--template J2]
    vllm-experiment-report combine --out OUT [--history CSV] [--template J2] DIR...
    vllm-experiment-report prompts FILE
    vllm-experiment-report replay RECORDING... [--out DIR]

``prompts`` checks a prompts file for the benchmark's custom dataset (:mod:`.prompts`) and
prints ``{path, prompts, words}`` as JSON; the ``vllm_bench`` role runs it before anything restarts.
``replay`` reads a recording of the traffic recorder (:mod:`vllm_ops.traffic`), writes with ``--out``
``DIR/replay.jsonl`` (what ``vllm bench serve --dataset-name timed_trace`` replays) and
``DIR/replay.json`` (what a replay must reproduce, with the recording's sources, versions and mix), and
prints the expectation's figures as JSON; without ``--out`` it only checks the recording.

Both write ``report.json`` (layout: :mod:`vllm_ops.experiment.report`), ``throughput.png``,
``tpot.png`` and ``report.md`` (into DIR, or OUT for a fleet; the Markdown from the template
shipped in the package, or ``--template``), append the rows to the CSV when ``--history`` is
given, and print the headline last. Exit status 0, or 2 with one line on stderr on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .. import traffic
from ..artifacts import write_text
from ..cliutil import run_command
from .chart import write_throughput_chart, write_tpot_chart
from .history import COLUMN_DOCS, append_experiment, beside
from .inputs import load_experiment
from .prompts import check_prompts
from .render import render_markdown
from .report import build_report

PROG = "vllm-experiment-report"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Report of an experiment: a baseline and variants benchmarked with vllm bench serve.",
        epilog="Exit status: 0 on success, 2 on bad input or usage (one line on stderr).",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    csv_help = "append one row per variant and concurrency to this CSV, e.g. artifacts/HOST/experiments.csv"
    a = sub.add_parser("analyze", help="one host's experiment directory -> report.json, charts, CSV rows",
                       epilog="CSV columns: " + "; ".join(f"{k}: {v}" for k, v in COLUMN_DOCS.items()))
    a.add_argument("dir", metavar="DIR", help="the experiment directory (experiment.json and bench/)")
    a.add_argument("--history", metavar="CSV", help=csv_help)
    a.add_argument("--template", metavar="J2", help="render report.md from this template instead of the "
                                                    "package's experiment_report.md.j2")
    c = sub.add_parser("combine", help="several hosts' directories of one experiment -> one fleet report")
    c.add_argument("dirs", nargs="+", metavar="DIR", help="one experiment directory per host")
    c.add_argument("--out", required=True, metavar="OUT", help="directory for the combined files")
    c.add_argument("--history", metavar="CSV", help=csv_help)
    c.add_argument("--template", metavar="J2", help="render OUT/report.md from this template instead of the "
                                                    "package's")
    pr = sub.add_parser("prompts", help="check a prompts file (JSONL, one {\"prompt\": ...} a line) for "
                                        "vllm bench serve's custom dataset; print its size as JSON")
    pr.add_argument("file", metavar="FILE", help="the prompts file")
    rp = sub.add_parser("replay", help="a recording of the traffic recorder -> the replay's file and what a "
                                       "replay must reproduce; print its figures as JSON")
    rp.add_argument("recording", nargs="+", metavar="RECORDING",
                    help="traffic-*.jsonl files (each with its .json sidecar) or directories of them "
                         "(playbooks/traffic.yml fetches them)")
    rp.add_argument("--out", metavar="DIR", help="write DIR/replay.jsonl and DIR/replay.json; without it, "
                                                 "only check the recording")
    return p


def replay(recordings: list[str], out: str | None) -> dict:
    """The ``replay`` command (see the module's docstring): the figures printed."""
    recording = traffic.read(recordings)
    target = Path(out) / "replay.jsonl" if out else None
    text, expected = traffic.replay(recording, target)
    figures = {key: value for key, value in expected.to_json().items()
               if key not in ("input_lengths", "output_lengths", "id_counts")}
    figures |= {"source": [str(Path(r).resolve()) for r in recordings], "versions": recording.versions}
    if target is not None:
        write_text(target, text)
        write_text(target.parent / "replay.json", json.dumps(dict(
            expected.to_json(), **figures, mix=traffic.mix(recording.requests, recording.block)), indent=2) + "\n")
    return figures


def run(args: argparse.Namespace) -> list[str]:
    """Do one command; return the lines to print, the headline last."""
    if args.command == "prompts":
        return [json.dumps(check_prompts(args.file))]
    if args.command == "replay":
        return [json.dumps(replay(args.recording, args.out))]
    dirs = [args.dir] if args.command == "analyze" else args.dirs
    out = Path(args.dir if args.command == "analyze" else args.out)
    report = build_report([load_experiment(d) for d in dirs])
    if args.history:
        # the host's earlier figures of the same speculating variants on the other kind of load
        report["beside"] = beside(args.history, report)
    lines = []
    write_text(out / "report.json", json.dumps(report, indent=2) + "\n")
    lines.append(f"wrote {out / 'report.json'}")
    t = write_throughput_chart(report, out / report["charts"]["throughput"])
    lines.append(f"wrote {t['path']} ({t['lines']} lines)")
    b = write_tpot_chart(report, out / report["charts"]["tpot"])
    lines.append(f"wrote {b['path']} ({b['bars']} bars, {b['failed']} failed)")
    write_text(out / "report.md", render_markdown(report, args.template))
    lines.append(f"wrote {out / 'report.md'}")
    if args.history:
        n = append_experiment(args.history, report)
        lines.append(f"appended {n} rows to {args.history}")
    lines.append(report["headline"])
    return lines


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(PROG, lambda: "\n".join(run(args)))


if __name__ == "__main__":
    sys.exit(main())
