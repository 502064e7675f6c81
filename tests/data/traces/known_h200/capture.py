"""Capture the project's known-answer traces on one NVIDIA GPU with PyTorch alone (no vLLM).

Each capture is a small decoder run step by step under ``torch.profiler`` (CPU and CUDA
activities, no stacks, no shapes), every step wrapped in ``record_function`` with vLLM's native
step name (``execute_context_{n}({tokens})_generation_{m}({tokens})``), so the trace has the
``user_annotation`` and ``gpu_user_annotation`` spans a vLLM server's trace has. What each step
does is decided here, in advance, and measured here with clocks the profiler does not use:

* ``gpu_ms``: ``torch.cuda.Event`` (timing) recorded on the step's stream just before its first
  launch and just after its last GPU operation (the copy of the sampled tokens to the host);
  ``elapsed_time`` between them. It spans the GPU's whole window for the step, idle gaps inside
  it included, plus the few microseconds between the start event and the first kernel.
* ``host_issue_ms``, ``host_ms``, ``period_ms`` and the host gaps: ``time.perf_counter`` on the
  host, around the step (``t0`` before the annotation opens, ``t_issue`` after the last launch,
  ``t1`` after the step's event synchronize, which ends the annotation).
* The host gap after a step is planted: a busy wait of :data:`HOST_GAP_MS` (the scheduler's
  time between two vLLM steps), or, after the stall step, ``time.sleep`` of :data:`STALL_MS`.
* Bytes and FLOPs are counted from the shapes: every weight a step's GEMMs read (for the MoE, the
  experts it routes to), the KV cache its decode attention reads, 2 FLOPs a multiply-add.
* Graph steps replay one ``torch.cuda.CUDAGraph`` captured (before profiling) from the eager
  decode step; eager steps launch the same kernels one by one.

Usage, on the GPU machine: ``python3 capture.py all OUTDIR`` (the three captures, each in its own
process, as tests/data/traces/README.md describes), or ``python3 capture.py one --model dense
--schedule full OUTDIR``. ``--device cpu --tiny`` runs the same code on a CPU with toy sizes (no
graphs, no CUDA events) to check the script before spending GPU time; its output is no truth.
Without a GPU or torch: ``python3 capture.py derive DIR`` recomputes the derived blocks of the truth
files (``expected``, ``graphs``, ``tolerances``) from their measured figures, and ``python3 capture.py
checkpoint DIR --to CKPT`` writes the capture's model as a checkpoint directory (``config.json`` and a
safetensors file whose header is real and whose data is a sparse hole), for ``--checkpoint``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import statistics
import subprocess
import sys
import time

try:  # ``derive`` needs no torch
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = F = None

SCHEMA = 1
DTYPE = torch.bfloat16 if torch is not None else None
DTYPE_BYTES = 2

CONFIGS = {
    # A Llama-3-8B-shaped dense decoder cut to 16 layers: 3.62 G parameters, 7.2 GB of bf16 weights.
    "dense": {"kind": "dense", "hidden": 4096, "layers": 16, "heads": 32, "kv_heads": 8, "head_dim": 128,
              "ffn": 14336, "vocab": 32000},
    # A MoE-like decoder: 16 experts a layer, 2 per token; a decode step of 8 tokens routes to 6 of them.
    "moe": {"kind": "moe", "hidden": 4096, "layers": 4, "heads": 32, "kv_heads": 8, "head_dim": 128,
            "experts": 16, "top_k": 2, "expert_ffn": 6144, "decode_active_experts": 6, "vocab": 32000},
}
TINY = {"hidden": 256, "heads": 4, "kv_heads": 2, "head_dim": 64, "ffn": 512, "expert_ffn": 128, "vocab": 1000}

DECODE_REQUESTS = 8  # a decode step: 8 requests, one token each
KV_LEN = 1024  # each decode request's context (keys read from the KV cache), fixed
PREFILL_TOKENS = 512  # a prefill step: one request's prompt
MIXED_PREFILL_TOKENS = 256  # a mixed step: one prompt chunk and 7 decode requests
MIXED_DECODE_REQUESTS = 7
HOST_GAP_MS = 0.3  # planted between every two steps (busy wait)
STALL_MS = 25.0  # planted once, after STALL_AFTER (time.sleep)
SEED = 1234


def schedules() -> dict:
    """name -> (steps [(phase, mode)], the step after which the stall is planted or None)."""
    full = ([("prefill", "eager")] + [("decode", "graph")] * 6 + [("prefill", "eager")]
            + [("decode", "graph")] * 10 + [("mixed", "eager")] + [("decode", "eager")] * 4
            + [("prefill", "eager")] + [("decode", "eager")] * 4)
    short = [("prefill", "eager")] + [("decode", "graph")] * 8
    return {"full": (full, 12), "short": (short, None)}


# --------------------------------------------------------------------------- the model

class Plan:
    """One step's shape: ``prefill`` prompt tokens (one request) and ``decode`` requests of one token
    each, their rows in that order; the rows sampled; for the MoE, each layer's routing."""

    def __init__(self, prefill: int, decode: int, device):
        self.prefill, self.decode = prefill, decode
        self.tokens = prefill + decode
        rows = ([prefill - 1] if prefill else []) + list(range(prefill, prefill + decode))
        self.sampled = rows
        self.sample_idx = torch.tensor(rows, device=device, dtype=torch.long)
        self.routes: list[dict] = []

    @property
    def phase(self) -> str:
        return "mixed" if self.prefill and self.decode else "prefill" if self.prefill else "decode"

    def name(self) -> str:
        """vLLM's native step annotation."""
        n, m = (1 if self.prefill else 0), self.decode
        return f"execute_context_{n}({self.prefill})_generation_{m}({self.decode})"


