"""Checkpoints and traces built by the tests, whose bytes and times the tests know by construction.

A safetensors file here is a real header (8-byte little-endian length, JSON with dtype, shape and
data_offsets) followed by a sparse hole as long as the data: the reader must never need the data.
Every tensor is written with the part of the model the test says it is, so the expected bytes per
part are the test's own sums of elements x element size, not the code's classification.
"""

from __future__ import annotations

import gzip
import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path

ELEMENT_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "I8": 1, "U8": 1}


def write_safetensors(path: Path, tensors: list[tuple[str, str, list[int]]], metadata: dict | None = None) -> int:
    """Write ``(name, dtype, shape)`` tensors' header and a hole for their data; return the data bytes."""
    header, offset = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        nbytes = math.prod(shape) * ELEMENT_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header to 8 bytes with spaces
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)
    return offset


@dataclass
class Tensor:
    name: str
    dtype: str
    shape: list[int]
    part: str  # what the test says this tensor is
    layer: int | None = None
    expert: int | None = None

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * ELEMENT_BYTES[self.dtype]


@dataclass
class Built:
    directory: Path
    config: dict
    tensors: list[Tensor] = field(default_factory=list)

    def part_bytes(self, part: str) -> int:
        return sum(t.bytes for t in self.tensors if t.part == part)

    def expert_bytes(self, layer: int, expert: int) -> int:
        return sum(t.bytes for t in self.tensors if t.layer == layer and t.expert == expert)


# The synthetic MoE model: a DeepSeek-V3 / Kimi-K2.5 layout in small.
LAYERS, DENSE, EXPERTS, PER_TOKEN, SHARED = 4, 1, 8, 2, 1
HIDDEN, INTER, MOE_INTER, VOCAB, GROUP = 64, 128, 32, 100, 32
HEADS, KV_LORA, ROPE, Q_LORA, NOPE, V_DIM = 4, 32, 8, 48, 16, 16


