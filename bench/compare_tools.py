#!/usr/bin/env python3
"""Side by side: HTA, an independent reference and vllm-trace-summary on the same traces.

    bench/setup_venv.sh                                   # HTA into .cache/bench-venv (once)
    .venv/bin/python bench/compare_tools.py [DIR]         # default: tests/data/traces/h200_tp2_decode,
                                                          # else ../shared/traces/h200_tp2_decode

Prints a Markdown table; writes HTA's own figures to .cache/bench/hta_compare.json and the
whole comparison to .cache/bench/compare.json. A benchmark, not a test: nothing is asserted,
and a summarizer key that is not there (yet) is shown as "missing".

What HTA 0.5.0 computes (read from its source in .cache/bench-venv, hta/analyzers/
breakdown_analysis.py, hta/common/trace_parser.py, hta/common/trace.py, hta/utils/utils.py):

- Parsing. Ranks come from the first `"rank": N` match in the file text (whitespace after
  the colon required; none found -> rank 0), not from the file name: any *.json / *.gz in
  trace_dir is taken. With float timestamps (ns resolution), round_down_time_stamps replaces
  every event's ts by ceil(ts) and its end by floor(ts + dur), so each activity loses up to
  2 µs and one shorter than ~1 µs can get dur 0 or -1 (set HTA_DISABLE_NS_ROUNDING=1 to turn
  this off; this script runs HTA both ways). Without `ProfilerStep#N` annotations (vLLM
  captures have none) no event is filtered out; with them, kernels of the last step are dropped.
  "GPU events" are rows whose args.stream parses as an int (kernels, memcpy, memset; the
  gpu_user_annotation rows have no args.stream and are left out).
- get_temporal_breakdown, per rank, in µs (its docstring says ns; the column names and the
  data are µs): kernel_time = end of the last merged GPU interval - start of the first (the
  span); idle_time = kernel_time - length of the union of all GPU intervals, streams merged;
  compute_time = union of the COMPUTATION kernels; non_compute_time = kernel_time -
  compute - idle (communication and memory time not under a compute kernel).
- get_idle_time_breakdown, per rank AND per stream (never streams merged): kernels, memcpy
  and memset of one stream sorted by ts; each one's idle interval = its ts - the end of the
  kernel before it on that stream (the first kernel has none); the interval is
    host_wait   if the CPU launch event of the kernel (cudaLaunchKernel & co., linked by
                args.correlation) starts after the previous kernel's end: the CPU had not
                enqueued it yet, the whole gap counts;
    kernel_wait else, if the gap < consecutive_kernel_delay (default 30; the docstring says
                ns, but it is compared with µs timestamps, so 30 µs);
    other       else (e.g. waiting on an event from another stream).
  The sum of the three on a stream is that stream's idle time, not the rank's: on a rank with
  several streams they do not add up to get_temporal_breakdown's idle_time.
- get_gpu_kernel_breakdown: kernel type by name only, `^nccl.*Kernel` = COMMUNICATION,
  `^Memcpy|^Memset|^dma` = MEMORY, the rest (vLLM's custom all-reduce included) =
  COMPUTATION; per type the union of that type's intervals, with time where types overlap
  reported as "A overlapping B"; each segment truncated to int. The first DataFrame is summed
  over all ranks, so this script runs one TraceAnalysis per rank (one file per temporary dir).

The independent reference (plain json.load, below) uses the unrounded timestamps: span = last
end - first start of the GPU activities (cat kernel / gpu_memcpy / gpu_memset, ph X), busy =
union of [ts, ts + dur), idle = span - busy, per rank and per stream; host / kernel / other
wait are HTA's definitions re-implemented on unrounded data. All-reduce: the k-th AllReduce
kernel of every rank is one collective; its transfer = the least duration over ranks (the
others waited for the last rank to arrive); bus bandwidth = In msg nelems * element size /
transfer * 2(n-1)/n, over all calls (total bytes / total transfer time).
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH_PY = REPO / ".cache" / "bench-venv" / "bin" / "python"
SUMMARY = REPO / ".venv" / "bin" / "vllm-trace-summary"
DECODE_PATTERN = "^decode_step$"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
KERNEL_WAIT_US = 30.0  # HTA's consecutive_kernel_delay default, in µs as HTA applies it
DTYPE_BYTES = {"BFloat16": 2, "Half": 2, "Float": 4, "Float32": 4, "Double": 8, "Byte": 1,
               "Char": 1, "Int": 4, "Long": 8, "Float8_e4m3fn": 1, "Float8_e5m2": 1}
# HTA's kernel-type regexes (hta/utils/utils.py), for the reference of its kernel breakdown.
HTA_COMM_RE = re.compile(r"^nccl.*Kernel")
HTA_MEMORY_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
# Quoted, not run: TraceLens cannot be installed here (../shared/notes/traces.md).
TRACELENS_ALLREDUCE_MS_PER_STEP = 0.474

HTA_CHILD = r"""
import json, os, sys, tempfile, time
import pandas as pd
import hta
from hta.trace_analysis import TraceAnalysis