def route(tokens: int, layer: int, cfg: dict, rng: random.Random, device) -> dict:
    """A fixed routing of ``tokens`` tokens to ``top_k`` distinct experts each (graph-capturable: no
    data-dependent shapes). A step of a few tokens routes to ``decode_active_experts`` experts of the
    layer; a long step (a prompt) spreads evenly over every expert."""
    e_n, k = cfg["experts"], cfg["top_k"]
    if tokens * k <= 2 * e_n:
        active = rng.sample(range(e_n), cfg["decode_active_experts"])
        while True:
            picks = active + [rng.choice(active) for _ in range(tokens * k - len(active))]
            rng.shuffle(picks)
            pairs = [picks[t * k:(t + 1) * k] for t in range(tokens)]
            if all(len(set(p)) == k for p in pairs):
                break
    else:
        pairs = [[(t * k + j + layer) % e_n for j in range(k)] for t in range(tokens)]
    slots = sorted((pairs[t][j], t, j) for t in range(tokens) for j in range(k))
    segments, start = [], 0
    for i, (e, _, _) in enumerate(slots):
        if i + 1 == len(slots) or slots[i + 1][0] != e:
            segments.append((e, start, i + 1))
            start = i + 1
    return {"topk": torch.tensor(pairs, device=device, dtype=torch.long),
            "perm_token": torch.tensor([t for _, t, _ in slots], device=device, dtype=torch.long),
            "perm_slot": torch.tensor([t * k + j for _, t, j in slots], device=device, dtype=torch.long),
            "segments": segments, "experts": sorted({e for e, _, _ in segments}),
            "tokens_per_expert": {e: b - a for e, a, b in segments}}


