"""plugins/module_utils/checkpoint.py (vllm_ops_host.checkpoint): the bytes of a checkpoint by part, from its
safetensors headers only, against checkpoints the tests build (sparse files: the data is a hole), and what
the hosts need of it."""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path

import pytest

from vllm_ops_host import checkpoint as ckpt

from ledger_helpers import (
    DENSE,
    EXPERTS,
    HIDDEN,
    KV_LORA,
    LAYERS,
    MOE_INTER,
    PER_TOKEN,
    ROPE,
    VOCAB,
    moe_checkpoint,
    write_safetensors,
)


def test_bytes_by_part_are_the_tensors_the_test_wrote(tmp_path):
    built = moe_checkpoint(tmp_path / "kimi")
    record = ckpt.read_checkpoint(str(tmp_path / "kimi"))

    for part in ckpt.PARTS:
        assert record["parts"][part]["bytes"] == built.part_bytes(part), part
    assert record["unclassified"]["bytes"] == built.part_bytes("unclassified") == 4 * 4
    assert record["unclassified"]["examples"] == ["language_model.model.rotary_emb.inv_freq"]
    # every tensor of the index counted once; the stray file the index does not name never read
    assert record["bytes"] == sum(t.bytes for t in built.tensors) and record["tensors"] == len(built.tensors)
    assert [f["file"] for f in record["files"]] == ["model-00001-of-00002.safetensors",
                                                     "model-00002-of-00002.safetensors"]
    assert any("consolidated.safetensors" in w for w in record["warnings"])


def test_packed_int4_counts_as_stored(tmp_path):
    built = moe_checkpoint(tmp_path / "kimi")
    record = ckpt.read_checkpoint(str(tmp_path / "kimi"))
    # one expert: gate and up (out 32, in 64) and down (out 64, in 32); int4 packs eight values
    # in an int32 (out * in / 2 bytes), a bf16 scale per 32 inputs, the shape as two int32
    def packed(out, inp):
        return out * inp // 2 + out * (inp // 32) * 2 + 2 * 4

    one = 2 * packed(MOE_INTER, HIDDEN) + packed(HIDDEN, MOE_INTER)
    assert one == built.expert_bytes(1, 0) == 3480
    routed = record["routed_experts"]
    assert routed["bytes_per_expert"] == one and routed["experts_per_layer"] == EXPERTS
    assert routed["layers"] == [{"layer": layer, "experts": EXPERTS, "bytes": EXPERTS * one}
                                for layer in range(DENSE, LAYERS)]  # the MTP layer is not decoded
    assert record["rules"]["beyond_layers"]["bytes"] > 0 and record["rules"]["vision"]["tensors"] == 2


def test_what_the_config_says(tmp_path):
    moe_checkpoint(tmp_path / "kimi")
    model = ckpt.read_checkpoint(str(tmp_path / "kimi"))["model"]
    assert model["config_from"] == "text_config"
    assert (model["routed_experts"], model["experts_per_token"], model["shared_experts"]) == (EXPERTS, PER_TOKEN, 1)
    assert model["moe_layers"] == LAYERS - DENSE
    # MLA: one latent of kv_lora_rank + qk_rope_head_dim per token and layer, bf16
    assert model["kv"]["layout"] == "mla" and model["kv"]["bytes_per_token"] == (KV_LORA + ROPE) * LAYERS * 2


def test_a_grouped_query_config_gives_its_kv_per_token():
    kv = ckpt.model_figures({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                             "num_key_value_heads": 2, "torch_dtype": "float16"})["kv"]
    assert kv["layout"] == "gqa" and kv["kv_heads"] == 2
    assert kv["bytes_per_token"] == 2 * 2 * (64 // 4) * 2 * 2  # K and V, 2 heads of 16, 2 layers, 2 bytes
    assert ckpt.model_figures({"hidden_size": 64})["kv"]["bytes_per_token"] is None


def test_tied_embeddings_make_the_lm_head_the_embedding(tmp_path):
    built = moe_checkpoint(tmp_path / "tied", tie=True)
    record = ckpt.read_checkpoint(str(tmp_path / "tied"))
    assert record["lm_head"] == {"bytes": built.part_bytes("embedding"), "tied": True}
    assert record["embedding"]["rows"] == VOCAB and record["embedding"]["row_bytes"] == HIDDEN * 2


def test_without_an_index_every_file_is_read(tmp_path):
    write_safetensors(tmp_path / "a.safetensors", [("model.layers.0.mlp.up_proj.weight", "BF16", [8, 4])])
    write_safetensors(tmp_path / "b.safetensors", [("model.embed_tokens.weight", "F32", [10, 4]),
                                                   ("lm_head.weight", "F32", [10, 4])])
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 1, "vocab_size": 10}))
    record = ckpt.read_checkpoint(str(tmp_path))
    assert record["bytes"] == 8 * 4 * 2 + 2 * 10 * 4 * 4
    assert record["parts"]["always"]["bytes"] == 64 and record["parts"]["lm_head"]["bytes"] == 160
    assert record["routed_experts"] == {"layers": [], "experts_per_layer": None, "bytes_per_expert": None}