files, out = json.loads(sys.argv[1]), sys.argv[2]
res = {"hta_version": getattr(hta, "__version__", None), "pandas_version": pd.__version__,
       "HTA_DISABLE_NS_ROUNDING": os.environ.get("HTA_DISABLE_NS_ROUNDING", "0"), "files": {}}
num = lambda v: None if pd.isna(v) else float(v)
for path in files:
    with tempfile.TemporaryDirectory(prefix="hta-") as d:
        # One file per directory, so that every figure below is this rank's alone.
        name = "rank.pt.trace.json.gz" if path.endswith(".gz") else "rank.pt.trace.json"
        os.symlink(os.path.abspath(path), os.path.join(d, name))
        t0 = time.perf_counter()
        a = TraceAnalysis(trace_dir=d)
        load_s = time.perf_counter() - t0
        ranks = a.t.get_ranks()
        tb = a.get_temporal_breakdown(visualize=False)
        idle, _ = a.get_idle_time_breakdown(ranks=ranks, visualize=False)
        kt, _ = a.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
        res["files"][path] = {
            "hta_ranks": [int(r) for r in ranks],
            "load_s": round(load_s, 3),
            "temporal_breakdown": [{k: (int(v) if k == "rank" else num(v)) for k, v in row.items()}
                                   for row in tb.to_dict("records")],
            "idle_time_breakdown": [{"rank": int(r["rank"]), "stream": int(r["stream"]),
                                     "idle_category": str(r["idle_category"]),
                                     "idle_time_us": num(r["idle_time"]),
                                     "idle_time_ratio": num(r["idle_time_ratio"])}
                                    for r in idle.to_dict("records")],
            "gpu_kernel_breakdown_us": {str(r["kernel_type"]): num(r["sum"])
                                        for r in kt.to_dict("records")},
        }
with open(out, "w") as fh:
    json.dump(res, fh, indent=2)
"""


# ---------------------------------------------------------------------------- reference

def _union(intervals: list[tuple[float, float]]) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def _timeline(acts: list[tuple[float, float]]) -> dict:
    span = max(e for _, e in acts) - min(s for s, _ in acts)
    busy = _union(acts)
    return {"span_us": span, "busy_us": busy, "idle_us": span - busy, "activities": len(acts)}


def _hta_idle_categories(acts: list[dict], launch_ts: dict) -> dict:
    """HTA's get_idle_time_breakdown on one stream, on unrounded timestamps."""
    out = {"host_wait": 0.0, "kernel_wait": 0.0, "other": 0.0}
    acts = sorted(acts, key=lambda a: a["ts"])
    for prev, cur in itertools.pairwise(acts):
        prev_end = prev["ts"] + prev["dur"]
        gap = cur["ts"] - prev_end
        launch = launch_ts.get(cur["corr"])
        if launch is not None and launch > prev_end:
            out["host_wait"] += gap
        elif gap < KERNEL_WAIT_US:
            out["kernel_wait"] += gap
        else:
            out["other"] += gap
    return out


def _hta_kernel_type(name: str) -> str:
    if HTA_COMM_RE.match(name):
        return "COMMUNICATION"
    if HTA_MEMORY_RE.match(name):
        return "MEMORY"
    return "COMPUTATION"