class Model:
    """Random bf16 weights, one tensor per matrix (each read once a step), stored (in, out)."""

    def __init__(self, cfg: dict, device):
        self.cfg, self.device = cfg, device
        g = torch.Generator(device=device).manual_seed(SEED)
        h, d = cfg["hidden"], cfg["head_dim"]
        self.hq, self.kv = cfg["heads"], cfg["kv_heads"]
        self.group = self.hq // self.kv

        def w(n_in, n_out):
            return torch.randn(n_in, n_out, generator=g, device=device, dtype=DTYPE) * (n_in ** -0.5)

        def ones():
            return torch.ones(h, device=device, dtype=DTYPE)

        self.layers = []
        for _ in range(cfg["layers"]):
            layer = {"attn_norm": ones(), "qkv": w(h, (self.hq + 2 * self.kv) * d), "o": w(self.hq * d, h),
                     "ffn_norm": ones(),
                     "k_cache": torch.randn(DECODE_REQUESTS, self.kv, KV_LEN, d, generator=g, device=device,
                                            dtype=DTYPE),
                     "v_cache": torch.randn(DECODE_REQUESTS, self.kv, KV_LEN, d, generator=g, device=device,
                                            dtype=DTYPE)}
            if cfg["kind"] == "dense":
                layer.update(gate_up=w(h, 2 * cfg["ffn"]), down=w(cfg["ffn"], h))
            else:
                layer.update(router=w(h, cfg["experts"]),
                             experts=[(w(h, 2 * cfg["expert_ffn"]), w(cfg["expert_ffn"], h))
                                      for _ in range(cfg["experts"])])
            self.layers.append(layer)
        self.final_norm, self.lm_head = ones(), w(h, cfg["vocab"])

    # bytes -----------------------------------------------------------------
    def part_bytes(self) -> dict:
        """Bytes of each part of the weights (the KV cache apart)."""
        c, b = self.cfg, DTYPE_BYTES
        h, d = c["hidden"], c["head_dim"]
        attn = (h * (self.hq + 2 * self.kv) * d + self.hq * d * h + 2 * h) * b  # qkv, o, both norms
        out = {"attention_and_norms_per_layer": attn, "lm_head": h * c["vocab"] * b, "final_norm": h * b}
        if c["kind"] == "dense":
            out["mlp_per_layer"] = 3 * h * c["ffn"] * b
        else:
            out["router_per_layer"] = h * c["experts"] * b
            out["expert"] = 3 * h * c["expert_ffn"] * b
        return out

    def weights_bytes(self) -> int:
        """Every weight of the model (what its checkpoint holds, as bf16)."""
        p, c = self.part_bytes(), self.cfg
        per_layer = p["attention_and_norms_per_layer"] + (
            p["mlp_per_layer"] if c["kind"] == "dense" else p["router_per_layer"] + c["experts"] * p["expert"])
        return c["layers"] * per_layer + p["lm_head"] + p["final_norm"]

    def step_counts(self, plan: Plan) -> dict:
        """What one step of this plan reads and computes, counted from the shapes."""
        p, c = self.part_bytes(), self.cfg
        h, d = c["hidden"], c["head_dim"]
        t, sampled = plan.tokens, len(plan.sampled)
        weights = p["lm_head"] + p["final_norm"] + c["layers"] * p["attention_and_norms_per_layer"]
        attn_params = h * (self.hq + 2 * self.kv) * d + self.hq * d * h
        flops = 2 * sampled * h * c["vocab"] + c["layers"] * 2 * t * attn_params
        experts = []
        if c["kind"] == "dense":
            weights += c["layers"] * p["mlp_per_layer"]
            flops += c["layers"] * 2 * t * 3 * h * c["ffn"]
        else:
            for r in plan.routes:
                weights += p["router_per_layer"] + len(r["experts"]) * p["expert"]
                flops += 2 * t * h * c["experts"] + 2 * t * c["top_k"] * 3 * h * c["expert_ffn"]
                experts.append({"active": r["experts"],
                                "tokens_per_expert": {str(e): n for e, n in sorted(r["tokens_per_expert"].items())}})
        kv = c["layers"] * 2 * plan.decode * self.kv * KV_LEN * d * DTYPE_BYTES
        attn_flops = c["layers"] * (4 * plan.decode * self.hq * KV_LEN * d  # decode: QK^T and PV over the cache
                                    + 2 * self.hq * plan.prefill * plan.prefill * d)  # causal prompt, half of 4PPd
        out = {"weights_bytes_read": weights, "kv_cache_bytes_read": kv, "gemm_flops": flops,
               "attention_flops": attn_flops, "gemm_flop_per_weight_byte": round(flops / weights, 3)}
        if experts:
            out["experts_by_layer"] = experts
        return out

    # forward ---------------------------------------------------------------
    def attention(self, layer: dict, x: torch.Tensor, plan: Plan) -> torch.Tensor:
        d, hq, kv, grp = self.cfg["head_dim"], self.hq, self.kv, self.group
        qkv = x @ layer["qkv"]
        q, k, v = qkv.split([hq * d, kv * d, kv * d], dim=-1)
        outs = []
        p, b = plan.prefill, plan.decode
        if p:
            qp = q[:p].view(p, hq, d).transpose(0, 1).unsqueeze(0)
            kp = k[:p].view(p, kv, d).transpose(0, 1).unsqueeze(0).repeat_interleave(grp, dim=1)
            vp = v[:p].view(p, kv, d).transpose(0, 1).unsqueeze(0).repeat_interleave(grp, dim=1)
            op = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True)
            outs.append(op.squeeze(0).transpose(0, 1).reshape(p, hq * d))
        if b:
            # one token a request: its query heads of one KV head are that head's rows (GQA)
            qd = q[p:].view(b, kv, grp, d)
            od = F.scaled_dot_product_attention(qd, layer["k_cache"][:b], layer["v_cache"][:b])
            outs.append(od.reshape(b, hq * d))
        a = outs[0] if len(outs) == 1 else torch.cat(outs)
        return a @ layer["o"]

    def mlp(self, layer: dict, x: torch.Tensor, li: int, plan: Plan) -> torch.Tensor:
        if self.cfg["kind"] == "dense":
            g, u = (x @ layer["gate_up"]).chunk(2, dim=-1)
            return (F.silu(g) * u) @ layer["down"]
        r = plan.routes[li]
        probs = (x @ layer["router"]).softmax(dim=-1, dtype=torch.float32)
        gates = probs.gather(1, r["topk"])
        gates = (gates / gates.sum(dim=-1, keepdim=True)).to(DTYPE)
        xp = x.index_select(0, r["perm_token"])
        yp = torch.empty_like(xp)
        for e, a, b in r["segments"]:
            w_gu, w_down = layer["experts"][e]
            g, u = (xp[a:b] @ w_gu).chunk(2, dim=-1)
            torch.mm(F.silu(g) * u, w_down, out=yp[a:b])
        yp = yp * gates.view(-1).index_select(0, r["perm_slot"]).unsqueeze(1)
        return torch.zeros_like(x).index_add_(0, r["perm_token"], yp)

    def forward(self, x: torch.Tensor, plan: Plan) -> torch.Tensor:
        h = self.cfg["hidden"]
        for li, layer in enumerate(self.layers):
            x = x + self.attention(layer, F.rms_norm(x, (h,), layer["attn_norm"]), plan)
            x = x + self.mlp(layer, F.rms_norm(x, (h,), layer["ffn_norm"]), li, plan)
        last = F.rms_norm(x, (h,), self.final_norm).index_select(0, plan.sample_idx)
        return (last @ self.lm_head).argmax(dim=-1)


# --------------------------------------------------------------------------- measuring

def ceilings(device) -> dict:
    """The GPU's copy bandwidth and bf16 matrix rate, measured here with CUDA events (no profiler)."""
    n = 1 << 30  # 2 GiB of bf16 read, 2 GiB written
    a = torch.empty(n, device=device, dtype=DTYPE)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10):
        b.copy_(a)
    e.record()
    e.synchronize()
    copy_tbps = 10 * 2 * n * DTYPE_BYTES / (s.elapsed_time(e) / 1e3) / 1e12
    del a, b
    m = 8192
    x = torch.randn(m, m, device=device, dtype=DTYPE)
    y = torch.randn(m, m, device=device, dtype=DTYPE)
    for _ in range(3):
        x @ y
    s.record()
    for _ in range(10):
        x @ y
    e.record()
    e.synchronize()
    tflops = 10 * 2 * m ** 3 / (s.elapsed_time(e) / 1e3) / 1e12
    del x, y
    torch.cuda.empty_cache()
    return {"copy_tb_per_s": round(copy_tbps, 3), "bf16_gemm_tflop_per_s": round(tflops, 1),
            "ridge_flop_per_byte": round(tflops / copy_tbps, 1),
            "how": "device-to-device copy of 2 GiB (bytes read + written) x10 and an 8192^3 bf16 matmul of random "
                   "data x10, each after 3 warm-ups, timed with CUDA events, in this process before profiling"}


