"""All-reduce latency on this host's GPUs at the message sizes decode uses: the floor that a
trace's all-reduce transfer time is read against.

Runs one process per rank (``torch.multiprocessing``), with the PyTorch and NCCL of the Python
that runs it (the vLLM venv's, so the NCCL the service loads) and the environment it is given
(the unit's EnvironmentFile: the ``NCCL_*`` settings the service runs with). For each message
size it runs ``--warmup`` untimed all-reduces, then ``--reps`` loops of ``--iters`` calls back
to back, timed as nccl-tests times them (CUDA events around the loop with NCCL, the wall clock
with gloo, divided by the calls). With NCCL the loop is also captured once in a CUDA graph and
replayed, as vLLM's decode runs its all-reduces: then no host launch cost is in the figure,
which is the collective's own time, comparable to the kernel durations of a trace; the loop
launched call by call is kept as ``eager_median_us`` (where the host cannot launch as fast as
the GPU runs, it measures the host). It reports per size the median, p90, mean and min over the loops of the time per
call on rank 0, the median of every rank, and the bandwidths as nccl-tests computes them for
all-reduce at the median: ``algbw = bytes / time`` and ``busbw = algbw * 2 (n - 1) / n``
(GB/s = 1e9 bytes per second).

The GPU's memory bandwidth, for the decode ledger's weight floor (``device_copy`` in the JSON):
with NCCL, each rank's GPU also copies a ``--copy-mib`` buffer (default 1 GiB, far above any L2;
0 skips it) to another of the same size, device to device (``torch`` ``copy_``), ``--reps``
loops of :data:`COPIES` copies timed with CUDA events, at the same time on every rank after the
all-reduces. ``hbm_gbps`` = (bytes read + bytes written) / the median time of one copy, that is
``2 * bytes / time`` (1e9 bytes per second), on rank 0, and ``hbm_gbps_by_rank``; None with gloo,
``{bytes, error}`` where a rank could not copy (its GPU memory was short), which fails nothing.

Message sizes: those decode uses, ``hidden_size * batch size * element size`` for each
``--batch-sizes`` entry, from the model's ``config.json`` (``hidden_size`` and ``torch_dtype``
at its top level or under ``text_config``), plus a ladder of powers of two (``--ladder``).

Exit status: 0 with the JSON written (``--out``); 2 on bad input (no torch, a world size above
the GPUs present, an unreadable model config), 3 when the measurement failed (an NCCL error, a
rank that died, the ``--timeout-s`` budget spent); one line on stderr says which and what to do.
Python 3.9+ standard library and PyTorch only: it runs on the managed host.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import sys
import tempfile
import time
import traceback

PROG = "allreduce_bench"
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
DEFAULT_LADDER = [1 << k for k in range(10, 27, 2)]  # 1 KiB .. 64 MiB
COPIES = 10  # device-to-device copies per timed loop


class Usage(Exception):
    """Bad input: exit status 2."""


class Failed(Exception):
    """The measurement failed: exit status 3."""


def model_sizes(config_path: str | None, batch_sizes: list[int], dtype: str | None):
    """(hidden_size, dtype, [(batch size, bytes)]) from a model's config.json."""
    if not config_path:
        return None, dtype or "bfloat16", []
    try:
        with open(config_path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError) as exc:
        raise Usage(f"cannot read the model config {config_path}: {exc}") from None
    if not isinstance(config, dict):
        raise Usage(f"{config_path}: not a JSON object")
    layers = [config] + [config[k] for k in ("text_config", "language_config") if isinstance(config.get(k), dict)]
    hidden = next((c["hidden_size"] for c in layers if isinstance(c.get("hidden_size"), int)), None)
    if not hidden or hidden < 1:
        raise Usage(f"{config_path}: no positive integer hidden_size (top level or text_config)")
    found = next((c.get("torch_dtype") or c.get("dtype") for c in layers
                  if isinstance(c.get("torch_dtype") or c.get("dtype"), str)), None)
    dtype = dtype or found or "bfloat16"
    if dtype not in DTYPE_BYTES:
        raise Usage(f"dtype {dtype!r} is not one of {', '.join(sorted(DTYPE_BYTES))}")
    return hidden, dtype, [(b, hidden * b * DTYPE_BYTES[dtype]) for b in batch_sizes]


