"""``vllm-rollout-report``: the controller-side files of a rollout. The rollout role runs it with
``ansible.builtin.command`` on the controller.

    vllm-rollout-report gate DIR --max-regression-pct PCT
    vllm-rollout-report analyze DIR [--hosts H1,H2,...] [--template J2]

``gate`` reads the canary's job directory (``experiment.json``, ``bench/``), writes ``DIR/gate.json``
(:mod:`vllm_ops.rollout.gate`) and prints its line last. ``analyze`` reads a rollout's directory
(``hosts/*.json``), writes ``report.json`` (:mod:`vllm_ops.rollout.report`) and ``report.md`` there and
prints the headline last. Exit status 0 (whether or not the gate passed: ``gate.json`` says), or 2
with one line on stderr on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..artifacts import write_text
from ..cliutil import run_command
from ..experiment.inputs import load_experiment
from .gate import gate
from .render import render_markdown
from .report import build_report, load_rollout

PROG = "vllm-rollout-report"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="A rollout's gate and report.",
                                epilog="Exit status: 0 on success, 2 on bad input or usage (one line on stderr).")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    g = sub.add_parser("gate", help="the canary's job directory -> gate.json, its line last")
    g.add_argument("dir", metavar="DIR", help="the canary's job directory (experiment.json and bench/)")
    g.add_argument("--max-regression-pct", type=float, required=True, metavar="PCT",
                   help="the largest regression allowed, percent (vllm_rollout_max_regression_pct)")
    g.add_argument("--accept-inconclusive", action="store_true",
                   help="pass a gate whose noise band is wider than the regression allowed "
                        "(vllm_rollout_accept_inconclusive); without it such a gate fails")
    a = sub.add_parser("analyze", help="a rollout's directory -> report.json, report.md, the headline last")
    a.add_argument("dir", metavar="DIR", help="the rollout's directory (hosts/*.json)")
    a.add_argument("--hosts", default="", metavar="H1,H2", help="the play's hosts in order (those not reached too)")
    a.add_argument("--template", metavar="J2", help="render report.md from this template instead of the "
                                                    "package's rollout_report.md.j2")
    return p


def run(args: argparse.Namespace) -> list[str]:
    """Do one command; return the lines to print, the headline (or the gate's line) last."""
    out = Path(args.dir)
    if args.command == "gate":
        verdict = gate(load_experiment(out), args.max_regression_pct, args.accept_inconclusive)
        write_text(out / "gate.json", json.dumps(verdict, indent=2) + "\n")
        return [f"wrote {out / 'gate.json'}", *verdict["warnings"], verdict["line"]]
    hosts = [h for h in args.hosts.split(",") if h]
    report = build_report(load_rollout(out), hosts)
    write_text(out / "report.json", json.dumps(report, indent=2) + "\n")
    write_text(out / "report.md", render_markdown(report, args.template))
    return [f"wrote {out / 'report.json'}", f"wrote {out / 'report.md'}", report["headline"]]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(PROG, lambda: "\n".join(run(args)))


if __name__ == "__main__":
    sys.exit(main())