class Clock:
    """CUDA events on a GPU; on the CPU dry run, nothing (its gpu_ms is null)."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.start = torch.cuda.Event(enable_timing=True) if cuda else None
        self.end = torch.cuda.Event(enable_timing=True) if cuda else None

    def begin(self):
        if self.cuda:
            self.start.record()

    def finish(self):
        if self.cuda:
            self.end.record()

    def wait(self):
        if self.cuda:
            self.end.synchronize()

    def ms(self):
        return round(self.start.elapsed_time(self.end), 4) if self.cuda else None


def spin(seconds: float) -> None:
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        pass


def capture(model_name: str, schedule: str, out_dir: str, device_name: str, tiny: bool) -> dict:
    cuda = device_name == "cuda"
    device = torch.device(device_name)
    cfg = dict(CONFIGS[model_name])
    if tiny:
        cfg.update({k: v for k, v in TINY.items() if k in cfg})
        cfg["layers"] = 2
    torch.manual_seed(SEED)
    dist_info = _init_dist(cuda)
    ceil = ceilings(device) if cuda else None
    model = Model(cfg, device)
    steps, stall_after = schedules()[schedule]
    plans = {"decode": Plan(0, DECODE_REQUESTS, device), "prefill": Plan(PREFILL_TOKENS, 0, device),
             "mixed": Plan(MIXED_PREFILL_TOKENS, MIXED_DECODE_REQUESTS, device)}
    if cfg["kind"] == "moe":
        for key, plan in plans.items():
            rng = random.Random(f"{SEED}-{key}")
            plan.routes = [route(plan.tokens, li, cfg, rng, device) for li in range(cfg["layers"])]
    g = torch.Generator(device=device).manual_seed(SEED + 1)
    inputs = {k: torch.randn(p.tokens, cfg["hidden"], generator=g, device=device, dtype=DTYPE)
              for k, p in plans.items()}
    host_tokens = torch.empty(DECODE_REQUESTS + 1, dtype=torch.long, pin_memory=cuda)

    with torch.inference_mode():
        for _ in range(2):  # warm-up: cuBLAS handles, kernels' first loads, the allocator
            for k, p in plans.items():
                model.forward(inputs[k], p)
        if cuda:
            torch.cuda.synchronize()
            # Start CUPTI once before capturing the graph, so that the kernels it replays are traced.
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                    torch.profiler.ProfilerActivity.CUDA]):
                model.forward(inputs["decode"], plans["decode"])
                torch.cuda.synchronize()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    model.forward(inputs["decode"], plans["decode"])
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                graph_tokens = model.forward(inputs["decode"], plans["decode"])
            for _ in range(2):
                graph.replay()
            torch.cuda.synchronize()

        clocks = [Clock(cuda) for _ in steps]
        t0s, issues, t1s = [], [], []
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        captured_at = time.time()
        with torch.profiler.profile(activities=activities, record_shapes=False, with_stack=False,
                                    profile_memory=False) as prof:
            for i, (phase, mode) in enumerate(steps):
                plan, clock = plans[phase], clocks[i]
                t0 = time.perf_counter()
                with torch.profiler.record_function(plan.name()):
                    clock.begin()
                    if mode == "graph" and cuda:
                        graph.replay()
                        tokens = graph_tokens
                    else:
                        tokens = model.forward(inputs[phase], plan)
                    host_tokens[:tokens.numel()].copy_(tokens, non_blocking=cuda)
                    clock.finish()
                    t_issue = time.perf_counter()
                    clock.wait()
                t1 = time.perf_counter()
                t0s.append(t0)
                issues.append(t_issue)
                t1s.append(t1)
                if i + 1 < len(steps):
                    if i == stall_after:
                        time.sleep(STALL_MS / 1e3)
                    else:
                        spin(HOST_GAP_MS / 1e3)
        finished_at = time.time()

        unprofiled = _unprofiled(model, plans, inputs, graph if cuda else None, graph_tokens if cuda else None,
                                 host_tokens, cuda)

    os.makedirs(out_dir, exist_ok=True)
    trace_name = f"dp0_pp0_tp0_dcp0_ep0_rank0.{time.time_ns()}.pt.trace.json.gz"
    raw = os.path.join(out_dir, "trace.json.tmp")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as fh:
        data = fh.read()
    os.remove(raw)
    trace_path = os.path.join(out_dir, trace_name)
    with open(trace_path, "wb") as fh:
        fh.write(gzip.compress(data, compresslevel=9, mtime=0))
    doc = json.loads(data)

    rows = []
    for i, (phase, mode) in enumerate(steps):
        plan = plans[phase]
        row = {"index": i, "name": plan.name(), "phase": phase, "graph": mode == "graph" and cuda,
               "context_requests": 1 if plan.prefill else 0, "generation_requests": plan.decode,
               "context_tokens": plan.prefill, "generation_tokens": plan.decode, "scheduled_tokens": plan.tokens,
               "gpu_ms": clocks[i].ms(),
               "host_issue_ms": round((issues[i] - t0s[i]) * 1e3, 4),
               "host_ms": round((t1s[i] - t0s[i]) * 1e3, 4),
               "period_ms": round((t0s[i + 1] - t0s[i]) * 1e3, 4) if i + 1 < len(steps) else None,
               "host_gap_after": None if i + 1 == len(steps) else {
                   "planted": "sleep" if i == stall_after else "busy_wait",
                   "planted_ms": STALL_MS if i == stall_after else HOST_GAP_MS,
                   "measured_ms": round((t0s[i + 1] - t1s[i]) * 1e3, 4)}}
        row.update(model.step_counts(plan))
        rows.append(row)
    truth = _truth(model_name, schedule, cfg, model, plans, rows, stall_after, ceil, unprofiled, doc, trace_name,
                   os.path.getsize(trace_path), captured_at, finished_at, dist_info, tiny, cuda)
    _write_truth(os.path.join(out_dir, "truth.json"), truth)
    if dist_info:
        torch.distributed.destroy_process_group()
    return truth


def _unprofiled(model, plans, inputs, graph, graph_tokens, host_tokens, cuda) -> dict:
    """The decode step without the profiler: 10 eager and 10 graph steps, the medians."""
    out = {}
    for mode in ("eager", "graph"):
        if mode == "graph" and graph is None:
            continue
        gpu, issue = [], []
        for _ in range(10):
            clock = Clock(cuda)
            t0 = time.perf_counter()
            clock.begin()
            if mode == "graph":
                graph.replay()
                tokens = graph_tokens
            else:
                tokens = model.forward(inputs["decode"], plans["decode"])
            host_tokens[:tokens.numel()].copy_(tokens, non_blocking=cuda)
            clock.finish()
            issue.append((time.perf_counter() - t0) * 1e3)
            clock.wait()
            gpu.append(clock.ms())
            spin(HOST_GAP_MS / 1e3)
        out[mode] = {"gpu_ms_median": round(statistics.median(gpu), 4) if cuda else None,
                     "host_issue_ms_median": round(statistics.median(issue), 4), "steps": 10}
    return out


def _init_dist(cuda: bool) -> dict | None:
    """A one-rank process group (vLLM's TP1 has one), so the trace carries distributedInfo."""
    if not cuda or not torch.distributed.is_available():
        return None
    path = f"/tmp/known_traces_pg_{os.getpid()}"
    try:
        torch.distributed.init_process_group("nccl", init_method=f"file://{path}", rank=0, world_size=1)
    except Exception as exc:  # the traces are still useful without it; the truth says so
        print(f"no process group: {exc}", file=sys.stderr)
        return None
    return {"backend": "nccl", "rank": 0, "world_size": 1}


def _truth(model_name, schedule, cfg, model, plans, rows, stall_after, ceil, unprofiled, doc, trace_name, size,
           captured_at, finished_at, dist_info, tiny, cuda) -> dict:
    """What was planted and measured; :func:`derive` adds what follows from it."""
    ev = doc.get("traceEvents", [])
    names = {r["name"] for r in rows}
    cats = {}
    for e in ev:
        cats[e.get("cat")] = cats.get(e.get("cat"), 0) + 1
    truth = {
        "schema": SCHEMA,
        "what": f"known-answer capture '{model_name}/{schedule}': a {cfg['kind']} bf16 decoder run step by step "
                "under torch.profiler with vLLM's native step annotations; PyTorch only, no vLLM",
        "dry_run": tiny or not cuda,
        "trace": {"file": trace_name, "bytes": size, "trace_id": doc.get("trace_id"),
                  "baseTimeNanoseconds": doc.get("baseTimeNanoseconds"),
                  "distributedInfo": doc.get("distributedInfo"), "events": len(ev), "events_by_cat": cats,
                  "step_annotations": {
                      "cpu": sum(1 for e in ev if e.get("cat") == "user_annotation" and e.get("name") in names),
                      "gpu": sum(1 for e in ev if e.get("cat") == "gpu_user_annotation" and e.get("name") in names)},
                  "graph_launches": sum(1 for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                                        and "GraphLaunch" in str(e.get("name")))},
        "captured": {"started_unix_s": round(captured_at, 3), "finished_unix_s": round(finished_at, 3),
                     "process": os.getpid(), "process_group": dist_info},
        "environment": _environment(cuda),
        "ceilings": ceil,
        "model": {**cfg, "dtype": "bfloat16", "weights_bytes": model.weights_bytes(), "parts_bytes": model.part_bytes(),
                  "kv_len": KV_LEN, "seed": SEED,
                  "notes": "random weights; inputs are fixed hidden states (no embedding, sampled tokens not fed "
                           "back); the KV cache is fixed at kv_len keys per decode request and not written; MoE "
                           "routing is fixed per step shape in advance (graph-capturable), the router GEMM and "
                           "softmax still run and weight the experts' outputs"},
        "planted": {"host_gap_ms": HOST_GAP_MS, "stall_ms": STALL_MS, "stall_after": stall_after},
        "steps": rows,
        "measured_how": MEASURED_HOW,
        "unprofiled_decode": unprofiled,
    }
    return derive(truth)


MEASURED_HOW = {
    "gpu_ms": "torch.cuda.Event(enable_timing=True) recorded just before the step's first launch and just after "
              "its last GPU operation (the copy of the sampled tokens to pinned host memory); elapsed_time. It spans "
              "the step's GPU window, idle inside it included, plus the latency between the start event and the "
              "first kernel (the host's time to issue it)",
    "host_issue_ms": "time.perf_counter from just before the step annotation opens to just after its last launch "
                     "(before it waits for the GPU)",
    "host_ms": "time.perf_counter from just before the annotation opens to just after it closes (the step ends with "
               "cudaEventSynchronize on its end event: it waits for its GPU work)",
    "period_ms": "time.perf_counter from this step's t0 to the next step's t0",
    "host_gap_after": "planted after the annotation closes: a busy wait of HOST_GAP_MS, or time.sleep of STALL_MS "
                      "after the stall step; measured_ms is perf_counter from this step's end to the next step's t0",
    "bytes_and_flops": "counted from the shapes: each weight matrix is a separate tensor read once a step; MoE: the "
                       "experts the step routes to; KV cache: 2 x requests x kv_heads x kv_len x head_dim x 2 bytes a "
                       "layer; gemm_flops 2 per multiply-add (lm_head only on the sampled rows)",
    "unprofiled": "the decode step again after the capture, without the profiler: 10 eager and 10 graph steps, the "
                  "medians of CUDA-event GPU time and perf_counter issue time",
}

# How close a summary's figure must come to the truth's, and why (the tests use these).
TOLERANCES = {
    "window_ms": {"below_gpu_ms_max": 0.25, "above_gpu_ms_max": 0.001,
                  "why": "the CUDA events enclose the step's GPU window: they start before the first kernel (the "
                         "host's time to issue it: up to about 0.2 ms for an eager step under the profiler, seen "
                         "here) and end with the token copy; so gpu_ms - 0.25 <= window <= gpu_ms"},
    "busy_ms": {"min_share_of_window_bound": 0.85, "max_over_gpu_ms": 0.001,
                "why": "busy (the union of the step's activities) leaves out the GPU's idle between two kernels, "
                       "which no CUDA event around the step can separate (about 1 us a kernel in a graph replay, "
                       "a few hundred kernels a step); so 0.85 x (gpu_ms - 0.25) <= busy <= gpu_ms on a step the "
                       "GPU bounds (graph steps); an eager decode step runs the same kernels as a graph step, so its "
                       "busy is held to the graph steps' gpu_ms (gpu_need_ms) the same way"},
    "period_ms": {"abs": 0.2, "why": "perf_counter t0 is read just before record_function opens; the first step of "
                                     "a capture opens its annotation up to about 0.2 ms later"},
    "host_gap_ms": {"abs": 0.2, "why": "the trace's gap runs from the annotation's end to the next one's start, "
                                       "the truth's from perf_counter after the end to before the next start"},
    "stall_host_ms": {"above_measured_gap_max": 0.5,
                      "why": "a step's host time outside its GPU window holds the gap after it and the host's time "
                             "before its first kernel and after its last (sync, annotation)"},
}


def derive(truth: dict) -> dict:
    """The answers that follow from the measured steps (``expected``, ``tolerances``), recomputed from
    the truth file's own figures, so ``python3 capture.py derive DIR`` needs no GPU."""
    rows, cfg, ceil = truth["steps"], truth["model"], truth["ceilings"]
    stall_after = truth["planted"]["stall_after"]
    dense = cfg["kind"] == "dense"
    decode = [r for r in rows if r["phase"] == "decode"]
    graph = [r for r in decode if r["graph"]]
    eager = [r for r in decode if not r["graph"]]
    steady = [r for r in graph if r["index"] != stall_after and r["period_ms"] is not None]
    gpu_need = _median(r["gpu_ms"] for r in graph)
    d = decode[0]
    ridge = ceil["ridge_flop_per_byte"] if ceil else None
    read = d["weights_bytes_read"] + d["kv_cache_bytes_read"]
    with_period = [r for r in decode if r["period_ms"] is not None]
    decode_time = sum(r["period_ms"] for r in with_period)
    eager_time = sum(r["period_ms"] for r in eager if r["period_ms"] is not None)
    period, window = _median(r["period_ms"] for r in steady), _median(r["gpu_ms"] for r in steady)
    stall = None
    if stall_after is not None:
        s = rows[stall_after]
        stall = {"after_step": stall_after, "phase": s["phase"], "graph": s["graph"], "planted": "time.sleep",
                 "planted_ms": truth["planted"]["stall_ms"], "measured_gap_ms": s["host_gap_after"]["measured_ms"],
                 "period_ms_of_step": s["period_ms"], "in_period_of_step": stall_after,
                 # the gap over the sum of the decode steps' periods (the last step has none)
                 "share_of_decode_time": round(s["host_gap_after"]["measured_ms"] / decode_time, 4)
                 if decode_time else None,
                 "first_step_of_capture": {"index": 0, "phase": rows[0]["phase"]},
                 "right_answer": f"decode step {stall_after} holds a host stall of about "
                                 f"{truth['planted']['stall_ms']:g} ms after its GPU window (the host slept before "
                                 "beginning the next step); it is no profiler start-up (the capture's first step is "
                                 f"step 0, a {rows[0]['phase']}) and no part of any regime of eager steps"}
    mixed = [r for r in rows if r["phase"] == "mixed"]
    truth["expected"] = {
        "phases": {p: {"steps": [r["index"] for r in rows if r["phase"] == p],
                       "period_ms_median": _median(r["period_ms"] for r in rows if r["phase"] == p)}
                   for p in ("decode", "prefill", "mixed")},
        "mixed_decode_token_share": round(sum(r["generation_tokens"] for r in mixed)
                                          / sum(r["scheduled_tokens"] for r in mixed), 4) if mixed else None,
        "decode": {
            "tokens_per_step": d["scheduled_tokens"],
            "weights_bytes_read_per_step": d["weights_bytes_read"],
            "kv_cache_bytes_read_per_step": d["kv_cache_bytes_read"],
            "checkpoint_weights_bytes": cfg["weights_bytes"],
            "gemm_flop_per_weight_byte": d["gemm_flop_per_weight_byte"],
            "ridge_flop_per_byte": ridge,
            "bound": ("memory" if d["gemm_flop_per_weight_byte"] < ridge else "compute") if ridge else None,
            "gpu_need_ms": gpu_need,
            "bytes_at_copy_bandwidth_ms": round(read / (ceil["copy_tb_per_s"] * 1e12) * 1e3, 4) if ceil else None,
            "achieved_tb_per_s": round(read / (gpu_need / 1e3) / 1e12, 3) if gpu_need else None,
            "right_answer": "the GPU-bound (graph) decode steps are memory-bound: their GEMMs do "
                            f"{d['gemm_flop_per_weight_byte']:g} FLOP per weight byte ({d['scheduled_tokens']} tokens "
                            "a step" + ("" if dense else ", spread over the experts they route to") + "), far below "
                            "the GPU's ridge" + (f" of {ridge:g} FLOP/byte" if ridge else "") + "; that follows from "
                            "the arithmetic intensity alone, with or without a checkpoint"},
        "steady_decode": {
            "steps": [r["index"] for r in steady], "period_ms": period, "gpu_ms": window,
            "host_between_steps_ms": round(period - window, 4) if period and window else None,
            "right_answer": "the steady decode step is the graph step: each waits for its GPU (event synchronize) "
                            "before the host begins the next, so host and GPU never overlap and the period "
                            f"({period} ms) is the GPU's time ({window} ms by CUDA events) plus the host's time "
                            f"between two steps (the planted {truth['planted']['host_gap_ms']:g} ms gap and the next "
                            "launch); a pace that names the GPU alone must say what the rest of the period is"},
        "stall": stall,
        "eager_regime": None if not eager else {
            "steps": [r["index"] for r in eager], "count": len(eager), "decode_steps": len(decode),
            "share_of_decode_time": round(eager_time / decode_time, 4) if decode_time else None,
            "period_ms_median": _median(r["period_ms"] for r in eager),
            "host_issue_ms_median": _median(r["host_issue_ms"] for r in eager),
            "gpu_need_ms": gpu_need,
            "right_answer": "these decode steps ran without CUDA graphs (no graph launch) after graph steps of the "
                            "same shape: their GPU work is the graph steps' and the host launching the kernels one "
                            "by one sets their period (its issue time is about their GPU window); the fitting advice "
                            "is to run them in CUDA graphs (vLLM: no --enforce-eager, capture sizes that cover the "
                            "batch), not to hunt CPU contention"},
        "advice": {
            "fits": (["CUDA graphs for the eager steps"] if eager else []) + (
                ["fewer weight bytes per step (a lower-precision checkpoint such as FP8) since decode is "
                 "memory-bound", "more tokens per step (batch, speculative decoding) for the same weights read"]
                if dense else
                ["MoE advice (expert kernels, expert parallelism)", "fewer weight bytes per step (a "
                 "lower-precision checkpoint) since decode is memory-bound", "more tokens per step for the same "
                 "weights read"]),
            "does_not_fit": (["Marlin / W4A16 or other quantized-kernel advice (the checkpoint is bf16)",
                              "MoE advice (the model is dense)",
                              "all-reduce fusion or NCCL settings (TP1: no all-reduce)"] if dense else
                             ["Marlin / W4A16 or other quantized-kernel advice (the checkpoint is bf16)",
                              "dense-GEMM advice for the experts' GEMMs",
                              "all-reduce fusion or NCCL settings (TP1: no all-reduce)"])},
    }
    truth["graphs"] = {"graph_steps": [r["index"] for r in rows if r["graph"]],
                       "eager_steps": [r["index"] for r in rows if not r["graph"]],
                       "graph_launches_in_trace": truth["trace"]["graph_launches"],
                       "how": "graph steps call CUDAGraph.replay() of the decode step captured before profiling; "
                              "eager steps (every prefill and mixed step too) launch each kernel"}
    truth["tolerances"] = TOLERANCES
    truth["measured_how"] = MEASURED_HOW
    for old in ("stall", "steps_per_phase"):  # the first captures' files had these; expected holds them now
        truth.pop(old, None)
    return truth


def _median(values) -> float | None:
    x = [v for v in values if v is not None]
    return round(statistics.median(x), 4) if x else None


def _environment(cuda: bool) -> dict:
    env = {"torch": torch.__version__, "python": sys.version.split()[0]}
    if cuda:
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, capability=f"{p.major}.{p.minor}", sms=p.multi_processor_count,
                   memory_bytes=p.total_memory, cuda=torch.version.cuda)
        try:
            env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                           capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            env["driver"] = None
    return env