def int4(name: str, out: int, inp: int, part: str, layer=None, expert=None) -> list[Tensor]:
    """compressed-tensors pack-quantized INT4, group 32: eight 4-bit values per int32, a bf16 scale
    per group of 32 inputs, and the weight's shape as two int32."""
    return [Tensor(f"{name}.weight_packed", "I32", [out, inp // 8], part, layer, expert),
            Tensor(f"{name}.weight_scale", "BF16", [out, inp // GROUP], part, layer, expert),
            Tensor(f"{name}.weight_shape", "I32", [2], part, layer, expert)]


def moe_checkpoint(directory: Path, *, shards: int = 2, stray: bool = True, tie: bool = False) -> Built:
    """A Kimi-K2.5-like checkpoint: the language model under ``language_model.``, routed experts in
    packed INT4 with scales, the rest bf16, one shared expert, a dense first layer, an MTP layer past
    num_hidden_layers, a vision tower, and one tensor no rule knows. With an index; ``stray`` adds a
    safetensors file the index does not name (never read)."""
    directory.mkdir(parents=True, exist_ok=True)
    text = {"model_type": "kimi_k2", "num_hidden_layers": LAYERS, "hidden_size": HIDDEN, "vocab_size": VOCAB,
            "torch_dtype": "bfloat16", "n_routed_experts": EXPERTS, "num_experts_per_tok": PER_TOKEN,
            "n_shared_experts": SHARED, "first_k_dense_replace": DENSE, "moe_layer_freq": 1,
            "kv_lora_rank": KV_LORA, "qk_rope_head_dim": ROPE, "q_lora_rank": Q_LORA, "num_attention_heads": HEADS,
            "intermediate_size": INTER, "moe_intermediate_size": MOE_INTER, "tie_word_embeddings": tie}
    config = {"architectures": ["KimiK25ForConditionalGeneration"], "text_config": text}
    built = Built(directory, config)
    t = built.tensors
    lm = "language_model.model"
    t.append(Tensor(f"{lm}.embed_tokens.weight", "BF16", [VOCAB, HIDDEN], "embedding"))
    for layer in range(LAYERS + 1):  # the last one is the MTP layer, past num_hidden_layers
        p = f"{lm}.layers.{layer}"
        part = "always" if layer < LAYERS else "not_in_decode"
        t += [Tensor(f"{p}.self_attn.q_a_proj.weight", "BF16", [Q_LORA, HIDDEN], part, layer),
              Tensor(f"{p}.self_attn.q_a_layernorm.weight", "BF16", [Q_LORA], part, layer),
              Tensor(f"{p}.self_attn.q_b_proj.weight", "BF16", [HEADS * (NOPE + ROPE), Q_LORA], part, layer),
              Tensor(f"{p}.self_attn.kv_a_proj_with_mqa.weight", "BF16", [KV_LORA + ROPE, HIDDEN], part, layer),
              Tensor(f"{p}.self_attn.kv_a_layernorm.weight", "BF16", [KV_LORA], part, layer),
              Tensor(f"{p}.self_attn.kv_b_proj.weight", "BF16", [HEADS * (NOPE + V_DIM), KV_LORA], part, layer),
              Tensor(f"{p}.self_attn.o_proj.weight", "BF16", [HIDDEN, HEADS * V_DIM], part, layer),
              Tensor(f"{p}.input_layernorm.weight", "BF16", [HIDDEN], part, layer),
              Tensor(f"{p}.post_attention_layernorm.weight", "BF16", [HIDDEN], part, layer)]
        if layer < DENSE:
            t += [Tensor(f"{p}.mlp.gate_proj.weight", "BF16", [INTER, HIDDEN], part, layer),
                  Tensor(f"{p}.mlp.up_proj.weight", "BF16", [INTER, HIDDEN], part, layer),
                  Tensor(f"{p}.mlp.down_proj.weight", "BF16", [HIDDEN, INTER], part, layer)]
            continue
        t += [Tensor(f"{p}.mlp.gate.weight", "BF16", [EXPERTS, HIDDEN], part, layer),
              Tensor(f"{p}.mlp.gate.e_score_correction_bias", "F32", [EXPERTS], part, layer)]
        shared = "shared_experts" if layer < LAYERS else part
        t += [Tensor(f"{p}.mlp.shared_experts.gate_proj.weight", "BF16", [MOE_INTER * SHARED, HIDDEN], shared, layer),
              Tensor(f"{p}.mlp.shared_experts.up_proj.weight", "BF16", [MOE_INTER * SHARED, HIDDEN], shared, layer),
              Tensor(f"{p}.mlp.shared_experts.down_proj.weight", "BF16", [HIDDEN, MOE_INTER * SHARED], shared, layer)]
        routed = "routed_experts" if layer < LAYERS else part
        for e in range(EXPERTS):
            q = f"{p}.mlp.experts.{e}"
            t += int4(f"{q}.gate_proj", MOE_INTER, HIDDEN, routed, layer, e)
            t += int4(f"{q}.up_proj", MOE_INTER, HIDDEN, routed, layer, e)
            t += int4(f"{q}.down_proj", HIDDEN, MOE_INTER, routed, layer, e)
    t.append(Tensor(f"{lm}.norm.weight", "BF16", [HIDDEN], "always"))
    if not tie:
        t.append(Tensor("language_model.lm_head.weight", "BF16", [VOCAB, HIDDEN], "lm_head"))
    t += [Tensor("vision_tower.encoder.blocks.0.wqkv.weight", "BF16", [96, 32], "not_in_decode"),
          Tensor("mm_projector.proj.0.weight", "BF16", [HIDDEN, 32], "not_in_decode"),
          Tensor(f"{lm}.rotary_emb.inv_freq", "F32", [4], "unclassified")]
    files = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    weight_map = {}
    for i, name in enumerate(files):
        mine = t[i::shards]
        write_safetensors(directory / name, [(x.name, x.dtype, x.shape) for x in mine], metadata={"format": "pt"})
        weight_map.update({x.name: name for x in mine})
    (directory / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": sum(x.bytes for x in t)}, "weight_map": weight_map}))
    (directory / "config.json").write_text(json.dumps(config))
    if stray:
        write_safetensors(directory / "consolidated.safetensors", [("stray.weight", "BF16", [1000, 1000])])
    return built


# --------------------------------------------------------------------------- traces

def _ev(cat, name, ts, dur, pid=0, tid=7, args=None):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": dict(args or {}, **{"External id": 1})}


def decode_trace(path: Path, *, rank: int, world: int, steps: int, period_us: float, kernels: list[tuple[str, float]],
                 batch: int = 1, key_tokens: int = 1000, allreduce: tuple[int, str] | None = None,
                 device: str = "Test GPU") -> None:
    """One rank's trace: ``steps`` decode steps ``period_us`` apart, each annotated as vLLM's detailed
    form writes it (B requests, their context lengths summing to ``key_tokens``) and running
    ``kernels`` back to back from the step's start (``(name, µs)``); a kernel named ``AllReduce``
    carries the collective's arguments (``allreduce``: element count, dtype)."""
    events = []
    name = (f"execute_{batch}_context_0(sq0sk0sqsq0sqsk0)_generation_{batch}"
            f"(sq{batch}sk{key_tokens}sqsq{batch}sqsk{key_tokens})")
    for s in range(steps):
        start = 1000.0 + s * period_us
        window = sum(d for _, d in kernels)
        events.append(_ev("gpu_user_annotation", name, start, window))
        ts = start
        for kname, dur in kernels:
            args = {"device": 0, "stream": 7}
            if "AllReduce" in kname and allreduce is not None:
                args.update({"Collective name": "allreduce", "In msg nelems": allreduce[0],
                             "Out msg nelems": allreduce[0], "dtype": allreduce[1], "Process Group Name": "0",
                             "Group size": world})
            events.append(_ev("kernel", kname, ts, dur, args=args))
            ts += dur
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": device}],
           "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world}, "traceEvents": events}
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
