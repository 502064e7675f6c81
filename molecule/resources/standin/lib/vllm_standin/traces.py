"""The traces a worker writes on /stop_profile: re-timed copies of real Kineto traces (the
templates), or a small synthetic one; the profiler's self-CUDA-time table; the API server's
own (frontend) trace.

``retime_template(trace, rank, world, start_ns, origin_ns, detailed=False)`` is read by the
trace analysis too: keep its name and signature."""

import gzip
import json
import os
import re
import socket
import time

from vllm_standin import VERSION
from vllm_standin.logs import OUT_LOCK, log

DECODE_ANNOTATION = "execute_context_0(0)_generation_1(1)"
# With detailed_trace_annotation (vLLM 0.26+): T scheduled tokens, then per group the sums of
# query and key lengths; one decode request whose context grows by a token a step.
DETAILED_DECODE = "execute_1_context_0(sq0sk0sqsq0sqsk0)_generation_1(sq1sk{k}sqsq1sqsk{k})"
DETAILED_CONTEXT = 128


def template_files():
    tdir = os.environ.get("VLLM_STANDIN_TRACE_TEMPLATES", "/opt/vllm-standin/traces")
    try:
        names = os.listdir(tdir)
    except OSError:
        return []
    ranked = []
    for name in names:
        match = re.search(r"rank(\d+)", name)
        if match and name.endswith(".json.gz"):
            ranked.append((int(match.group(1)), os.path.join(tdir, name)))
    return [path for _, path in sorted(ranked)]


def load_json_gz(path):
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def min_ts(trace):
    """Earliest absolute time of a trace, in ns."""
    stamps = [ev["ts"] for ev in trace.get("traceEvents", [])
              if isinstance(ev.get("ts"), (int, float))]
    return trace.get("baseTimeNanoseconds", 0) + int(min(stamps, default=0) * 1000)


def retime_template(trace, rank, world, start_ns, origin_ns, detailed=False):
    """Shift a template so that ``origin_ns`` (the earliest time over all
    templates, kept so ranks stay aligned) lands on ``start_ns``; rename the
    decode-step annotations as vLLM names them (in the detailed form with
    ``detailed``: the k-th step of the CPU annotations, and its GPU twin by
    External id, gets key length DETAILED_CONTEXT + k); stamp this rank."""
    base_old = trace.get("baseTimeNanoseconds", 0)
    base_new = start_ns // 10**9 * 10**9
    shift_us = (base_old - base_new + start_ns - origin_ns) / 1000.0
    info = trace.setdefault("distributedInfo", {})
    t_rank = info.get("rank", rank)
    t_pid = next((ev.get("pid") for ev in trace.get("traceEvents", [])
                  if ev.get("cat") == "user_annotation"), None)
    cpu_steps = sorted((ev["ts"], (ev.get("args") or {}).get("External id"))
                       for ev in trace.get("traceEvents", [])
                       if ev.get("cat") == "user_annotation" and ev.get("name") == "decode_step")
    step_of = {ext: k for k, (_, ext) in enumerate(cpu_steps)}
    for ev in trace.get("traceEvents", []):
        if isinstance(ev.get("ts"), (int, float)):
            ev["ts"] = round(ev["ts"] + shift_us, 3)
        if ev.get("cat") in ("user_annotation", "gpu_user_annotation") \
                and ev.get("name") == "decode_step":
            k = step_of.get((ev.get("args") or {}).get("External id"))
            ev["name"] = DETAILED_DECODE.format(k=DETAILED_CONTEXT + k) \
                if detailed and k is not None else DECODE_ANNOTATION
        if t_pid is not None and ev.get("pid") == t_pid:
            ev["pid"] = os.getpid()
            if ev.get("tid") == t_pid:
                ev["tid"] = os.getpid()
        args = ev.get("args")
        if isinstance(args, dict) and args.get("device") == t_rank:
            args["device"] = rank
            if ev.get("pid") == t_rank:
                ev["pid"] = rank
        elif ev.get("ph") == "M" and ev.get("pid") == t_rank and isinstance(args, dict) \
                and args.get("labels") == f"GPU {t_rank}":
            ev["pid"], args["labels"] = rank, f"GPU {rank}"
    trace["baseTimeNanoseconds"] = base_new
    info.update(rank=rank, world_size=world)
    for group in info.get("pg_config", []) or []:
        group.update(pg_size=world, ranks=list(range(world)))
    return trace


