"""What a decode step must read per rank (vllm_ops.ledger.reads), recomputed here from the rule
written out in the test over the tensors the test wrote."""

from __future__ import annotations

import itertools
import json
import re
from statistics import fmean

import pytest

from vllm_ops.ledger import LedgerInputError, expected_experts, load_checkpoint, step_reads
from vllm_ops_host.checkpoint import read_checkpoint, unreadable

from ledger_helpers import DENSE, EXPERTS, HIDDEN, KV_LORA, LAYERS, PER_TOKEN, ROPE, moe_checkpoint


def rule_experts(e: int, k: int, b: int) -> float:
    """The issue's rule: expected distinct experts of E for B tokens of k experts each."""
    return e * (1 - (1 - k / e) ** b)


def test_expected_experts_by_enumeration():
    # every way 2 tokens each pick 2 of 4 experts (uniformly, without replacement): the mean count
    # of distinct experts, counted, is the rule's E (1 - (1 - k/E)^B)
    choices = list(itertools.combinations(range(4), 2))
    counted = fmean(len(set(a) | set(b)) for a, b in itertools.product(choices, repeat=2))
    assert counted == 3.0 == pytest.approx(expected_experts(4, 2, 2))
    assert expected_experts(384, 8, 1) == pytest.approx(8)  # batch 1: exactly k
    assert expected_experts(384, 8, 0) == 0
    assert expected_experts(384, 8, 10_000) == pytest.approx(384)
    with pytest.raises(LedgerInputError, match="0 < k <= E"):
        expected_experts(8, 9, 1)


@pytest.mark.parametrize(("tokens", "tp"), [(1, 1), (2, 2), (32, 8)])
def test_step_reads_of_the_moe_checkpoint(tmp_path, tokens, tp):
    built = moe_checkpoint(tmp_path / "kimi")
    record = read_checkpoint(str(built.directory))
    got = step_reads(record, tokens=tokens, tensor_parallel_size=tp, key_tokens=1000)

    routed = sum(built.expert_bytes(layer, 0) * rule_experts(EXPERTS, PER_TOKEN, tokens)
                 for layer in range(DENSE, LAYERS))  # each MoE layer: one expert's bytes x the expected experts
    want = {
        "always": built.part_bytes("always") / tp,
        "shared_experts": built.part_bytes("shared_experts") / tp,
        "routed_experts": routed / tp,
        "embedding": tokens * HIDDEN * 2 / tp,  # one bf16 row of the embedding per token
        "lm_head": built.part_bytes("lm_head") / tp,
    }
    for term, value in want.items():
        assert got[term] == pytest.approx(value), term
    assert got["weights"] == pytest.approx(sum(want.values()))
    # MLA: every rank reads the whole latent of every context token, every layer
    assert got["kv_cache"] == pytest.approx(1000 * (KV_LORA + ROPE) * LAYERS * 2)
    assert got["total"] == pytest.approx(got["weights"] + got["kv_cache"])
    assert got["expected_experts"] == pytest.approx(rule_experts(EXPERTS, PER_TOKEN, tokens))
    assert got["missing"] == {}


def test_kv_cache_of_grouped_query_attention_per_rank(tmp_path):
    built = moe_checkpoint(tmp_path / "gqa", stray=False)
    text = built.config["text_config"]
    for key in ("kv_lora_rank", "qk_rope_head_dim"):
        del text[key]
    text.update(num_attention_heads=8, num_key_value_heads=4, head_dim=16)
    (built.directory / "config.json").write_text(json.dumps(built.config))
    record = read_checkpoint(str(built.directory))
    per_token = 2 * 4 * 16 * LAYERS * 2  # K and V, 4 heads of 16, bf16
    assert step_reads(record, tokens=1, tensor_parallel_size=2, key_tokens=100)["kv_cache"] == 100 * per_token / 2
    # 8 ranks for 4 KV heads: each rank keeps one head
    assert step_reads(record, tokens=1, tensor_parallel_size=8, key_tokens=100)["kv_cache"] == 100 * per_token / 4
    # an fp8 KV cache: one byte an element
    fp8 = step_reads(record, tokens=1, tensor_parallel_size=2, key_tokens=100, kv_dtype_bytes=1)
    assert fp8["kv_cache"] == 100 * per_token / 2 / 2


def test_what_cannot_be_computed_is_none_with_the_reason(tmp_path):
    built = moe_checkpoint(tmp_path / "kimi", stray=False)
    record = read_checkpoint(str(built.directory))
    no_context = step_reads(record, tokens=1, tensor_parallel_size=1)
    assert no_context["kv_cache"] is None and no_context["total"] is None and no_context["weights"] is not None
    assert "detailed_trace_annotation" in no_context["missing"]["kv_cache"]
    assert step_reads(record, tokens=1, tensor_parallel_size=1, key_tokens=0)["kv_cache"] == 0.0

    del built.config["text_config"]["num_experts_per_tok"]
    (built.directory / "config.json").write_text(json.dumps(built.config))
    no_k = step_reads(read_checkpoint(str(built.directory)), tokens=1, tensor_parallel_size=1, key_tokens=0)
    assert no_k["routed_experts"] is None and no_k["weights"] is None
    assert "num_experts_per_tok" in no_k["missing"]["routed_experts"]

    error = step_reads(unreadable("/srv/m", "not a directory"), tokens=1, tensor_parallel_size=8)
    assert error["weights"] is None and error["missing"] == {"checkpoint": "not a directory"}


def test_a_dense_model_reads_no_experts(tmp_path):
    built = moe_checkpoint(tmp_path / "kimi", stray=False)
    record = read_checkpoint(str(built.directory))
    record["routed_experts"]["layers"] = []
    assert step_reads(record, tokens=4, tensor_parallel_size=1, key_tokens=0)["routed_experts"] == 0.0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"tokens": 0, "tensor_parallel_size": 1}, "tokens per step must be a positive integer"),
    ({"tokens": 1, "tensor_parallel_size": 0}, "tensor_parallel_size must be a positive integer"),
])
def test_bad_figures_are_refused(tmp_path, kwargs, message):
    moe_checkpoint(tmp_path / "kimi", stray=False)
    with pytest.raises(LedgerInputError, match=message):
        step_reads(read_checkpoint(str(tmp_path / "kimi")), **kwargs)


def test_load_checkpoint_reads_a_directory_or_checks_a_record(tmp_path):
    built = moe_checkpoint(tmp_path / "kimi", stray=False)
    assert load_checkpoint(built.directory) == read_checkpoint(str(built.directory))
    # a path that does not exist is said to be missing, not "not a directory" (issue 30)
    with pytest.raises(LedgerInputError, match=re.escape(f"{tmp_path / 'none'}: no such file or directory")):
        load_checkpoint(tmp_path / "none")
    with pytest.raises(LedgerInputError, match="not a checkpoint record"):
        load_checkpoint({"tool": "allreduce_bench", "schema": 1})
