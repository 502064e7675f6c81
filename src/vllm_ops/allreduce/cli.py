"""``vllm-allreduce-report``: an all-reduce floor (``allreduce_bench.py``'s JSON) in words.

    vllm-allreduce-report floor FLOOR_JSON... [--png OUT] [--markdown OUT] [--failed NAME=WHY]

Prints the floor as Markdown (several: the first, the unit's environment, beside the others,
the NCCL variants); with ``--markdown`` writes it there and prints the one-line headline and
``wrote ...`` instead; ``--png`` also draws latency against message size. The ``allreduce_bench``
role runs it on the controller. Exit status 0, or 2 with one line on stderr on bad input.
"""

from __future__ import annotations

import argparse
import sys

from ..artifacts import write_text
from ..cliutil import run_command
from .chart import write_floor_chart
from .errors import AllreduceInputError
from .floor import compare_markdown, headline, load_floor, to_markdown

PROG = "vllm-allreduce-report"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Reports of the host's all-reduce floor (roles/allreduce_bench).",
        epilog="Exit status: 0 on success, 2 on bad input or usage (one line on stderr).",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fl = sub.add_parser("floor", help="print an all-reduce floor (allreduce_bench.py's JSON) as Markdown; with "
                                      "several, the first (the unit's environment) beside the others (variants)")
    fl.add_argument("floors", nargs="+", metavar="FLOOR_JSON", help="allreduce_bench.py's JSON")
    fl.add_argument("--png", metavar="OUT_PNG", help="also draw latency against message size")
    fl.add_argument("--markdown", metavar="OUT_MD", help="write the Markdown here instead of printing it")
    fl.add_argument("--failed", action="append", default=[], metavar="NAME=WHY",
                    help="a variant whose measurement failed, and why (repeatable)")
    return p


def floor_report(args: argparse.Namespace) -> str:
    """Do ``floor``; return the lines to print."""
    floors = [load_floor(path) for path in args.floors]
    failed = {}
    for item in args.failed:
        name, sep, why = item.partition("=")
        if not sep or not name:
            raise AllreduceInputError(f"--failed {item!r}: expected NAME=WHY")
        failed[name] = why
    text = to_markdown(floors[0])
    if len(floors) > 1 or failed:
        text += "\n" + compare_markdown(floors, failed)
    if args.markdown:
        write_text(args.markdown, text)
        lines = [headline(floors, failed), f"wrote {args.markdown}"]
    else:
        lines = [text.rstrip("\n")]
    if args.png:
        drawn = write_floor_chart(floors, args.png)
        lines.append(f"wrote {drawn['path']} ({drawn['sizes']} sizes)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(PROG, lambda: floor_report(args))


if __name__ == "__main__":
    sys.exit(main())