def reference_rank(path: str, index: int) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        doc = json.load(fh)
    info = doc.get("distributedInfo") or {}
    acts, steps, launch_ts, allreduce = [], [], {}, []
    for e in doc.get("traceEvents", []):
        if e.get("ph") != "X":
            continue
        cat, args = e.get("cat"), e.get("args") or {}
        if cat in GPU_CATS:
            a = {"ts": float(e["ts"]), "dur": float(e.get("dur", 0)), "name": e.get("name", ""),
                 "stream": args.get("stream", e.get("tid")), "corr": args.get("correlation")}
            acts.append(a)
            if cat == "kernel" and "AllReduce" in a["name"]:
                allreduce.append({"ts": a["ts"], "dur": a["dur"],
                                  "nelems": args.get("In msg nelems"), "dtype": args.get("dtype"),
                                  "group_size": args.get("Group size"),
                                  "pg": str(args.get("Process Group Name", ""))})
        elif cat == "gpu_user_annotation" and re.search(DECODE_PATTERN, e.get("name", "")):
            steps.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
        elif "correlation" in args and cat not in ("gpu_user_annotation",):
            launch_ts[args["correlation"]] = float(e["ts"])  # cuda_runtime / cuda_driver
    rank = info.get("rank", index)
    out = {"file": path, "rank": int(rank), "world_size": info.get("world_size"),
           "decode_steps": len(steps)}
    if not acts:
        out["timeline"] = None
        return out
    out["timeline"] = _timeline([(a["ts"], a["ts"] + a["dur"]) for a in acts])
    by_stream = defaultdict(list)
    for a in acts:
        by_stream[a["stream"]].append(a)
    out["streams"] = {}
    for s, sa in sorted(by_stream.items(), key=lambda kv: str(kv[0])):
        st = _timeline([(a["ts"], a["ts"] + a["dur"]) for a in sa])
        st.update(_hta_idle_categories(sa, launch_ts))
        out["streams"][str(s)] = st
    by_type = defaultdict(list)
    for a in acts:
        by_type[_hta_kernel_type(a["name"])].append((a["ts"], a["ts"] + a["dur"]))
    out["kernel_type_union_us"] = {k: _union(v) for k, v in sorted(by_type.items())}
    allreduce.sort(key=lambda c: c["ts"])
    out["allreduce_calls"] = allreduce
    starts = sorted(steps)
    in_step = 0
    for c in allreduce:
        i = bisect.bisect_right(starts, (c["ts"], float("inf"))) - 1
        if i >= 0 and starts[i][0] <= c["ts"] < starts[i][1]:
            in_step += 1
    out["allreduce_calls_in_steps"] = in_step
    return out


def reference_collectives(ranks: list[dict]) -> dict:
    calls = [r.get("allreduce_calls", []) for r in ranks]
    n_ranks = len(ranks)
    if n_ranks == 0 or not all(calls):
        return {"groups": []}
    matched = min(len(c) for c in calls)
    groups: dict[str, dict] = {}
    for k in range(matched):
        per_rank = [c[k] for c in calls]
        first = per_rank[0]
        g = groups.setdefault(first["pg"], {"process_group": first["pg"], "calls": 0,
                                            "transfer_us_sum": 0.0, "bytes_sum": 0.0,
                                            "n": int(first["group_size"] or n_ranks),
                                            "message_bytes": set()})
        transfer = min(c["dur"] for c in per_rank)
        nbytes = (first["nelems"] or 0) * DTYPE_BYTES.get(first["dtype"], 2)
        g["calls"] += 1
        g["transfer_us_sum"] += transfer
        g["bytes_sum"] += nbytes
        g["message_bytes"].add(nbytes)
    steps = [r["decode_steps"] for r in ranks]
    calls_per_step = [r["allreduce_calls_in_steps"] / r["decode_steps"]
                      for r in ranks if r["decode_steps"]]
    out = []
    for g in groups.values():
        n = g["n"]
        mean_us = g["transfer_us_sum"] / g["calls"]
        busbw = (g["bytes_sum"] / (g["transfer_us_sum"] * 1e-6) * 2 * (n - 1) / n / 1e9
                 if g["transfer_us_sum"] > 0 else None)
        cps = sum(calls_per_step) / len(calls_per_step) if calls_per_step else None
        out.append({"process_group": g["process_group"], "calls_matched": g["calls"],
                    "calls_per_rank": [len(c) for c in calls], "group_size": n,
                    "message_bytes": sorted(g["message_bytes"]),
                    "transfer_us_mean": mean_us, "busbw_gbps": busbw,
                    "calls_per_decode_step": cps,
                    "calls_per_decode_step_by_rank": calls_per_step,
                    "decode_steps_by_rank": steps,
                    "transfer_ms_per_decode_step": mean_us * cps / 1000 if cps is not None else None})
    return {"groups": out}