# --------------------------------------------------------------------------- the three captures

CAPTURES = (  # (folder, model, schedule, at least this many seconds after the first capture ended)
    ("dense", "dense", "full", None),
    ("dense_b", "dense", "short", 0.0),  # the same workload again, seconds later, in another process
    ("moe", "moe", "full", 65.0),  # more than a minute after the dense capture ended
)


def run_all(out: str, device: str, tiny: bool) -> None:
    first_end = None
    for folder, model, schedule, after in CAPTURES:
        if after and first_end is not None:
            wait = first_end + after - time.time()
            if wait > 0 and not tiny:
                print(f"waiting {wait:.1f} s", flush=True)
                time.sleep(wait)
        cmd = [sys.executable, os.path.abspath(__file__), "one", "--model", model, "--schedule", schedule,
               "--device", device] + (["--tiny"] if tiny else []) + [os.path.join(out, folder)]
        t = time.time()
        done = subprocess.run(cmd, check=False)
        if done.returncode:
            print(f"capture {folder} failed: exit status {done.returncode}", flush=True)
            continue
        with open(os.path.join(out, folder, "truth.json"), encoding="utf-8") as fh:
            truth = json.load(fh)
        if first_end is None:
            first_end = truth["captured"]["finished_unix_s"]
        print(json.dumps({"capture": folder, "wall_s": round(time.time() - t, 1), "trace": truth["trace"],
                          "ceilings": truth["ceilings"], "expected": truth["expected"]["decode"],
                          "unprofiled": truth["unprofiled_decode"],
                          "steps": [(r["index"], r["phase"], r["graph"], r["gpu_ms"], r["host_issue_ms"],
                                     r["period_ms"]) for r in truth["steps"]]}), flush=True)


