"""``vllm-tune-report``: the tune's controller-side steps, each one command the role runs.

    vllm-tune-report plan (--summary JSON | --summary-under DIR | --plan JSON) --unit JSON --max-loads N
                          [--speculative-config JSON] [--profile-loads N] [--loads-under DIR] [--out plan.json]
    vllm-tune-report prescreen DIR [--failed NAME=WHY ...]
    vllm-tune-report winner DIR
    vllm-tune-report analyze DIR [--history CSV] [--template J2]

``plan`` prints the plan (:mod:`.plan`) with its cost as JSON (and writes it with ``--out``);
``prescreen`` reads DIR/plan.json and DIR/allreduce/allreduce-*.json, writes DIR/prescreen.json and
prints it; ``winner`` prints the winner's settings as JSON (null when none) from what DIR/experiment/
holds; ``analyze`` writes DIR/report.json, report.md, host_vars.yml (with a winner), the experiment's
report and charts under DIR/experiment/, appends a row to the CSV, and prints the headline last.
Exit status 0, or 2 with one line on stderr on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..allreduce import result_name
from ..artifacts import find_newest, write_json, write_text
from ..cliutil import read_json, run_command
from ..experiment import cli as experiment_cli
from ..loadcost import last_load
from ..render import render
from ..traces.experiments import with_ledger
from ..traces.words import describe
from .errors import TuneInputError
from .history import COLUMN_DOCS, append_tune
from .plan import build_plan, cost, plan_words, served_allreduce
from .prescreen import screen, screen_words
from .result import EXPERIMENT_DIR, analyze, merged_settings, read_summary, winner, write_outputs

PROG = "vllm-tune-report"
TEMPLATE = "tune_report.md.j2"


def _json_arg(text: str, what: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TuneInputError(f"{what}: not JSON ({exc.msg})") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="The tune's steps on the controller: plan, pre-screen, "
                                "winner, report.",
                                epilog="Exit status: 0 on success, 2 on bad input (one line on stderr).")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    pl = sub.add_parser("plan", help="the plan of a verdict (a trace summary) or of a plan file, with its cost")
    src = pl.add_mutually_exclusive_group(required=True)
    src.add_argument("--summary", metavar="JSON", help="a trace summary (summary.json): its verdict's next_tests")
    src.add_argument("--summary-under", metavar="DIR", help="the newest summary.json under DIR (a host's artifacts)")
    src.add_argument("--plan", metavar="JSON", help="a plan file as JSON: {tests: [...]} or {variants, sweeps}; "
                     "- reads it from stdin")
    pl.add_argument("--unit", required=True, metavar="JSON",
                    help='the normal service\'s settings, {"environment": {...}, "extra_args": [...]}')
    pl.add_argument("--max-loads", required=True, type=int, help="variants loaded at most (vllm_tune_max_loads)")
    pl.add_argument("--speculative-config", default="{}", metavar="JSON",
                    help="the speculative decoding to test instead of n-gram (a draft or EAGLE model), {} for n-gram")
    pl.add_argument("--profile-loads", type=int, default=0, help="the loads the profile costs (1 on the restart path)")
    pl.add_argument("--loads-under", metavar="DIR", help="the host's artifacts: its last measured load time")
    pl.add_argument("--out", metavar="JSON", help="also write the plan there")
    pr = sub.add_parser("prescreen", help="judge the pre-screen's floors (DIR/allreduce/) and order the loads")
    pr.add_argument("dir", metavar="DIR", help="the tune's directory (plan.json, allreduce/)")
    pr.add_argument("--failed", action="append", default=[], metavar="NAME=WHY", help="a run that failed (repeatable)")
    wi = sub.add_parser("winner", help="the winner's settings (the unit's with the winner's laid over), or null")
    wi.add_argument("dir", metavar="DIR", help="the tune's directory")
    an = sub.add_parser("analyze", help="the tune's report, host_vars.yml and history row; the headline last",
                        epilog="CSV columns: " + "; ".join(f"{k}: {v}" for k, v in COLUMN_DOCS.items()))
    an.add_argument("dir", metavar="DIR", help="the tune's directory (tune.json, plan.json, ...)")
    an.add_argument("--history", metavar="CSV", help="append the tune's row to this CSV (artifacts/HOST/tunes.csv)")
    an.add_argument("--template", metavar="J2", help="render report.md from this template instead of the package's")
    return p


def do_plan(args: argparse.Namespace) -> str:
    unit = _json_arg(args.unit, "--unit")
    if not isinstance(unit, dict):
        raise TuneInputError('--unit must be {"environment": {...}, "extra_args": [...]}')
    spec = _json_arg(args.speculative_config, "--speculative-config")
    origin: dict = {}
    served = served_allreduce(None)
    if args.plan:
        if args.plan == "-":
            source = _json_arg(sys.stdin.read(), "the plan on stdin")
        else:
            source = read_json(args.plan, "plan file", TuneInputError)
        where = "the plan file" if args.plan == "-" else f"the plan file {args.plan}"
        origin = {"kind": "file", "path": None if args.plan == "-" else args.plan, "words": where}
        # the all-reduce the service runs, from the host's newest trace summary where it has one
        newest = find_newest(args.loads_under, "summary.json") if args.loads_under else None
        if newest is not None:
            served = served_allreduce(read_summary(newest), str(newest))
    else:
        path = args.summary or find_newest(args.summary_under, "summary.json")
        if path is None:
            raise TuneInputError(f"no summary.json under {args.summary_under}: profile the host first (profile.yml), "
                                 "or give a plan file")
        summary = read_summary(path)
        verdict = summary["verdict"]
        if not isinstance(verdict, dict) or "next_tests" not in verdict:
            raise TuneInputError(f"{path}: its verdict has no next_tests (a summary of an earlier release): "
                                 "summarize the traces again (vllm-campaign-report analyze DIR)")
        source = with_ledger(verdict["next_tests"], summary.get("ledger"), verdict.get("rank"))
        transfer = (verdict.get("evidence") or {}).get("allreduce_transfer_ms")
        origin = {"kind": "verdict", "path": path, "verdict": describe(verdict), "transfer_ms": transfer,
                  "words": f"the verdict \"{describe(verdict)}\" ({path})"}
        served = served_allreduce(summary, str(path))
    plan = build_plan(source, unit_environment=unit.get("environment") or {}, unit_args=unit.get("extra_args") or [],
                      max_loads=args.max_loads, speculative_config=spec or None, where=origin.get("path") or "plan",
                      origin=origin, served=served)
    plan["unit"] = {"environment": dict(unit.get("environment") or {}),
                    "extra_args": list(unit.get("extra_args") or [])}
    plan["cost"] = cost(plan, args.profile_loads, last_load(args.loads_under))
    plan["words"] = plan_words(plan, plan["cost"])
    if args.out:
        write_json(args.out, plan)
    return json.dumps(plan)


def do_prescreen(args: argparse.Namespace) -> str:
    d = Path(args.dir)
    plan = read_json(d / "plan.json", "tune plan", TuneInputError)
    failed = {}
    for item in args.failed:
        name, sep, why = item.partition("=")
        if not sep or not name:
            raise TuneInputError(f"--failed {item!r}: expected NAME=WHY")
        failed[name] = why
    floors = {}
    for name in ["unit", *plan["prescreen"]]:
        path = d / "allreduce" / result_name(name)
        if path.exists():
            floors[name] = str(path)
    result = screen(plan, floors, failed, transfer_ms=(plan.get("origin") or {}).get("transfer_ms"))
    result["words"] = screen_words(result)
    write_json(d / "prescreen.json", result)
    return json.dumps(result)


def do_winner(args: argparse.Namespace) -> str:
    d = Path(args.dir)
    plan = read_json(d / "plan.json", "tune plan", TuneInputError)
    from ..experiment import build_report, load_experiment

    if not (d / EXPERIMENT_DIR / "experiment.json").exists():
        return "null"
    win = winner(build_report([load_experiment(d / EXPERIMENT_DIR)]))
    if win is None:
        return "null"
    return json.dumps({"name": win["name"], **merged_settings(plan.get("unit") or {}, win)})


def do_analyze(args: argparse.Namespace) -> str:
    d = Path(args.dir)
    lines = []
    if (d / EXPERIMENT_DIR / "experiment.json").exists():
        lines += experiment_cli.run(experiment_cli.build_parser().parse_args(["analyze", str(d / EXPERIMENT_DIR)]))[:-1]
    report = analyze(d)
    lines += [f"wrote {p}" for p in write_outputs(report, d)]
    write_text(d / "report.md", render(args.template, TEMPLATE, {"report": report}, error=TuneInputError))
    lines.append(f"wrote {d / 'report.md'}")
    if args.history:
        append_tune(args.history, report)
        lines.append(f"appended 1 row to {args.history}")
    lines.append(report["headline"])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    call = {"plan": do_plan, "prescreen": do_prescreen, "winner": do_winner, "analyze": do_analyze}[args.command]
    return run_command(PROG, lambda: call(args))


if __name__ == "__main__":
    sys.exit(main())
