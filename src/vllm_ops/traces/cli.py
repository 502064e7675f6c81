"""``vllm-trace-summary``: where decode time goes, from torch.profiler traces of vLLM.

A trace without GPU kernel events (vLLM's CPU backend) is valid input: the command exits 0,
its GPU figures are null in the JSON and absent from the Markdown, and one line per such
rank on stderr says that its GPU time was not measured, whatever the output format, so the
note shows even when stdout goes to a file or to ``jq``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys

from ..errors import VllmOpsError
from ..records import SummaryRecord
from .categories import DEFAULT_RULES
from .options import SummaryOptions
from .render import to_markdown
from .run import DEFAULT_DECODE_PATTERN, DEFAULT_PREFILL_PATTERN, FALLBACK_DECODE_PATTERN
from .summary import summarize
from .topology import parse_topology
from .words import NOT_MEASURED

PROG = "vllm-trace-summary"


# The integer options and the least each takes, checked here so that a bad value's message names the flag.
_LEAST = (("top", "--top", 0), ("jobs", "--jobs", 1), ("tensor_parallel_size", "--tensor-parallel-size", 1),
          ("tokens", "--tokens", 0), ("key_tokens", "--key-tokens", 0))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Summarize torch.profiler traces (one file per rank) of a vLLM run: each step's period, GPU "
                    "busy and idle time and all-reduce transfer and waiting, the steady state, the straggler, "
                    "and a verdict on what bounds decode with the experiments to try next.",
        epilog="Exit status: 0 on success (warnings included in the output), also for traces without GPU kernel "
               "events (a CPU-only run), whose GPU figures are null and which stderr names, one line per rank; "
               "2 on bad input or usage.",
    )
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="trace files (*.pt.trace.json.gz, *.json, *.json.gz) or directories holding them: in a "
                        "directory with *.pt.trace.json[.gz] files, those (and *rank{N}*.json[.gz]) are the rank "
                        "traces, vLLM's front-end trace (*.async_llm.*) and other files are skipped; the file "
                        "stdout is redirected to is never read")
    p.add_argument("--decode-pattern", metavar="REGEX", default=None,
                   help=f"regex for decode step annotations (default: {DEFAULT_DECODE_PATTERN}, "
                        f"falling back to {FALLBACK_DECODE_PATTERN} when no rank has an engine step of any phase)")
    p.add_argument("--prefill-pattern", metavar="REGEX", default=None,
                   help=f"regex for prefill step annotations (default: {DEFAULT_PREFILL_PATTERN})")
    p.add_argument("--format", choices=("json", "markdown"), default="json", help="output format (default json)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="top kernels listed per rank (default 10)")
    p.add_argument("--category", action="append", default=[], metavar="NAME=REGEX",
                   help="extra classification rule, tried before the built-in table (repeatable)")
    p.add_argument("--keep-going", action="store_true",
                   help="skip unreadable files with a warning instead of failing")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="worker processes, one rank each (default: one per file, at most one per CPU)")
    p.add_argument("--parser", choices=("auto", "fast", "general"), default="auto",
                   help="auto: torch-layout fast path with a general fallback (default); general: full JSON "
                        "parse, which also validates the parts of the file the summary does not use")
    p.add_argument("--topology", metavar="FILE",
                   help="what `nvidia-smi topo -m` printed on the host, so the advisor knows the interconnect")
    p.add_argument("--interconnect", choices=("nvlink", "pcie", "mixed"),
                   help="the interconnect between the GPUs, instead of --topology")
    p.add_argument("--tensor-parallel-size", type=int, metavar="N",
                   help="the server's tensor-parallel size, for the advisor and the decode ledger (default: the "
                        "traces' world size, from their distributedInfo; a trace without one gives none, and "
                        "--checkpoint then needs this); refused where it cannot divide that world size")
    p.add_argument("--allreduce-floor", metavar="FILE",
                   help="the host's all-reduce floor (allreduce_bench.py's JSON), set beside each collective's "
                        "transfer and used by the verdict")
    p.add_argument("--checkpoint", metavar="DIR_OR_JSON",
                   help="the model's checkpoint, for the decode ledger (how far the steady decode step is from "
                        "its floor, part by part): its directory (config.json and the safetensors headers are read, "
                        "never a tensor), or its bytes already read: a JSON file of the record (the module "
                        "vllm_checkpoint's) or a campaign's capture.json, whose checkpoint it is")
    p.add_argument("--tokens", type=int, metavar="N",
                   help="tokens per decode step for the ledger, instead of what the steps' names say (a "
                        "--decode-pattern step says nothing)")
    p.add_argument("--key-tokens", type=int, metavar="N",
                   help="the decode requests' context lengths summed, per step, for the ledger's KV-cache floor, "
                        "instead of what the steps' names say (vLLM's detailed annotation; its native form does not "
                        "say); 0 for a step that reads no KV cache")
    p.add_argument("--list-categories", action="store_true", help="print the category table and exit")
    return p


def _output_file() -> list[tuple[int, int]]:
    """The file stdout is redirected to (``> summary.json`` creates it before the summary reads
    the directory), as ``(st_dev, st_ino)``, so that the summary never reads it."""
    try:
        st = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return []
    return [(st.st_dev, st.st_ino)] if stat.S_ISREG(st.st_mode) else []


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a bad option (argparse named its flag on stderr: 2), or --help (0)
        return exc.code if isinstance(exc.code, int) else 2
    if args.list_categories:
        for rule in DEFAULT_RULES:
            print(f"{rule.category:12s} {rule.pattern}\n{'':12s} {rule.note}")
        print(f"{'memcpy':12s} (trace category gpu_memcpy)\n{'memset':12s} (trace category gpu_memset)")
        print(f"{'other':12s} (anything no rule matches)")
        return 0
    if not args.paths:
        parser.print_usage(sys.stderr)
        print(f"{PROG}: error: give at least one trace file or directory", file=sys.stderr)
        return 2
    context = {}
    if args.topology:
        try:
            with open(args.topology, encoding="utf-8", errors="replace") as fh:
                context["interconnect"] = parse_topology(fh.read())["interconnect"]
        except OSError as exc:
            print(f"{PROG}: error: --topology {args.topology}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        if context["interconnect"] is None:
            print(f"{PROG}: warning: --topology {args.topology}: no GPU matrix in it; interconnect unknown",
                  file=sys.stderr)
    if args.interconnect:
        context["interconnect"] = args.interconnect
    for attr, flag, least in _LEAST:
        value = getattr(args, attr)
        if value is not None and value < least:
            print(f"{PROG}: error: {flag} must be at least {least}, got {value}", file=sys.stderr)
            return 2
    if args.tensor_parallel_size is not None:
        context["tensor_parallel_size"] = args.tensor_parallel_size
    try:
        summary = summarize(args.paths, SummaryOptions(
            decode_pattern=args.decode_pattern, prefill_pattern=args.prefill_pattern,
            keep_going=args.keep_going, top=args.top, categories=args.category or None, jobs=args.jobs,
            parser=args.parser, context=context, allreduce_floor=args.allreduce_floor, exclude=_output_file(),
            checkpoint=args.checkpoint, tokens=args.tokens, key_tokens=args.key_tokens,
        ))
    except VllmOpsError as exc:  # a trace's, the all-reduce floor's (vllm_ops.allreduce), the checkpoint's
        print(f"{PROG}: error: {_flags(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    for rank in summary["ranks"]:
        if rank.get("gpu_time_measured") is False:
            print(f"{PROG}: warning: rank {rank['rank']}: {NOT_MEASURED}", file=sys.stderr)
    text = (to_markdown(summary) if args.format == "markdown" else
            json.dumps(SummaryRecord.from_dict(summary, "the summary").to_dict(), indent=2) + "\n")
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    return 0


# The library's parameter names, as the command's flags (its messages name the parameter).
_FLAG_OF = {"tensor_parallel_size": "--tensor-parallel-size", "key_tokens": "--key-tokens", "tokens": "--tokens",
            "top": "--top", "jobs": "--jobs", "decode_pattern": "--decode-pattern",
            "prefill_pattern": "--prefill-pattern"}
_PARAM = re.compile(r"^(" + "|".join(sorted(_FLAG_OF, key=len, reverse=True)) + r")\b(?= must| \d+ contradicts|:)")


def _flags(message: str) -> str:
    """A library message that starts with a parameter's name, starting with its flag instead."""
    return _PARAM.sub(lambda m: _FLAG_OF[m.group(1)], message)


if __name__ == "__main__":
    sys.exit(main())