def bandwidths(nbytes: int, seconds: float, world: int) -> tuple[float | None, float | None]:
    """nccl-tests' all-reduce algbw and busbw, GB/s."""
    if seconds <= 0:
        return None, None
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * 2 * (world - 1) / world if world > 1 else algbw * 0.0


def copy_bandwidth(nbytes: int, seconds: float) -> float | None:
    """GB/s of a device-to-device copy of ``nbytes``: the bytes read plus the bytes written."""
    return 2 * nbytes / seconds / 1e9 if seconds > 0 else None


def copy_report(copy: dict | None, nbytes: int, reps: int) -> dict | None:
    """The JSON's ``device_copy`` from the ranks' copy timings (rank 0's loops, every rank's median)."""
    if copy is None:
        return None
    errors = [e for e in copy["errors"] if e]
    if errors:
        return {"bytes": nbytes, "error": errors[0]}
    times, medians = copy["times_us"], copy["medians_us"]
    median = statistics.median(times)
    gbps = copy_bandwidth(nbytes, median * 1e-6)
    return {"bytes": nbytes, "copies": COPIES, "reps": reps, "median_us": round(median, 3),
            "p90_us": round(percentile(times, 90), 3), "min_us": round(min(times), 3),
            "hbm_gbps": None if gbps is None else round(gbps, 1),
            "hbm_gbps_by_rank": [round(copy_bandwidth(nbytes, m * 1e-6) or 0.0, 1) for m in medians],
            "timing": f"CUDA events around {COPIES} copies of {nbytes} bytes device to device (torch copy_), "
                      f"{reps} loops; GB/s = (bytes read + bytes written) / the median time of one copy"}


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile, linear between the closest ranks (numpy's default)."""
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _loops(dist, x, device, iters, reps, graph):
    """µs per call of ``reps`` timed loops of ``iters`` all-reduces: launched one by one
    (eager), or captured once in a CUDA graph and replayed (graph: no host cost per call, as
    vLLM's decode runs them)."""
    import torch

    times = []
    if device is None:
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            times.append((time.perf_counter() - t0) * 1e6 / iters)
        return times
    replay = None
    if graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                dist.all_reduce(x)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(iters):
                dist.all_reduce(x)
        replay = g.replay
        replay()
        torch.cuda.synchronize()
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        if replay is not None:
            replay()
        else:
            for _ in range(iters):
                dist.all_reduce(x)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / iters)  # ms -> µs
    return times


