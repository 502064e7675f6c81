#!/usr/bin/env python3
"""Benchmark the trace summarizer against plain decompression and HTA, on the same files.

Each contender runs as a child process; we record its wall time, its CPU time (user +
system of it and every worker it waited for) and its peak RSS (the sum over the
process and its descendants, sampled every 20 ms from /proc).

    bench/setup_venv.sh                      # HTA into .cache/bench-venv (once)
    .venv/bin/python bench/gen_traces.py     # 8 ranks x ~80 MB gzip into .cache/bench/full
    .venv/bin/python bench/gen_traces.py --ranks 2 --target-mb 10 --out .cache/bench/hta
    .venv/bin/python bench/run_bench.py      # prints a Markdown table, writes .cache/bench/results.json
    .venv/bin/python bench/run_bench.py --only small   # the small set alone (~30 s)

The "isal floor" contender needs python-isal in .venv (`.venv/bin/pip install isal`); it is
skipped, with a note, where it is missing: it is a benchmark-only package, not a dependency.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_PY = REPO / ".venv" / "bin" / "python"
BENCH_PY = REPO / ".cache" / "bench-venv" / "bin" / "python"
SUMMARY = [str(REPO / ".venv" / "bin" / "vllm-trace-summary"), "--decode-pattern", "^decode_step$"]

DECOMPRESS = r"""
import gzip, os, sys
from concurrent.futures import ProcessPoolExecutor
def drain(path):
    n = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            n += len(chunk)
    return n
files = sys.argv[1:]
jobs = min(len(files), len(os.sched_getaffinity(0)))
with ProcessPoolExecutor(jobs) as pool:
    print(sum(pool.map(drain, files)))