def synthetic_trace(rank, world, start_ns, title, steps=4):
    """Schema-valid Kineto-like trace: decode steps with a gemm and an
    NCCL all-reduce kernel each."""
    pid = os.getpid()
    base = start_ns // 10**9 * 10**9
    t = (start_ns - base) / 1000.0
    events = [
        {"name": "process_name", "ph": "M", "ts": t, "pid": pid, "tid": 0,
         "args": {"name": title}},
        {"name": "process_labels", "ph": "M", "ts": t, "pid": rank, "tid": 0,
         "args": {"labels": f"GPU {rank}"}},
    ]
    kernels = [("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNT", 52.0),
               ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                18.0 + 9.0 * rank)]
    corr = 1
    for step in range(steps):
        t0 = t + step * 400.0
        events.append({"ph": "X", "cat": "user_annotation", "name": DECODE_ANNOTATION,
                       "pid": pid, "tid": pid, "ts": t0, "dur": 300.0,
                       "args": {"External id": corr}})
        events.append({"ph": "X", "cat": "gpu_user_annotation", "name": DECODE_ANNOTATION,
                       "pid": rank, "tid": 7, "ts": t0 + 20.0, "dur": 120.0,
                       "args": {"External id": corr, "device": rank}})
        k_ts = t0 + 25.0
        for name, dur in kernels:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                           "pid": pid, "tid": pid, "ts": k_ts - 10.0, "dur": 4.0,
                           "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": rank,
                           "tid": 7, "ts": k_ts, "dur": dur,
                           "args": {"device": rank, "stream": 7, "correlation": corr}})
            k_ts += dur + 2.0
            corr += 1
    return {"schemaVersion": 1,
            "deviceProperties": [{"id": rank, "name": "NVIDIA H200",
                                  "totalGlobalMem": 150109880320}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
            "displayTimeUnit": "ms", "baseTimeNanoseconds": base,
            "traceEvents": events, "traceName": ""}


def model_trace(rank, world, start_ns, title, compute_ms, allreduce_ms, steps=12, calls=4):
    """The trace of the stand-in's own decode model (``nccl.py``), written instead of a template
    when the all-reduce knob is set: ``steps`` decode steps of ``compute_ms`` of GEMM then
    ``allreduce_ms`` of NCCL all-reduce in ``calls`` kernels (Kimi-K2.5's 7168 bf16 elements each,
    the same on every rank: a transfer with no waiting), back to back on the GPU, each launched
    by a host that then waits for it in ``cudaStreamSynchronize``, as a sampler does. The GPU's own
    work bounds every step, and the all-reduce's share is ``allreduce_ms / (compute_ms +
    allreduce_ms)``: communication-bound when it is large."""
    pid = os.getpid()
    base = start_ns // 10**9 * 10**9
    t = (start_ns - base) / 1000.0
    compute_us, ar_us = compute_ms * 1000.0, allreduce_ms * 1000.0
    period = compute_us + ar_us + 40.0
    events = [
        {"name": "process_name", "ph": "M", "ts": t, "pid": pid, "tid": 0, "args": {"name": title}},
        {"name": "process_labels", "ph": "M", "ts": t, "pid": rank, "tid": 0,
         "args": {"labels": f"GPU {rank}"}},
    ]
    corr = 1
    for step in range(steps):
        t0 = t + step * period
        ext = 10_000 + step
        events.append({"ph": "X", "cat": "user_annotation", "name": DECODE_ANNOTATION, "pid": pid,
                       "tid": pid, "ts": t0, "dur": period - 10.0, "args": {"External id": ext}})
        g0 = t0 + 15.0
        events.append({"ph": "X", "cat": "gpu_user_annotation", "name": DECODE_ANNOTATION, "pid": rank,
                       "tid": 7, "ts": g0, "dur": compute_us + ar_us, "args": {"External id": ext,
                                                                             "device": rank}})
        kernels = [("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNT", compute_us, {})]
        kernels += [("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", ar_us / calls,
                     {"Collective name": "allreduce", "In msg nelems": 7168, "Out msg nelems": 7168,
                      "dtype": "BFloat16", "Process Group Name": "0", "Group size": world})] * calls
        k_ts, launch_ts = g0, t0 + 2.0
        for name, dur, extra in kernels:
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid,
                           "tid": pid, "ts": launch_ts, "dur": 2.0, "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": rank, "tid": 7, "ts": k_ts,
                           "dur": dur, "args": {"device": rank, "stream": 7, "correlation": corr, **extra}})
            launch_ts += 2.5
            k_ts += dur
            corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": pid,
                       "tid": pid, "ts": launch_ts, "dur": g0 + compute_us + ar_us - launch_ts,
                       "args": {"correlation": corr}})
        corr += 1
    return {"schemaVersion": 1,
            "deviceProperties": [{"id": rank, "name": "NVIDIA H200", "totalGlobalMem": 150109880320}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world,
                                "pg_config": [{"pg_name": "0", "pg_size": world, "ranks": list(range(world))}]},
            "displayTimeUnit": "ms", "baseTimeNanoseconds": base, "traceEvents": events, "traceName": ""}