def _copy_times(device, nbytes, reps):
    """µs per device-to-device copy of ``nbytes`` on this rank's GPU, one figure per timed loop."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(COPIES):
            dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / COPIES)  # ms -> µs
    del src, dst
    torch.cuda.empty_cache()
    return times


def _worker(rank, world, backend, port, sizes, dtype, warmup, iters, reps, graphs, timeout_s, result_path,
            copy_bytes=0):
    import datetime

    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    device = None
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout_s),
                            **({"device_id": device} if device is not None else {}))
    tdtype = {"bfloat16": torch.bfloat16, "float16": torch.float16, "half": torch.float16,
              "float32": torch.float32, "float": torch.float32}[dtype]
    per_size = []
    for nbytes in sizes:
        n = max(1, nbytes // DTYPE_BYTES[dtype])
        x = torch.ones(n, dtype=tdtype, device=device or "cpu")
        for _ in range(warmup):
            dist.all_reduce(x)
        if device is not None:
            torch.cuda.synchronize()
        dist.barrier()
        times = _loops(dist, x, device, iters, reps, graph=False)  # µs per call, one figure per loop
        graph_times = None
        if device is not None and graphs:
            graph_times = _loops(dist, x, device, iters, reps, graph=True)
        # every rank's median, for the ranks' spread
        medians = [None] * world
        dist.all_gather_object(medians, statistics.median(graph_times or times))
        per_size.append({"times_us": graph_times or times, "eager_times_us": times if graph_times else None,
                         "medians_us": medians, "elements": n})
        del x
    copy = None
    if device is not None and copy_bytes > 0:
        times, error = None, None
        try:
            times = _copy_times(device, copy_bytes, reps)
        except RuntimeError as exc:  # out of memory: say so, the all-reduce floor stands
            error = f"rank {rank}: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
        gathered = [None] * world
        dist.all_gather_object(gathered, (statistics.median(times) if times else None, error))
        copy = {"times_us": times, "medians_us": [m for m, _ in gathered], "errors": [e for _, e in gathered]}
    if rank == 0:
        with open(result_path, "w", encoding="utf-8") as fh:
            json.dump({"sizes": per_size, "copy": copy}, fh)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(world, backend, sizes, dtype, warmup, iters, reps, graphs, timeout_s, copy_bytes=0):
    """Run the ranks; return rank 0's ``{sizes: per-size timings, copy: the copy's or None}``. Raises Failed."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="allreduce-bench-") as tmp:
        result = os.path.join(tmp, "rank0.json")
        ctx = mp.start_processes(_worker, args=(world, backend, _free_port(), sizes, dtype, warmup, iters, reps,
                                                graphs, timeout_s, result, copy_bytes),
                                 nprocs=world, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout_s
        try:
            while not ctx.join(timeout=1.0):
                if time.monotonic() > deadline:
                    raise Failed(f"timed out after {timeout_s} s (a rank hung or died; NCCL_DEBUG=WARN in the "
                                 "environment says more)")
        except mp.ProcessRaisedException as exc:
            last = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise Failed(f"rank {exc.error_index} failed: {last}") from None
        except mp.ProcessExitedException as exc:
            signal = f", signal {exc.signal_name}" if exc.signal_name else ""
            raise Failed(f"rank {exc.error_index} died (exit code {exc.exit_code}{signal})") from None
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
        with open(result, encoding="utf-8") as fh:
            return json.load(fh)


def environment_report() -> dict:
    """What this Python can run: torch and NCCL versions, GPUs."""
    try:
        import torch
    except ImportError as exc:
        raise Usage(f"{sys.executable} cannot import torch ({exc}): run this with the vLLM venv's Python") from None
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nccl = None
    if gpus:
        try:
            nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError):
            nccl = None
    return {"python": sys.executable, "torch_version": torch.__version__, "nccl_version": nccl, "gpus": gpus,
            "gpu_name": torch.cuda.get_device_name(0) if gpus else None}


