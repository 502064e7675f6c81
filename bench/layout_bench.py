#!/usr/bin/env python3
"""The summarizer's reader on the same events in torch's two exporter layouts, in one run.

Generates one rank (default ~10 MB gzip, from h200_tp2_decode rank 0, ``gen_traces.py``)
twice into a temporary directory: in the compact layout of torch <= 2.12 (``"ph": "X",
"cat": ..., "name": ...`` on one line) and in the one-key-per-line layout torch 2.13 writes
(vLLM 0.32). Then reads each with ``read_trace`` (parser auto) and the compact one also with
the general parser, ``--rounds`` times in turn, and prints the least process CPU time of
each case and their ratios. Ratios only: the machine is shared, absolute times move.

    .venv/bin/python bench/layout_bench.py                # ~1 min on 2 busy cores
    .venv/bin/python bench/layout_bench.py --target-mb 80 --rounds 1
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vllm_ops.traces.annotations import StepMatcher
from vllm_ops.traces.categories import Classifier
from vllm_ops.traces.ranks import allreduce_calls
from vllm_ops.traces.reader import read_trace

import gen_traces

MATCHER = StepMatcher(r"^decode_step$")


def write(out: Path, layout: str, target_mb: float) -> Path:
    head, body_gz, tail, _, _ = gen_traces.build_body(gen_traces.DEFAULT_SOURCES[0], int(target_mb * 1e6), 1, layout)
    path = out / f"{layout}_rank0.pt.trace.json.gz"
    with open(path, "wb") as fh:
        fh.write(gzip.compress(head, 1, mtime=0) + body_gz + gzip.compress(tail, 1, mtime=0))
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target-mb", type=float, default=10.0, help="gzip size of the generated rank (MB)")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    keep = allreduce_calls(Classifier())
    with tempfile.TemporaryDirectory(prefix="layout-bench-") as tmp:
        files = {layout: write(Path(tmp), layout, args.target_mb) for layout in ("compact", "pretty")}
        cases = [("compact", "auto"), ("pretty", "auto"), ("compact", "general")]
        best: dict = {}
        seen: dict = {}
        for _ in range(args.rounds):
            for layout, parser in cases:
                t0 = time.process_time()
                data = read_trace(str(files[layout]), MATCHER, parser=parser, keep_calls=keep)
                cpu = time.process_time() - t0
                best[layout, parser] = min(cpu, best.get((layout, parser), cpu))
                seen[layout, parser] = data
        sizes = {k: round(v.stat().st_size / 1e6, 1) for k, v in files.items()}
    ref = seen["compact", "general"]
    print(f"one rank, {sizes['compact']} MB gzip (compact) / {sizes['pretty']} MB gzip (pretty), "
          f"{ref.activities} GPU activities; least CPU s of {args.rounds} rounds")
    print("| layout | parser asked | parser used | CPU s | same tables as general on compact |")
    print("| --- | --- | --- | ---: | --- |")
    for (layout, parser), cpu in best.items():
        d = seen[layout, parser]
        same = (d.names, d.activities, d.gpu_spans, d.cpu_spans, d.graph_launches, d.acts.tobytes(),
                d.launches.tobytes()) == (ref.names, ref.activities, ref.gpu_spans, ref.cpu_spans,
                                          ref.graph_launches, ref.acts.tobytes(), ref.launches.tobytes())
        print(f"| {layout} | {parser} | {d.parser} | {cpu:.2f} | {same} |")
    base = best["compact", "auto"]
    print(f"\n- pretty / compact, parser auto, CPU: {best['pretty', 'auto'] / base:.2f}x")
    print(f"- general / auto, compact, CPU: {best['compact', 'general'] / base:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
