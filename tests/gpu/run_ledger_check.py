#!/usr/bin/env python3
"""The decode ledger's inputs measured on a real GPU: the device's bandwidth, and a decode step
whose bytes are known, traced (tests/gpu/README.md, "The decode floor on one H200").

1. ``roles/allreduce_bench/files/allreduce_bench.py`` with one rank and the Kimi-K2.5 decode
   sizes, as the all-reduce floor job runs it: its JSON's ``device_copy`` is the GPU's measured
   bandwidth (a device-to-device copy). Written as ``allreduce_<gpu>_ws1_copy.json``.
2. A synthetic batch-1 decode step whose weights are known: ``--layers`` layers of two bf16
   GEMVs (``[1, H] x [H, F]`` then ``[1, F] x [F, H]``) with an RMS norm and a residual add,
   then the LM head ``[1, H] x [H, V]`` after reading one embedding row; ``--steps`` steps under
   torch.profiler (CPU and CUDA activities, no stacks), each inside ``record_function`` named as
   vLLM's detailed annotation names a batch-1 decode step with 1000 tokens of context (the step
   reads no KV cache: it has no attention). Written as ``decode_rank0.pt.trace.json.gz`` and
   ``weights.json`` (the tensors' names, dtypes and shapes as a Llama checkpoint names them, and
   the config.json that goes with them), so the controller can build the checkpoint's headers.
3. A read-only reference: ``torch.sum`` over a ``--read-mib`` bf16 buffer, the bytes read over
   the median time, beside the copy's figure.

Python 3.9+ standard library and PyTorch only. Exit status 0, 77 without a GPU (skipped).
``--smoke`` runs the same on the CPU with tiny sizes (no GPU figures: the plumbing only).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "roles" / "allreduce_bench" / "files" / "allreduce_bench.py"
KIMI = REPO / "tests" / "data" / "models" / "kimi-k2.5-text-config.json"
STEP_NAME = "execute_1_context_0(sq0sk0sqsq0sqsk0)_generation_1(sq1sk1000sqsq1sqsk1000)"


def weights(layers: int, hidden: int, ffn: int, vocab: int) -> list[tuple[str, list[int]]]:
    """The tensors of the synthetic model, as nn.Linear stores them ([out, in]), Llama's names."""
    out = [("model.embed_tokens.weight", [vocab, hidden])]
    for i in range(layers):
        out += [(f"model.layers.{i}.mlp.up_proj.weight", [ffn, hidden]),
                (f"model.layers.{i}.mlp.down_proj.weight", [hidden, ffn]),
                (f"model.layers.{i}.post_attention_layernorm.weight", [hidden])]
    return [*out, ("model.norm.weight", [hidden]), ("lm_head.weight", [vocab, hidden])]


def bench(out: Path, smoke: bool, gpu: str) -> Path:
    path = out / f"allreduce_{gpu}_ws1_copy.json"
    argv = [sys.executable, str(BENCH), "--world-size", "1", "--model-config", str(KIMI), "--out", str(path)]
    argv += ["--backend", "gloo", "--ladder", "1024", "--warmup", "1", "--iters", "2", "--reps", "2"] if smoke else \
        ["--backend", "nccl"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    print(f"== allreduce_bench: exit {proc.returncode} ({' '.join(argv[2:])})", flush=True)
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        sys.exit(1)
    result = json.loads(path.read_text())
    print(f"  device_copy: {json.dumps(result['device_copy'])}")
    return path


def decode(out: Path, device: str, layers: int, hidden: int, ffn: int, vocab: int, steps: int) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.manual_seed(0)
    dt = torch.bfloat16
    shapes = dict(weights(layers, hidden, ffn, vocab))
    w = {name: (torch.randn(shape, dtype=dt, device=device) * 0.02) for name, shape in shapes.items()}
    token = torch.tensor([7], device=device)

    def step():
        x = torch.nn.functional.embedding(token, w["model.embed_tokens.weight"])
        for i in range(layers):
            h = torch.nn.functional.rms_norm(x, (hidden,), w[f"model.layers.{i}.post_attention_layernorm.weight"])
            h = torch.nn.functional.linear(h, w[f"model.layers.{i}.mlp.up_proj.weight"])
            x = x + torch.nn.functional.linear(h, w[f"model.layers.{i}.mlp.down_proj.weight"])
        x = torch.nn.functional.rms_norm(x, (hidden,), w["model.norm.weight"])
        return torch.nn.functional.linear(x, w["lm_head.weight"])

    gpu = device != "cpu"
    for _ in range(3):
        step()
    if gpu:
        torch.cuda.synchronize()
    # the same step timed without the profiler, CUDA events around each
    plain = []
    for _ in range(steps):
        if gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            plain.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            step()
            plain.append((time.perf_counter() - t0) * 1e3)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with profile(activities=activities, record_shapes=False, with_stack=False) as prof:
        for _ in range(steps):
            with record_function(STEP_NAME):
                step()
            if gpu:
                torch.cuda.synchronize()
    raw = out / "decode_rank0.pt.trace.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(str(raw) + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(raw)
    config = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": layers, "hidden_size": hidden,
              "intermediate_size": ffn, "vocab_size": vocab, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
    info = {"config": config, "dtype": "BF16", "tensors": [[n, s] for n, s in weights(layers, hidden, ffn, vocab)],
            "step_name": STEP_NAME, "steps": steps, "device": torch.cuda.get_device_name(0) if gpu else "cpu",
            "torch_version": torch.__version__, "plain_step_ms": [round(v, 4) for v in plain],
            "plain_step_ms_median": round(statistics.median(plain), 4)}
    (out / "weights.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"== decode: {layers} layers, H {hidden}, F {ffn}, V {vocab}; step without the profiler "
          f"{info['plain_step_ms_median']:.3f} ms (median of {steps})")
    return info


def read_reference(device: str, mib: int, reps: int = 20) -> dict | None:
    import torch

    if device == "cpu":
        return None
    n = mib * (1 << 20) // 2
    x = torch.randn(n, dtype=torch.bfloat16, device=device)
    for _ in range(3):
        x.sum()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        x.sum()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    median = statistics.median(times)
    out = {"bytes": n * 2, "median_us": round(median * 1e6, 3), "read_gbps": round(n * 2 / median / 1e9, 1)}
    print(f"== read-only reference: torch.sum over {n * 2} bytes: {json.dumps(out)}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT") or ".", help="output directory (default $OUT)")
    p.add_argument("--layers", type=int, default=61)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--ffn", type=int, default=4096)
    p.add_argument("--vocab", type=int, default=163840)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--read-mib", type=int, default=4096)
    p.add_argument("--smoke", action="store_true", help="CPU, tiny sizes: the plumbing only")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        import torch
    except ImportError:
        print("no PyTorch: skipped", file=sys.stderr)
        return 77
    if args.smoke:
        device, gpu = "cpu", "cpu"
        args.layers, args.hidden, args.ffn, args.vocab, args.steps = 2, 64, 32, 100, 3
    elif not torch.cuda.is_available():
        print("no GPU: skipped", file=sys.stderr)
        return 77
    else:
        device = "cuda"
        gpu = torch.cuda.get_device_name(0).split()[-1].lower()
    bench(out, args.smoke, gpu)
    info = decode(out, device, args.layers, args.hidden, args.ffn, args.vocab, args.steps)
    info["read_reference"] = read_reference(device, args.read_mib)
    (out / "weights.json").write_text(json.dumps(info, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