def run(args) -> dict:
    env = environment_report()
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if env["gpus"] else "gloo"
    world = args.world_size
    if world < 1:
        raise Usage(f"world size must be at least 1, got {world}")
    if backend == "nccl" and world > env["gpus"]:
        raise Usage(f"world size {world} needs {world} GPUs, {env['gpus']} visible "
                    f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")
    hidden, dtype, decode = model_sizes(args.model_config, args.batch_sizes, args.dtype)
    sizes = sorted({b for _, b in decode} | set(args.ladder))
    started = time.time()
    # One rank moves no data: NCCL launches no kernel for its in-place all-reduce (a graph of such
    # calls is empty), so only the call-by-call loop, the host's cost per call, is measured.
    graphs = backend == "nccl" and not args.no_graphs and world > 1
    copy_bytes = args.copy_mib * (1 << 20) if backend == "nccl" else 0
    raw = measure(world, backend, sizes, dtype, args.warmup, args.iters, args.reps, graphs, args.timeout_s,
                  copy_bytes)
    by_batch = {b: bs for bs, b in decode}
    rows = []
    for nbytes, r in zip(sizes, raw["sizes"]):  # noqa: B905 - the host may run Python 3.9 (no strict=)
        times = r["times_us"]
        median = statistics.median(times)
        algbw, busbw = bandwidths(nbytes, median * 1e-6, world)
        rows.append({
            "bytes": nbytes, "elements": r["elements"], "batch_size": by_batch.get(nbytes),
            "median_us": round(median, 3), "p90_us": round(percentile(times, 90), 3),
            "mean_us": round(statistics.fmean(times), 3), "min_us": round(min(times), 3),
            "median_us_by_rank": [round(m, 3) for m in r["medians_us"]],
            "eager_median_us": round(statistics.median(r["eager_times_us"]), 3) if r["eager_times_us"] else None,
            "algbw_gbps": None if algbw is None else float(f"{algbw:.6g}"),
            "busbw_gbps": None if busbw is None else float(f"{busbw:.6g}"),
        })
    return {
        "schema": 1, "tool": PROG, "label": args.label, "backend": backend, "world_size": world, "dtype": dtype,
        "hidden_size": hidden,
        "batch_sizes": args.batch_sizes if hidden else [], "warmup": args.warmup, "iters": args.iters,
        "reps": args.reps,
        "timing": (f"CUDA events around {args.iters} calls replayed from a CUDA graph" if graphs else
                   f"CUDA events around {args.iters} calls back to back" if backend == "nccl" else
                   f"wall clock around {args.iters} calls back to back") + f", {args.reps} loops",
        "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "user": _user(),
        **env, "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 3), "sizes": rows,
        "device_copy": copy_report(raw["copy"], copy_bytes, args.reps),
        "note": ("one rank: NCCL moves no data (an in-place all-reduce of one rank launches no kernel); the figures "
                 "are the host's cost per call through torch.distributed, not an all-reduce floor") if world == 1
        else None,
    }


def _user() -> str:
    """Who ran it (the service's user, when the role runs it)."""
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--world-size", type=int, default=1, help="ranks, one per GPU (default 1)")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="auto: nccl where GPUs are visible, else gloo (CPU)")
    p.add_argument("--model-config", help="the model's config.json, for the decode message sizes")
    p.add_argument("--batch-sizes", type=_ints, default=[1, 8, 32, 128], help="decode batch sizes (1,8,32,128)")
    p.add_argument("--dtype", choices=sorted(DTYPE_BYTES), help="element type (default: the config's, else bf16)")
    p.add_argument("--ladder", type=_ints, default=DEFAULT_LADDER, help="further sizes in bytes")
    p.add_argument("--warmup", type=int, default=20, help="untimed calls per size (20)")
    p.add_argument("--iters", type=int, default=50, help="calls per timed loop (50)")
    p.add_argument("--reps", type=int, default=20, help="timed loops per size (20)")
    p.add_argument("--timeout-s", type=int, default=600, help="budget for the whole measurement (600)")
    p.add_argument("--no-graphs", action="store_true",
                   help="with NCCL, time only calls launched one by one (default: also replayed from a CUDA graph, "
                        "which the figures then are)")
    p.add_argument("--copy-mib", type=int, default=1024,
                   help="MiB each GPU copies device to device for its memory bandwidth (1024; 0: not measured)")
    p.add_argument("--check", action="store_true", help="print what this Python can run (JSON) and exit")
    p.add_argument("--label", help="a name for this run, kept in the JSON (the variant's name)")
    p.add_argument("--out", help="where to write the JSON result (default stdout)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.check:
            print(json.dumps(environment_report()))
            return 0
        if args.iters < 1 or args.reps < 1 or args.warmup < 0:
            raise Usage("--iters and --reps must be at least 1, --warmup at least 0")
        if args.copy_mib < 0:
            raise Usage("--copy-mib must be at least 0")
        result = run(args)
    except Usage as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except Failed as exc:
        print(f"{PROG}: measurement failed: {exc}", file=sys.stderr)
        return 3
    except Exception as exc:  # any other failure is a failed measurement, said in one line
        traceback.print_exc(file=sys.stderr)
        print(f"{PROG}: measurement failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    text = json.dumps(result, indent=2) + "\n"
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