# --------------------------------------------------------------------------- the models' checkpoints

def checkpoint_tensors(model: dict) -> list[tuple[str, list[int]]]:
    """The capture's weights under Hugging Face names (Llama for the dense model, Mixtral for the MoE),
    as ``(name, shape)`` of bf16 tensors: the same bytes the capture held (``model.weights_bytes``;
    no embedding, which the capture did not have)."""
    h, d, hq, kv = model["hidden"], model["head_dim"], model["heads"], model["kv_heads"]
    out = []
    for i in range(model["layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", [h]), (p + "post_attention_layernorm.weight", [h]),
                (p + "self_attn.q_proj.weight", [hq * d, h]), (p + "self_attn.k_proj.weight", [kv * d, h]),
                (p + "self_attn.v_proj.weight", [kv * d, h]), (p + "self_attn.o_proj.weight", [h, hq * d])]
        if model["kind"] == "dense":
            f = model["ffn"]
            out += [(p + "mlp.gate_proj.weight", [f, h]), (p + "mlp.up_proj.weight", [f, h]),
                    (p + "mlp.down_proj.weight", [h, f])]
        else:
            f = model["expert_ffn"]
            out.append((p + "block_sparse_moe.gate.weight", [model["experts"], h]))
            for e in range(model["experts"]):
                q = p + f"block_sparse_moe.experts.{e}."
                out += [(q + "w1.weight", [f, h]), (q + "w3.weight", [f, h]), (q + "w2.weight", [h, f])]
    return [*out, ("model.norm.weight", [h]), ("lm_head.weight", [model["vocab"], h])]


