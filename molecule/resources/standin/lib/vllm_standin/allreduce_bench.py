"""``allreduce_bench.py`` on the stand-in host: the floor benchmark's double, with the real script's
command line (``roles/allreduce_bench/files/allreduce_bench.py``) and its JSON, whose figures are the
stand-in's all-reduce model (``nccl.py``) under the environment it is run with (the unit's
EnvironmentFile and a variant's settings, as the role runs it): a setting that speeds up the
served decode step speeds up this floor by the same factor. No all-reduce runs; the JSON's
``timing`` says so.

Per size of B bytes: the loops' times are ``nccl.call_us(B)`` times :data:`nccl.LOOP_SPREAD` in
turn (median, p90, mean and min over them, as the real script reports), the same on every rank.
``auto`` is gloo (the stand-in has no CUDA); ``device_copy`` is null, as with gloo. Exit status 0
with the JSON written, 2 on bad input (a world size below 1, an unreadable model config), as the
real script.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

from vllm_standin import VERSION
from vllm_standin.knobs import load_knob_file
from vllm_standin.nccl import LOOP_SPREAD, call_us, factor

PROG = "allreduce_bench"
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
DEFAULT_LADDER = [1 << k for k in range(10, 27, 2)]


class Usage(Exception):
    """Bad input: exit status 2."""


def model_sizes(config_path, batch_sizes, dtype):
    """(hidden_size, dtype, [(batch size, bytes)]) from a model's config.json, as the real script."""
    if not config_path:
        return None, dtype or "bfloat16", []
    try:
        with open(config_path, encoding="utf-8") as fh:
            config = json.load(fh)
    except (OSError, ValueError) as exc:
        raise Usage(f"cannot read the model config {config_path}: {exc}") from None
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


def percentile(values, q):
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def run(args):
    backend = "gloo" if args.backend == "auto" else args.backend
    if args.world_size < 1:
        raise Usage(f"world size must be at least 1, got {args.world_size}")
    if backend == "nccl":
        raise Usage(f"world size {args.world_size} needs {args.world_size} GPUs, 0 visible (the stand-in has "
                    "no CUDA: use backend gloo or auto)")
    hidden, dtype, decode = model_sizes(args.model_config, args.batch_sizes, args.dtype)
    sizes = sorted({b for _, b in decode} | set(args.ladder))
    started = time.time()
    by_batch = {b: bs for bs, b in decode}
    rows = []
    for nbytes in sizes:
        per_call = call_us(nbytes)
        times = [per_call * LOOP_SPREAD[i % len(LOOP_SPREAD)] for i in range(args.reps)]
        median = statistics.median(times)
        algbw = nbytes / (median * 1e-6) / 1e9
        world = args.world_size
        rows.append({
            "bytes": nbytes, "elements": max(1, nbytes // DTYPE_BYTES[dtype]), "batch_size": by_batch.get(nbytes),
            "median_us": round(median, 3), "p90_us": round(percentile(times, 90), 3),
            "mean_us": round(statistics.fmean(times), 3), "min_us": round(min(times), 3),
            "median_us_by_rank": [round(median, 3)] * world, "eager_median_us": None,
            "algbw_gbps": float(f"{algbw:.6g}"),
            "busbw_gbps": float(f"{algbw * 2 * (world - 1) / world:.6g}") if world > 1 else 0.0,
        })
    return {
        "schema": 1, "tool": PROG, "label": args.label, "backend": backend, "world_size": args.world_size,
        "dtype": dtype, "hidden_size": hidden, "batch_sizes": args.batch_sizes if hidden else [],
        "warmup": args.warmup, "iters": args.iters, "reps": args.reps,
        "timing": (f"the vLLM stand-in's all-reduce model (VLLM_STANDIN_ALLREDUCE_CALL_US, _GBPS, NCCL factor "
                   f"{factor():g}): no all-reduce ran, {args.reps} loops"),
        "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        "user": _user(), "python": sys.executable, "torch_version": f"0.0.0+vllm-standin-{VERSION}",
        "nccl_version": None, "gpus": 0, "gpu_name": None,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 3), "sizes": rows, "device_copy": None,
        "note": None,
    }


def _user():
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _ints(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def build_parser():
    """The real script's options, the same names and defaults."""
    p = argparse.ArgumentParser(prog=PROG, description="All-reduce latency (the vLLM stand-in's model).")
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--model-config")
    p.add_argument("--batch-sizes", type=_ints, default=[1, 8, 32, 128])
    p.add_argument("--dtype", choices=sorted(DTYPE_BYTES))
    p.add_argument("--ladder", type=_ints, default=DEFAULT_LADDER)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--timeout-s", type=int, default=600)
    p.add_argument("--no-graphs", action="store_true")
    p.add_argument("--copy-mib", type=int, default=1024)
    p.add_argument("--check", action="store_true")
    p.add_argument("--label")
    p.add_argument("--out")
    return p


def main(argv):
    load_knob_file()
    args = build_parser().parse_args(argv)
    try:
        if args.check:
            print(json.dumps({"python": sys.executable, "torch_version": f"0.0.0+vllm-standin-{VERSION}",
                              "nccl_version": None, "gpus": 0, "gpu_name": None}))
            return 0
        if args.iters < 1 or args.reps < 1 or args.warmup < 0:
            raise Usage("--iters and --reps must be at least 1, --warmup at least 0")
        result = run(args)
    except (Usage, ValueError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=2) + "\n"
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0