def test_the_header_is_read_and_nothing_else(tmp_path, monkeypatch):
    """The reader asks for 8 bytes, then the header's length: never the data."""
    path = tmp_path / "one.safetensors"
    write_safetensors(path, [("w", "BF16", [4096, 4096])])
    (length,) = struct.unpack("<Q", path.read_bytes()[:8])
    asked = []
    real_open = open

    class Counting:
        def __init__(self, fh):
            self.fh = fh

        def read(self, n=-1):
            asked.append(n)
            return self.fh.read(n)

        def __getattr__(self, name):
            return getattr(self.fh, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    monkeypatch.setattr("builtins.open", lambda p, mode="r", **kw: Counting(real_open(p, mode, **kw)))
    tensors, header_bytes = ckpt.read_header(str(path))
    assert asked == [8, length] and header_bytes == 8 + length
    assert tensors == {"w": {"dtype": "BF16", "shape": [4096, 4096], "bytes": 4096 * 4096 * 2}}


def _raw(path: Path, header: dict | bytes, data: int = 0, length: int | None = None) -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw) if length is None else length) + raw)
        fh.truncate(8 + len(raw) + data)
    return path


@pytest.mark.parametrize(("header", "data", "length", "message"), [
    (b"", 0, 2**40, "header length 1099511627776, expected 2 to"),
    (b'{"w": 1', 0, None, "not JSON"),
    (b"[1, 2]", 0, None, "not a JSON object"),
    ({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0]}}, 4, None, "expected dtype, shape and data_offsets"),
    ({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}, 4, None, "outside the file's 4 data bytes"),
    ({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 6]}}, 8, None, "BF16 [4] is 8 bytes, its data_offsets "
                                                                             "span 6"),
    (b'{"w": {}}', 0, 100, "truncated: its header says 100 bytes, 9 follow"),
])
def test_damaged_headers_are_refused_naming_the_file(tmp_path, header, data, length, message):
    path = _raw(tmp_path / "bad.safetensors", header, data, length)
    with pytest.raises(ckpt.CheckpointError, match=re.escape(message)) as err:
        ckpt.read_header(str(path))
    assert str(err.value).startswith(str(path))


def test_a_file_shorter_than_its_length_field(tmp_path):
    (tmp_path / "x.safetensors").write_bytes(b"\x01\x00")
    with pytest.raises(ckpt.CheckpointError, match="2 bytes, shorter than its 8-byte header length"):
        ckpt.read_header(str(tmp_path / "x.safetensors"))


def test_an_unknown_dtype_is_taken_as_stored(tmp_path):
    # F4 packs two values a byte in a way the header does not say: the span counts as it is
    path = _raw(tmp_path / "f4.safetensors", {"w": {"dtype": "F4", "shape": [64], "data_offsets": [0, 32]}}, 32)
    assert ckpt.read_header(str(path))[0]["w"]["bytes"] == 32


def test_directories_that_are_no_checkpoint(tmp_path):
    with pytest.raises(ckpt.CheckpointError, match="not a directory"):
        ckpt.read_checkpoint(str(tmp_path / "moonshotai/Kimi-K2.5"))
    with pytest.raises(ckpt.CheckpointError, match=re.escape("no *.safetensors files")):
        ckpt.read_checkpoint(str(tmp_path))
    built = moe_checkpoint(tmp_path / "kimi", stray=False)
    os.remove(built.directory / "model-00002-of-00002.safetensors")
    lacks = "the index names 1 file(s) the directory lacks: model-00002"
    with pytest.raises(ckpt.CheckpointError, match=re.escape(lacks)):
        ckpt.read_checkpoint(str(built.directory))


def test_a_tensor_in_two_files_is_refused(tmp_path):
    for name in ("a", "b"):
        write_safetensors(tmp_path / f"{name}.safetensors", [("lm_head.weight", "BF16", [2, 2])])
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ckpt.CheckpointError, match=re.escape("tensor lm_head.weight is also in another file")):
        ckpt.read_checkpoint(str(tmp_path))


def test_a_config_whose_experts_disagree_with_the_headers_is_said(tmp_path):
    built = moe_checkpoint(tmp_path / "kimi", stray=False)
    config = built.config
    config["text_config"]["n_routed_experts"] = 16
    config["text_config"]["first_k_dense_replace"] = 0
    (built.directory / "config.json").write_text(json.dumps(config))
    warnings = ckpt.read_checkpoint(str(built.directory))["warnings"]
    assert "config.json says 16 routed experts per layer; the headers hold [8]" in warnings
    assert "config.json implies 4 MoE layers; the headers hold routed experts in 3" in warnings


@pytest.mark.parametrize(("name", "rule", "part"), [
    ("language_model.model.layers.3.mlp.experts.17.down_proj.weight_packed", "routed_expert", ckpt.ROUTED),
    ("model.layers.0.block_sparse_moe.experts.7.w1.weight", "mixtral_expert", ckpt.ROUTED),
    ("model.layers.2.mlp.shared_expert.up_proj.weight", "shared_expert", ckpt.SHARED),
    ("model.layers.2.mlp.shared_expert_gate.weight", "router", ckpt.ALWAYS),
    ("model.layers.2.mlp.gate_proj.weight", "layer", ckpt.ALWAYS),
    ("model.layers.61.enorm.weight", "beyond_layers", ckpt.NOT_IN_DECODE),
    ("vision_tower.patch_embed.proj.weight", "vision", ckpt.NOT_IN_DECODE),
    ("lm_head.weight_packed", "lm_head", ckpt.LM_HEAD),
    ("transformer.wte.weight", "embedding", ckpt.EMBEDDING),
])
def test_the_rules(name, rule, part):
    found, _ = ckpt.classify(name, num_layers=61)
    assert (found.name, found.part) == (rule, part)


def test_every_rule_has_a_part_and_a_note():
    assert len({r.name for r in ckpt.RULES}) == len(ckpt.RULES)
    assert all(r.part in ckpt.PARTS and r.note for r in ckpt.RULES)