def write_checkpoint(model: dict, out_dir: str) -> int:
    """A checkpoint directory of the capture's model: ``config.json`` and one ``model.safetensors`` whose
    header is real and whose data is a sparse hole (the project's checkpoint reader reads headers
    only). Returns the data bytes."""
    header, offset = {}, 0
    for name, shape in checkpoint_tensors(model):
        n = DTYPE_BYTES
        for dim in shape:
            n *= dim
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "model.safetensors"), "wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw)
        fh.truncate(8 + len(raw) + offset)
    dense = model["kind"] == "dense"
    config = {"architectures": ["LlamaForCausalLM" if dense else "MixtralForCausalLM"],
              "model_type": "llama" if dense else "mixtral", "hidden_size": model["hidden"],
              "intermediate_size": model["ffn"] if dense else model["expert_ffn"],
              "num_hidden_layers": model["layers"], "num_attention_heads": model["heads"],
              "num_key_value_heads": model["kv_heads"], "head_dim": model["head_dim"], "vocab_size": model["vocab"],
              "torch_dtype": "bfloat16", "tie_word_embeddings": False}
    if not dense:
        config.update(num_local_experts=model["experts"], num_experts_per_tok=model["top_k"])
    with open(os.path.join(out_dir, "config.json"), "w", encoding="utf-8") as fh:
        json.dump(config, fh, indent=1)
        fh.write("\n")
    return offset