def cuda_time_table(trace):
    """A torch key_averages()-style table sorted by self CUDA time."""
    totals = {}
    for ev in trace.get("traceEvents", []):
        if ev.get("cat") == "kernel":
            dur, calls = totals.get(ev["name"], (0.0, 0))
            totals[ev["name"]] = (dur + float(ev.get("dur", 0)), calls + 1)
    grand = sum(d for d, _ in totals.values()) or 1.0
    rule = "-" * 57 + "  " + "  ".join(["-" * 12] * 4)
    rows = [rule, f"{'Name':>57}  {'Self CUDA':>12}  {'Self CUDA %':>12}  "
            f"{'CUDA total':>12}  {'# of Calls':>12}", rule]
    for name, (dur, calls) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:100]:
        short = name if len(name) <= 57 else name[:54] + "..."
        rows.append(f"{short:>57}  {dur / 1000:>10.3f}ms  {100 * dur / grand:>11.2f}%  "
                    f"{dur / 1000:>10.3f}ms  {calls:>12}")
    cpu = sum(float(ev.get("dur", 0)) for ev in trace.get("traceEvents", [])
              if ev.get("cat") in ("cpu_op", "cuda_runtime"))
    rows += [rule, f"Self CPU time total: {cpu / 1000:.3f}ms",
             f"Self CUDA time total: {grand / 1000:.3f}ms"]
    return "\n".join(rows) + "\n"


def write_profiler_table(trace_dir, worker, table, print_it):
    """``<worker>.profiler_out.txt`` next to the trace; local rank 0 also
    print()s it (to stdout, so with no process prefix)."""
    with open(os.path.join(trace_dir, f"{worker}.profiler_out.txt"), "w",
              encoding="utf-8") as fh:
        print(table, file=fh)
    if print_it:
        with OUT_LOCK:
            print(table, flush=True)


def write_trace_file(path, trace, gz, truncate):
    data = json.dumps(trace).encode()
    if gz:
        data = gzip.compress(data, compresslevel=6)
    if truncate:
        data = data[: max(1, len(data) // 2)]
    with open(path, "wb") as fh:
        fh.write(data)


def write_frontend_trace(pcfg, started_ns, prefix=None):
    """The API server's own (CPU) trace, unless ignore_frontend is set; its
    profiler is a torch one on local rank 0, so it writes and prints a table too."""
    if pcfg["profiler"] != "torch" or pcfg["ignore_frontend"]:
        return
    trace_dir = pcfg["torch_profiler_dir"]
    start = started_ns or time.time_ns()
    base = start // 10**9 * 10**9
    t0 = (start - base) / 1000.0
    pid = os.getpid()
    events = [{"name": "process_name", "ph": "M", "ts": t0, "pid": pid, "tid": 0,
               "args": {"name": "python3"}}]
    for i, name in enumerate(("AsyncLLM.generate", "OutputProcessor.process_outputs",
                              "Detokenizer.update")):
        events.append({"ph": "X", "cat": "python_function", "name": name, "pid": pid,
                       "tid": pid, "ts": t0 + 50.0 * i, "dur": 40.0, "args": {}})
    name = f"{socket.gethostname()}_{pid}.async_llm"
    if prefix:
        name = f"{prefix}_{name}"
    path = os.path.join(trace_dir, f"{name}.{time.time_ns()}.pt.trace.json" +
                        (".gz" if pcfg["torch_profiler_use_gzip"] else ""))
    trace = {"schemaVersion": 1, "baseTimeNanoseconds": base, "traceEvents": events,
             "traceName": path, "vllm_version": VERSION,
             "vllm_version_tuple": VERSION.split(".")}
    try:
        os.makedirs(trace_dir, exist_ok=True)
        write_trace_file(path, trace, pcfg["torch_profiler_use_gzip"], False)
        if pcfg["torch_profiler_dump_cuda_time_total"]:
            write_profiler_table(trace_dir, name, cuda_time_table(trace), print_it=True)
    except OSError as exc:
        log("WARNING", "wrapper.py:101", f"Failed to stop profiler: {exc}")