"""

# The same loop and pool with ISA-L's inflate (python-isal): the "isal floor", what the
# summarizer's reader would cost if decompression were all it did and it used ISA-L.
ISAL_DECOMPRESS = DECOMPRESS.replace("import gzip, os, sys", "import os, sys\nfrom isal import igzip as gzip")
ISAL_VERSION = "import isal; print(isal.__version__)"

HTA = r"""
import sys
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
print(analyzer.get_gpu_kernel_breakdown(visualize=False)[0].to_string())
"""


def _tree_rss_kb(pid: int) -> int:
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    stack.extend(int(c) for c in fh.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def measure(label: str, cmd: list[str]) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    peak = 0
    stop = threading.Event()

    def sample():
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree_rss_kb(proc.pid))
            stop.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{label} failed ({proc.returncode}): {err.decode(errors='replace')[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result = {"label": label, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
              "peak_rss_mb_tree": round(peak / 1024, 1)}
    print(f"  {label}: {result}", file=sys.stderr)
    return result


def _files(d: Path) -> list[str]:
    files = sorted(str(p) for p in d.glob("*.json.gz"))
    if not files:
        raise SystemExit(f"no traces in {d}: run bench/gen_traces.py first")
    return files


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--full", type=Path, default=REPO / ".cache" / "bench" / "full")
    p.add_argument("--small", type=Path, default=REPO / ".cache" / "bench" / "hta")
    p.add_argument("--skip-hta", action="store_true")
    p.add_argument("--only", choices=("full", "small"),
                   help="run one set only (with its decompression contenders); default: both")
    p.add_argument("--out", type=Path, default=REPO / ".cache" / "bench" / "results.json")
    args = p.parse_args(argv)
    sets = {"full": args.full, "small": args.small}
    if args.only:
        sets = {args.only: sets[args.only]}
    files = {k: _files(d) for k, d in sets.items()}
    size = lambda fs: sum(os.path.getsize(f) for f in fs) / 1e6  # noqa: E731
    print("; ".join(f"{k} set: {len(fs)} files, {size(fs):.0f} MB gzip" for k, fs in files.items())
          + f"; {os.cpu_count()} CPUs", file=sys.stderr)
    res = {"cpus": os.cpu_count(), "loadavg_1m_start": round(os.getloadavg()[0], 2)}
    for k, fs in files.items():
        res[k] = {}
        res[f"{k}_gzip_mb"] = round(size(fs))
    isal = subprocess.run([str(VENV_PY), "-c", ISAL_VERSION], capture_output=True, text=True)
    res["isal_version"] = isal.stdout.strip() if isal.returncode == 0 else None
    if res["isal_version"] is None:
        print("  isal floor: skipped, python-isal not in .venv (.venv/bin/pip install isal)",
              file=sys.stderr)
    for k, fs in files.items():
        quoted = " ".join(f"'{f}'" for f in fs)
        res[k]["gzip -dc (serial)"] = measure(
            f"{k}: gzip -dc", ["sh", "-c", f"for f in {quoted}; do gzip -dc \"$f\"; done"])
        res[k]["python zlib (parallel)"] = measure(f"{k}: zlib parallel", [str(VENV_PY), "-c", DECOMPRESS, *fs])
        if res["isal_version"]:
            res[k]["isal floor (parallel)"] = measure(f"{k}: isal parallel", [str(VENV_PY), "-c", ISAL_DECOMPRESS, *fs])
    if "full" in files:
        res["full"]["summarizer"] = measure("summarizer", [*SUMMARY, str(args.full)])
        res["full"]["summarizer --jobs 1"] = measure("summarizer --jobs 1", [*SUMMARY, "--jobs", "1", str(args.full)])
    # Peak RSS against trace size: one rank of each set, alone (one worker, no pool).
    res["one rank"] = {}
    for f in [fs[0] for fs in (files.get("small"), files.get("full")) if fs]:
        label = f"summarizer, {os.path.basename(f)} ({os.path.getsize(f) / 1e6:.0f} MB gzip)"
        res["one rank"][label] = measure(label, [*SUMMARY, f])
    if "small" in files:
        res["small"]["summarizer"] = measure("summarizer small", [*SUMMARY, str(args.small)])
        res["small"]["summarizer --parser general"] = measure(
            "summarizer general", [*SUMMARY, "--parser", "general", str(args.small)])
        if not args.skip_hta:
            if not BENCH_PY.exists():
                raise SystemExit(f"{BENCH_PY} missing: run bench/setup_venv.sh (or pass --skip-hta)")
            res["small"]["HTA load + get_gpu_kernel_breakdown"] = measure(
                "HTA", [str(BENCH_PY), "-c", HTA, str(args.small)])
    res["loadavg_1m_end"] = round(os.getloadavg()[0], 2)  # other jobs on the machine inflate wall time
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))
    print(render(res))
    return 0


def render(res: dict) -> str:
    sizes = "; ".join(f"{k} set: {res[f'{k}_gzip_mb']} MB gzip" for k in ("full", "small")
                      if f"{k}_gzip_mb" in res)
    isal = f"python-isal {res['isal_version']}" if res.get("isal_version") else "no python-isal"
    lines = [f"{sizes}; {res['cpus']} CPUs; {isal}; 1-minute load average "
             f"{res.get('loadavg_1m_start', '?')} at the start, {res.get('loadavg_1m_end', '?')} at the end.",
             "", "| set | contender | wall s | CPU s | peak RSS, process tree (MB) |",
             "| --- | --- | ---: | ---: | ---: |"]
    for which in ("full", "one rank", "small"):
        for label, r in res.get(which, {}).items():
            lines.append(f"| {which} | {label} | {r['wall_s']} | {r['cpu_s']} | {r['peak_rss_mb_tree']} |")
    lines += ["", "Ratios:", ""]
    for which in ("full", "small"):
        s = res.get(which) or {}
        ours = s.get("summarizer")
        if not ours:
            continue
        for key, label in (("gzip -dc (serial)", "gzip -dc"),
                           ("python zlib (parallel)", "parallel zlib decompression"),
                           ("isal floor (parallel)", "isal floor (parallel ISA-L decompression)")):
            base = s.get(key)
            if base:
                lines.append(f"- {which} set, summarizer / {label}, wall: {ours['wall_s'] / base['wall_s']:.2f}x, "
                             f"CPU: {ours['cpu_s'] / base['cpu_s']:.2f}x")
    one = list(res.get("one rank", {}).values())
    if len(one) == 2:
        lines.append(f"- one rank, peak RSS of the larger file / the smaller: "
                     f"{one[1]['peak_rss_mb_tree'] / one[0]['peak_rss_mb_tree']:.2f}x")
    hta = (res.get("small") or {}).get("HTA load + get_gpu_kernel_breakdown")
    if hta:
        ours = res["small"]["summarizer"]
        lines.append(f"- HTA / summarizer on the small set, wall: {hta['wall_s'] / ours['wall_s']:.1f}x, CPU: "
                     f"{hta['cpu_s'] / ours['cpu_s']:.1f}x, peak RSS: "
                     f"{hta['peak_rss_mb_tree'] / ours['peak_rss_mb_tree']:.1f}x")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
