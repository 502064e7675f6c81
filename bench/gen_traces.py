#!/usr/bin/env python3
"""Scale a real torch.profiler trace to production size for the benchmark.

Replicates the events of a real trace (default: the two h200_tp2_decode ranks, which
alternate over the generated ranks) back to back in time, keeping torch's exporter
layout (or, with ``--layout pretty``, re-laid one key per line as torch 2.13 writes it),
until the gzip file reaches the target size; each rank's file gets its own
``distributedInfo``. Output goes to a git-ignored folder (default .cache/bench/full).

The file is written as three gzip members (head, replicated events, tail): every
gzip reader treats that as one stream, and the costly events member is compressed
once per source trace and shared by the ranks built from it.

    .venv/bin/python bench/gen_traces.py                       # 8 ranks, ~80 MB gzip each
    .venv/bin/python bench/gen_traces.py --ranks 2 --target-mb 8 --out .cache/bench/small
    .venv/bin/python bench/gen_traces.py --ranks 1 --target-mb 10 --layout pretty --out .cache/bench/pretty
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SOURCES = [
    REPO / "tests" / "data" / "traces" / "h200_tp2_decode" / f"tp2_rank{r}.pt.trace.json.gz" for r in (0, 1)
]
_TS = re.compile(rb'("ts": )(\d+(?:\.\d+)?)')
_INFO = re.compile(rb'"distributedInfo": \{.*?\}\]?[^\n]*\n')
_KEY_SEP = re.compile(rb', (?=")')  # between two keys of one line (a quote inside a string is escaped)


def _pretty_event(lines: list[bytes]) -> bytes:
    """One event of the compact layout, given as its lines without the braces, re-laid
    as torch 2.13's exporter writes it (the real vLLM 0.32 trace in tests/unit/traces/data):
    one key per line, 4-space indent; a complete (``ph: X``) event puts the comma before
    ``"args"`` on a line of its own; the args' lines are kept as they are."""
    pairs, args = [], []
    for i, line in enumerate(lines):
        if line.startswith(b'    "args": {'):
            args = lines[i:]
            break
        pairs += _KEY_SEP.split(line.strip().rstrip(b","))
    keys = [b"    " + p for p in pairs]
    if not args:
        return b"  {\n" + b",\n".join(keys) + b"\n  }"
    if pairs and pairs[0] == b'"ph": "X"':
        return b"  {\n" + b",\n".join(keys) + b"\n    ,\n" + b"\n".join(args) + b"\n  }"
    return b"  {\n" + b",\n".join([*keys, args[0]]) + b"\n" + b"\n".join(args[1:]) + b"\n  }"


def pretty_parts(head: bytes, body: bytes, tail: bytes) -> tuple[bytes, bytes, bytes]:
    """``_split``'s three parts of a trace in torch's compact exporter layout (``"ph": "X",
    "cat": ..., "name": ...`` on one line), re-laid in the one-key-per-line layout of torch
    2.13 (vLLM 0.32) with the same values, byte for byte. Header keys get that layout's
    4-space indent and the blank line after ``"traceEvents": [``; it ends ``],"traceName": ... }``."""
    head = re.sub(rb"(?m)^  (?=\S)", b"    ", head[:-1]) + b"\n    \n"
    name = re.search(rb'"traceName": ("[^"\n]*")', tail)
    return head, relayout_body(body), b"\n  ],\"traceName\": " + (name.group(1) if name else b'""') + b" }"


def relayout_pretty(text: bytes) -> bytes:
    """A whole compact trace re-laid one key per line (see ``pretty_parts``)."""
    return b"".join(pretty_parts(*_split(text)))


def relayout_body(body: bytes) -> bytes:
    """The events between ``"traceEvents": [`` and ``]`` re-laid one key per line."""
    out, lines = [], []
    for line in body.split(b"\n"):
        if line in (b"  {", b"  },", b"  }"):
            if lines:
                out.append(_pretty_event(lines))
            lines = []
        elif line:
            lines.append(line)
    if lines:
        out.append(_pretty_event(lines))
    return b",\n".join(out)


def _split(text: bytes) -> tuple[bytes, bytes, bytes]:
    m = re.search(rb'"traceEvents": \[\n', text)
    end = text.rfind(b"\n  ]")
    if m is None or end < 0:
        raise SystemExit("source is not in torch's exporter layout")
    return text[: m.end()], text[m.end(): end], text[end:]


def _span(body: bytes) -> float:
    values = [float(v) for _, v in _TS.findall(body)]
    return max(values) - min(values)


def _shift(body: bytes, offset: float) -> bytes:
    def sub(m: re.Match) -> bytes:
        return m.group(1) + f"{float(m.group(2)) + offset:.3f}".encode()

    return _TS.sub(sub, body)


def _member(data: bytes, level: int) -> bytes:
    return gzip.compress(data, compresslevel=level, mtime=0)


def build_body(source: Path, target_bytes: int, level: int,
               layout: str = "compact") -> tuple[bytes, bytes, bytes, int, int]:
    with gzip.open(source) as fh:
        head, body, tail = _split(fh.read())
    if layout == "pretty":
        head, body, tail = pretty_parts(head, body, tail)
    period = _span(body) + 1000.0  # 1 ms gap between replicas
    one = len(zlib.compress(_shift(body, 0.0), level))  # deflate size of one replica
    replicas = max(1, round(target_bytes / one))
    comp = zlib.compressobj(level, zlib.DEFLATED, 31)  # one gzip member for all replicas
    parts = []
    raw = 0
    for i in range(replicas):
        chunk = (b",\n" if i else b"") + _shift(body, i * period)
        raw += len(chunk)
        parts.append(comp.compress(chunk))
    parts.append(comp.flush())
    return head, b"".join(parts), tail, replicas, raw


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sources", nargs="+", type=Path, default=DEFAULT_SOURCES)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--target-mb", type=float, default=80.0, help="gzip size per rank (MB)")
    p.add_argument("--level", type=int, default=1, help="gzip level (1 gives about production's 10:1 ratio)")
    p.add_argument("--out", type=Path, default=REPO / ".cache" / "bench" / "full")
    p.add_argument("--layout", choices=("compact", "pretty"), default="compact",
                   help="compact: the source's layout (torch <= 2.12, one event per few lines); pretty: "
                        "one key per line, as torch 2.13's exporter writes it (vLLM 0.32)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.json.gz"):
        old.unlink()
    t0 = time.time()
    bodies = {}
    for i, src in enumerate(args.sources[: args.ranks]):
        bodies[i] = build_body(src, int(args.target_mb * 1e6), args.level, args.layout)
        print(f"{src.name}: {bodies[i][3]} replicas, {bodies[i][4] / 1e6:.0f} MB JSON "
              f"({time.time() - t0:.0f} s)", file=sys.stderr)
    for rank in range(args.ranks):
        head, body_gz, tail, _, raw = bodies[rank % len(bodies)]
        info = json.dumps({"backend": "nccl", "rank": rank, "world_size": args.ranks}).encode()
        head = _INFO.sub(b'"distributedInfo": ' + info + b",\n", head, count=1)
        path = args.out / f"bench_rank{rank}.pt.trace.json.gz"
        with open(path, "wb") as fh:
            fh.write(_member(head, args.level))
            fh.write(body_gz)
            fh.write(_member(tail, args.level))
        print(f"{path}: {path.stat().st_size / 1e6:.1f} MB gzip, {(len(head) + raw + len(tail)) / 1e6:.0f} MB JSON",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