# ---------------------------------------------------------------------------- the tools

def run_hta(files: list[str], rounding: bool) -> dict:
    env = dict(os.environ)
    env.pop("HTA_DISABLE_NS_ROUNDING", None)
    if not rounding:
        env["HTA_DISABLE_NS_ROUNDING"] = "1"
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        out = tmp.name
    try:
        t0 = time.perf_counter()
        proc = subprocess.run([str(BENCH_PY), "-c", HTA_CHILD, json.dumps(files), out],
                              cwd=REPO, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            return {"error": f"HTA failed ({proc.returncode}): {proc.stderr[-2000:]}"}
        res = json.loads(Path(out).read_text())
        res["wall_s"] = round(wall, 2)
        return res
    finally:
        os.unlink(out)


def run_summarizer(trace_dir: Path) -> dict:
    cmd = [str(SUMMARY), "--decode-pattern", DECODE_PATTERN, str(trace_dir)]
    try:
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    except OSError as exc:
        return {"error": str(exc)}
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: {proc.stderr[-1000:]}"}
    try:
        doc = json.loads(proc.stdout)
    except ValueError as exc:
        return {"error": f"not JSON: {exc}"}
    return {"wall_s": round(wall, 2), "output": doc}


def dig(doc, *keys):
    """doc[k0][k1]... or None where any step is missing."""
    for k in keys:
        if (isinstance(doc, dict) and k in doc) or (
                isinstance(doc, list) and isinstance(k, int) and -len(doc) <= k < len(doc)):
            doc = doc[k]
        else:
            return None
    return doc if isinstance(doc, (int, float)) and not isinstance(doc, bool) else None


# ---------------------------------------------------------------------------- the table

def _hta_rank_figures(hta: dict, path: str) -> dict | None:
    f = (hta.get("files") or {}).get(path)
    if not f or not f["temporal_breakdown"]:
        return None
    tb = f["temporal_breakdown"][0]
    span, idle = tb["kernel_time(us)"], tb["idle_time(us)"]
    streams: dict[str, dict] = defaultdict(dict)
    for row in f["idle_time_breakdown"]:
        streams[str(row["stream"])][row["idle_category"]] = row["idle_time_us"]
    return {"span_us": span, "busy_us": span - idle, "idle_us": idle, "streams": streams,
            "compute_us": tb["compute_time(us)"], "non_compute_us": tb["non_compute_time(us)"],
            "kernel_type_us": f["gpu_kernel_breakdown_us"]}


def build_rows(ref_ranks, ref_coll, hta_r, hta_nr, summ) -> list[dict]:
    rows = []
    sdoc = summ.get("output")
    s_ranks = {}
    if isinstance(sdoc, dict):
        for i, r in enumerate(sdoc.get("ranks") or []):
            if isinstance(r, dict):
                s_ranks[r.get("rank", i)] = r

    def row(figure, rank, ref, hta=None, hta_nr=None, summ_val=None, summ_applies=True,
            hta_applies=True, tracelens=None, note=""):
        rows.append({"figure": figure, "rank": rank, "reference": ref,
                     "hta": hta if hta_applies else "n/a",
                     "hta_no_ns_rounding": hta_nr if hta_applies else "n/a",
                     "summarizer": summ_val if summ_applies else "n/a",
                     "tracelens_quoted": tracelens, "note": note})

    ms = lambda v: None if v is None else v / 1000  # noqa: E731
    for r in ref_ranks:
        rank, path, tl = r["rank"], r["file"], r["timeline"]
        if tl is None:
            continue
        h, hn = _hta_rank_figures(hta_r, path), _hta_rank_figures(hta_nr, path)
        sr = s_ranks.get(rank)
        for key, label, note in (
                ("span", "GPU span, first start to last end (ms)", "HTA: temporal kernel_time"),
                ("busy", "GPU busy, union of activities (ms)", "HTA: kernel_time - idle_time"),
                ("idle", "GPU idle, span - busy (ms)", "HTA: temporal idle_time, streams merged")):
            row(label, rank, ms(tl[f"{key}_us"]),
                ms(h[f"{key}_us"]) if h else None, ms(hn[f"{key}_us"]) if hn else None,
                dig(sr, "timeline", f"{key}_ms"), note=note)
        comp = r["kernel_type_union_us"].get("COMPUTATION", 0.0)
        row("compute time, union of COMPUTATION kernels (ms)", rank, ms(comp),
            ms(h["compute_us"]) if h else None, ms(hn["compute_us"]) if hn else None,
            summ_applies=False, note="HTA: temporal compute_time")
        row("non-compute time, busy - compute (ms)", rank, ms(tl["busy_us"] - comp),
            ms(h["non_compute_us"]) if h else None, ms(hn["non_compute_us"]) if hn else None,
            summ_applies=False, note="HTA: temporal non_compute_time")
        for s, st in r["streams"].items():
            hs = (h or {}).get("streams", {}).get(s) if h else None
            hns = (hn or {}).get("streams", {}).get(s) if hn else None
            tot = lambda d: None if d is None else sum(v for v in d.values() if v is not None)  # noqa: E731
            row(f"idle on stream {s}, span - busy (ms)", rank, ms(st["idle_us"]), ms(tot(hs)),
                ms(tot(hns)), summ_applies=False,
                note="HTA: sum of get_idle_time_breakdown on this stream (gaps to the previous "
                     "kernel's end: overlaps on the stream count negative)")
            for cat in ("host_wait", "kernel_wait", "other"):
                row(f"stream {s}: {cat} (ms)", rank, ms(st[cat]),
                    ms((hs or {}).get(cat)) if hs else None, ms((hns or {}).get(cat)) if hns else None,
                    summ_applies=False, note="reference: HTA's rule re-implemented, unrounded")
        for kt, v in r["kernel_type_union_us"].items():
            row(f"HTA kernel type {kt}, union (ms)", rank, ms(v),
                ms((h or {}).get("kernel_type_us", {}).get(kt)) if h else None,
                ms((hn or {}).get("kernel_type_us", {}).get(kt)) if hn else None,
                summ_applies=False,
                note="HTA: get_gpu_kernel_breakdown; overlap split off, pieces truncated to int")
        row("decode steps", rank, r["decode_steps"], summ_val=dig(sr, "decode_steps"),
            hta_applies=False, note="HTA needs ProfilerStep#N for iterations")
        if r["allreduce_calls"]:
            row("all-reduce calls per decode step", rank,
                r["allreduce_calls_in_steps"] / r["decode_steps"] if r["decode_steps"] else None,
                summ_val=dig(sr, "allreduce_calls_per_step"), hta_applies=False)
    s_groups = (sdoc or {}).get("collectives", {}).get("groups") if isinstance(sdoc, dict) and \
        isinstance(sdoc.get("collectives"), dict) else None
    for j, g in enumerate(ref_coll["groups"]):
        sg = None
        if isinstance(s_groups, list):
            for cand in s_groups:  # match on the process group where the summarizer names it
                if isinstance(cand, dict) and g["process_group"] in {
                        str(cand.get(k)) for k in ("process_group", "pg", "pg_name", "name", "group")}:
                    sg = cand
                    break
            if sg is None and j < len(s_groups):
                sg = s_groups[j]
        label = f"all-reduce, process group {g['process_group']!r}"
        # The reference covers every decode step; the summarizer's group figures cover its steady
        # steps, so the comparable all-step figures are derived from its all-step total.
        total, calls = dig(sg, "transfer_us_total_all_steps"), dig(sg, "calls_all_steps")
        size, nbytes = dig(sg, "size"), dig(sg, "message_bytes", "median")
        s_mean = total / calls if isinstance(total, (int, float)) and isinstance(calls, int) and calls else "missing"
        s_busbw = (nbytes * calls / (total * 1e-6) * 2 * (size - 1) / size / 1e9
                   if s_mean != "missing" and isinstance(nbytes, (int, float)) and isinstance(size, int) and size > 1
                   else "missing")
        row(f"{label}: transfer per call, min over ranks, every step (µs)", "all", g["transfer_us_mean"],
            summ_val=s_mean, hta_applies=False,
            note="HTA has no cross-rank figure; summarizer: transfer_us_total_all_steps / calls_all_steps")
        row(f"{label}: bus bandwidth, every step (GB/s)", "all", g["busbw_gbps"],
            summ_val=s_busbw, hta_applies=False,
            note=f"{g['message_bytes']} B per call, n={g['group_size']}; bytes over the total transfer time")
        row(f"{label}: transfer per decode step (ms)", "all", g["transfer_ms_per_decode_step"],
            summ_val=dig(sdoc, "allreduce", "ms_per_step_skew_corrected"),
            tracelens=TRACELENS_ALLREDUCE_MS_PER_STEP, hta_applies=False,
            note="summarizer: allreduce.ms_per_step_skew_corrected; TraceLens: min-over-ranks "
                 "latency quoted from ../shared/notes/traces.md, not run here")
    for r in rows:
        for tool in ("hta", "hta_no_ns_rounding", "summarizer", "tracelens_quoted"):
            v, ref = r[tool], r["reference"]
            r[f"{tool}_rel_diff"] = r[f"{tool}_within_1pct"] = None
            if isinstance(v, (int, float)) and isinstance(ref, (int, float)):
                if ref != 0:
                    r[f"{tool}_rel_diff"] = (v - ref) / ref
                r[f"{tool}_within_1pct"] = abs(v - ref) <= 0.01 * abs(ref) if ref else abs(v) < 1e-9
    return rows


def _fmt(v) -> str:
    if v is None:
        return "missing"
    if isinstance(v, str):
        return v
    if isinstance(v, int):
        return str(v)
    return f"{v:.4g}" if abs(v) < 1000 else f"{v:.1f}"


def _diff(r, tool) -> str:
    v = r[tool]
    if not isinstance(v, (int, float)):
        return ""
    rel, ok = r[f"{tool}_rel_diff"], r[f"{tool}_within_1pct"]
    return ("0 vs 0" if rel is None else f"{rel:+.2%}") + (" yes" if ok else " no")


def render(rows: list[dict]) -> str:
    out = ["| figure | rank | reference | HTA | HTA vs ref, within 1% | HTA, ns rounding off | "
           "vs ref | summarizer | vs ref | TraceLens (quoted) | vs ref | note |",
           "| --- | --- | ---: | ---: | --- | ---: | --- | ---: | --- | ---: | --- | --- |"]
    for r in rows:
        tl = _fmt(r["tracelens_quoted"]) if r["tracelens_quoted"] is not None else ""
        out.append(f"| {r['figure']} | {r['rank']} | {_fmt(r['reference'])} | {_fmt(r['hta'])} | "
                   f"{_diff(r, 'hta')} | {_fmt(r['hta_no_ns_rounding'])} | "
                   f"{_diff(r, 'hta_no_ns_rounding')} | {_fmt(r['summarizer'])} | "
                   f"{_diff(r, 'summarizer')} | {tl} | {_diff(r, 'tracelens_quoted')} | "
                   f"{r['note']} |")
    return "\n".join(out)


NOTES = """\
Definitions that differ:
- HTA rounds every GPU activity inward to whole µs (ts up, end down) before anything else:
  busy shrinks and idle grows by up to 2 µs per activity, sub-µs memsets get dur 0 or -1.
  The "ns rounding off" column is HTA with HTA_DISABLE_NS_ROUNDING=1.
- HTA's idle breakdown (host_wait / kernel_wait / other) is per stream; the sum over a rank's
  streams is not the rank's idle time when streams overlap. Each gap is charged to the kernel
  after it. kernel_wait = gap < 30 µs (the default consecutive_kernel_delay, documented as ns,
  applied to µs).
- On one stream, kernels can overlap: a cuBLASLt splitKreduce starts ~0.25 µs before its GEMM
  ends (programmatic dependent launch, 732 times per H200 rank). Busy/idle take the union;
  HTA's per-stream gaps then come out negative and are added to kernel_wait.
- HTA's kernel types come from names only: vLLM's custom and symmetric-memory all-reduce count
  as COMPUTATION. Its per-type figures split off time where types overlap, and truncate each
  piece to int µs.
- HTA has no cross-rank collective figure: per-rank communication time includes the time an
  early rank waits for the last one. The reference and the summarizer take, for the k-th call,
  the least duration over ranks; TraceLens' min-over-ranks latency is quoted, not run.
- A summarizer cell "missing" is a key the summarizer's output lacks (it is being rewritten);
  "n/a" is a figure it does not claim to give."""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = REPO / "tests" / "data" / "traces" / "h200_tp2_decode"
    if not default.is_dir():
        default = REPO.parent / "shared" / "traces" / "h200_tp2_decode"
    p.add_argument("trace_dir", nargs="?", type=Path, default=default)
    p.add_argument("--out-dir", type=Path, default=REPO / ".cache" / "bench")
    p.add_argument("--skip-hta", action="store_true", help="no HTA columns (all 'missing')")
    p.add_argument("--summary-json", type=Path,
                   help="read a saved `vllm-trace-summary` JSON output instead of running it")
    args = p.parse_args(argv)
    files = sorted(str(f) for f in args.trace_dir.iterdir()
                   if f.name.endswith((".json.gz", ".json")))
    if not files:
        raise SystemExit(f"no *.json.gz / *.json traces in {args.trace_dir}")
    print(f"{len(files)} traces in {args.trace_dir}", file=sys.stderr)

    ref_ranks = [reference_rank(f, i) for i, f in enumerate(files)]
    ref_coll = reference_collectives(ref_ranks)
    if args.skip_hta:
        hta_r = hta_nr = {"error": "skipped (--skip-hta)"}
    else:
        if not BENCH_PY.exists():
            raise SystemExit(f"{BENCH_PY} missing: run bench/setup_venv.sh (or pass --skip-hta)")
        hta_r, hta_nr = run_hta(files, rounding=True), run_hta(files, rounding=False)
    for err in dict.fromkeys(h["error"] for h in (hta_r, hta_nr) if "error" in h):
        print(f"HTA: {err}", file=sys.stderr)
    if args.summary_json:
        summ = {"from_file": str(args.summary_json),
                "output": json.loads(args.summary_json.read_text())}
    else:
        summ = run_summarizer(args.trace_dir)
    if "error" in summ:
        print(f"summarizer: {summ['error']} (its cells read 'missing')", file=sys.stderr)

    rows = build_rows(ref_ranks, ref_coll, hta_r, hta_nr, summ)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "hta_compare.json").write_text(json.dumps(
        {"trace_dir": str(args.trace_dir), "default": hta_r,
         "HTA_DISABLE_NS_ROUNDING=1": hta_nr}, indent=2))
    for r in ref_ranks:
        r.pop("allreduce_calls", None)  # per-call lists: not worth keeping
    (args.out_dir / "compare.json").write_text(json.dumps(
        {"trace_dir": str(args.trace_dir), "files": files, "rows": rows,
         "reference": {"ranks": ref_ranks, "collectives": ref_coll},
         "summarizer": {k: v for k, v in summ.items() if k != "output"},
         "hta_wall_s": {"default": hta_r.get("wall_s"),
                        "HTA_DISABLE_NS_ROUNDING=1": hta_nr.get("wall_s")},
         "notes": NOTES}, indent=2))
    print(render(rows))
    print()
    print(NOTES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
