"""``allreduce_bench.py`` on the stand-in host: the real script, run with the stand-in's measurement.

The stand-in's Python is asked to run the file the allreduce_bench role copied to the host
(``roles/allreduce_bench/files/allreduce_bench.py``): it loads that very file and replaces only what
needs torch and GPUs, its ``environment_report`` (torch a version, no NCCL, no GPU) and its
``measure``, so the command line, the checks, the figures' arithmetic and the JSON are the real
script's, never a copy of them. The measurement is the stand-in's all-reduce model (``nccl.py``)
under the environment it is run with (the unit's EnvironmentFile and a variant's settings, as the
role runs it): a setting that speeds up the served decode step speeds up this floor by the same
factor. No all-reduce runs; the JSON's ``timing`` says so.

Per size of B bytes: the loops' times are ``nccl.call_us(B)`` times :data:`nccl.LOOP_SPREAD` in
turn, the same on every rank. With no GPU, the real script's ``auto`` is gloo and ``device_copy``
null; ``nccl`` is refused as on a host without GPUs (exit status 2).
"""

import importlib.util
import os
import statistics
import sys

from vllm_standin import VERSION
from vllm_standin.knobs import load_knob_file
from vllm_standin.nccl import LOOP_SPREAD, call_us, factor


def environment_report():
    """The real script's report on what this Python can run: torch a version, no NCCL, no GPU."""
    return {"python": sys.executable, "torch_version": f"0.0.0+vllm-standin-{VERSION}", "nccl_version": None,
            "gpus": 0, "gpu_name": None}


def measurement(dtype_bytes):
    """The real script's ``measure``, answered by the stand-in's all-reduce model."""

    def measure(world, backend, sizes, dtype, warmup, iters, reps, graphs, timeout_s, copy_bytes=0):
        rows = []
        for nbytes in sizes:
            per_call = call_us(nbytes)
            times = [per_call * LOOP_SPREAD[i % len(LOOP_SPREAD)] for i in range(reps)]
            rows.append({"times_us": times, "eager_times_us": None, "medians_us": [statistics.median(times)] * world,
                         "elements": max(1, nbytes // dtype_bytes[dtype])})
        return {"sizes": rows, "copy": None}

    return measure


def load_script(path):
    """The real script at ``path`` as a module (its top-level imports are the standard library's)."""
    spec = importlib.util.spec_from_file_location("allreduce_bench", path)
    if spec is None or not os.path.isfile(path):
        raise FileNotFoundError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(script, argv):
    load_knob_file()
    real = load_script(script)
    real.environment_report = environment_report
    real.measure = measurement(real.DTYPE_BYTES)
    run = real.run

    def run_modelled(args):
        result = run(args)
        result["timing"] = (f"the vLLM stand-in's all-reduce model (VLLM_STANDIN_ALLREDUCE_CALL_US, _GBPS, NCCL "
                            f"factor {factor():g}): no all-reduce ran, {args.reps} loops")
        return result

    real.run = run_modelled
    return real.main(argv)