def _truth_files(top: str) -> list[str]:
    direct = os.path.join(top, "truth.json")
    if os.path.exists(direct):
        return [direct]
    return [os.path.join(top, d, "truth.json") for d in sorted(os.listdir(top))
            if os.path.exists(os.path.join(top, d, "truth.json"))]


def _write_truth(path: str, truth: dict) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(truth, fh, indent=1)
        fh.write("\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=("all", "one", "derive", "checkpoint"),
                    help="all: the three captures; one: one capture; derive: recompute the derived blocks of the "
                         "truth.json files under OUT from their measured figures (no GPU needed); checkpoint: "
                         "write the checkpoint (headers, sparse data) of the capture in OUT into --to")
    ap.add_argument("out")
    ap.add_argument("--to", help="checkpoint: the directory to write")
    ap.add_argument("--model", choices=sorted(CONFIGS), default="dense")
    ap.add_argument("--schedule", choices=sorted(schedules()), default="full")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tiny", action="store_true", help="toy sizes, for a dry run of the script")
    args = ap.parse_args()
    if args.what == "checkpoint":
        with open(os.path.join(args.out, "truth.json"), encoding="utf-8") as fh:
            write_checkpoint(json.load(fh)["model"], args.to or os.path.join(args.out, "checkpoint"))
    elif args.what == "derive":
        for folder in sorted({os.path.dirname(p) for p in _truth_files(args.out)}):
            path = os.path.join(folder, "truth.json")
            with open(path, encoding="utf-8") as fh:
                truth = json.load(fh)
            _write_truth(path, derive(truth))
    elif args.what == "all":
        run_all(args.out, args.device, args.tiny)
    else:
        capture(args.model, args.schedule, args.out, args.device, args.tiny)


if __name__ == "__main__":
    main()
