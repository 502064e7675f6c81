"""The decode ledger inside the trace summary (summarize(checkpoint=...), vllm-trace-summary
--checkpoint), the verdict it feeds (memory-bound GEMMs, the levers in next) and the PCIe findings
the campaign gives it (fabric=...).

Known answers built here: a dense bf16 checkpoint whose bytes the test sums from the shapes it
wrote, and a two-rank H200 trace whose GEMM time is set so that reading those bytes at the H200's
spec bandwidth takes 78% of it. The rule, written out:

    weight floor (per rank) = sum of the checkpoint's tensor bytes / TP / 4800 GB/s    (no embedding, no LM head)
    hbm_share               = weight floor / GEMM time                              (memory-bound within x2)
    headroom at most        = period - weight floor - KV floor                      (no all-reduce floor given)
"""

from __future__ import annotations

import copy
import json
import math

import pytest

from vllm_ops import fabric
from vllm_ops.ledger import LEVERS, MEMORY_BOUND_FACTOR, LedgerInputError
from vllm_ops.traces import SummaryOptions, summarize, to_markdown
from vllm_ops.traces.cli import main
from vllm_ops.traces.render import verdict_sentence
from vllm_ops.traces.verdict import describe

from ledger_helpers import decode_trace, write_safetensors

TP, LAYERS, HIDDEN, INTER = 2, 4, 4096, 16384
SPEC_GBPS = 4800.0  # the H200's datasheet figure, which the ledger uses when no copy was measured
SHARE = 0.78
KEY_TOKENS = 1000
NORM_US, AR_US, HOST_US = 2.0, 8.0, 5.0
H200 = "NVIDIA H200"


def _tensors():
    out = []
    for i in range(LAYERS):
        out += [(f"model.layers.{i}.input_layernorm.weight", "BF16", [HIDDEN]),
                (f"model.layers.{i}.mlp.up_proj.weight", "BF16", [INTER, HIDDEN]),
                (f"model.layers.{i}.mlp.down_proj.weight", "BF16", [HIDDEN, INTER])]
    return out


def _config(**attention):
    return {"architectures": ["ToyMLPDecoder"], "num_hidden_layers": LAYERS, "hidden_size": HIDDEN,
            "intermediate_size": INTER, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
            "num_attention_heads": 0, **attention}


def _model(directory, **attention):
    directory.mkdir(parents=True)
    write_safetensors(directory / "model.safetensors", _tensors())
    (directory / "config.json").write_text(json.dumps(_config(**attention)))
    return directory


def _traces(directory, gemm_us, period_us):
    """Two identical ranks: per layer a norm, the layer's two GEMMs, an all-reduce of HIDDEN bf16."""
    directory.mkdir(parents=True)
    kernels = []
    for _ in range(LAYERS):
        kernels += [("rms_norm_kernel", NORM_US), ("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNT", gemm_us / (2 * LAYERS)),
                    ("nvjet_sm90_tst_128x8_64x12_2x1_v_bz_splitK_NNT", gemm_us / (2 * LAYERS)),
                    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", AR_US)]
    for rank in range(TP):
        decode_trace(directory / f"tp2_rank{rank}.pt.trace.json.gz", rank=rank, world=TP, steps=6,
                     period_us=period_us, kernels=kernels, key_tokens=KEY_TOKENS, allreduce=(HIDDEN, "BFloat16"),
                     device=H200)
    return directory, sum(d for _, d in kernels)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("summary-ledger")
    weights = sum(math.prod(shape) * 2 for _, _, shape in _tensors()) / TP  # bytes a step reads on one rank
    floor_ms = weights / (SPEC_GBPS * 1e9) * 1e3
    gemm_us = floor_ms * 1e3 / SHARE  # the GEMMs take the floor / 78%
    window_us = gemm_us + LAYERS * (NORM_US + AR_US)  # the kernels run back to back from the step's start
    traces, _ = _traces(tmp / "traces", gemm_us, period_us=window_us + HOST_US)
    idle, _ = _traces(tmp / "idle", gemm_us, period_us=4 * window_us)  # the GPU idle 3/4 of each step
    return {"model": _model(tmp / "model"), "gqa": _model(tmp / "gqa", num_attention_heads=8, num_key_value_heads=2,
                                                          head_dim=128),
            "traces": traces, "idle": idle, "weights": weights, "floor_ms": floor_ms, "gemm_ms": gemm_us / 1e3,
            "period_ms": (window_us + HOST_US) / 1e3, "tmp": tmp}


def test_a_batch_1_decode_whose_gemms_read_at_78_percent_of_the_bandwidth_is_memory_bound(world):
    summary = summarize([str(world["traces"])], SummaryOptions(checkpoint=str(world["model"])))
    ledger = summary["ledger"]
    assert ledger["tensor_parallel_size"] == TP and [r["rank"] for r in ledger["ranks"]] == [0, 1]
    for rank in ledger["ranks"]:
        assert rank["bandwidth"]["source"] == "spec" and rank["bandwidth"]["gbps"] == SPEC_GBPS
        assert rank["reads"]["tokens"] == 1 and rank["reads"]["weights"] == round(world["weights"])
        assert rank["floors"]["weights"] == pytest.approx(world["floor_ms"], abs=1e-4)
        assert rank["floors"]["kv_cache"] == 0.0  # num_attention_heads 0: no KV cache, whatever the context
        assert rank["gemm"]["kind"] == "memory-bound"
        assert rank["gemm"]["hbm_share"] == pytest.approx(SHARE, abs=1e-3)
        # no all-reduce floor given: the total is not measured, the headroom only bounded
        assert rank["floors"]["total"] is None and "no all-reduce floor given" in rank["not_measured"]["allreduce"]
        assert rank["headroom_at_most_ms"] == pytest.approx(world["period_ms"] - world["floor_ms"], abs=1e-3)
    v = summary["verdict"]
    assert (v["kind"], v["rank"], v["category"]) == ("memory-bound", v["rank"], "gemm") and v["rank"] in (0, 1)
    ev = v["evidence"]
    assert ev["gemm_kind"] == "memory-bound" and ev["hbm_share"] == pytest.approx(SHARE, abs=1e-3)
    assert ev["gemm_ms"] == pytest.approx(world["gemm_ms"], abs=1e-3)
    assert ev["weights_floor_ms"] == pytest.approx(world["floor_ms"], abs=1e-4)
    assert (ev["bandwidth_gbps"], ev["bandwidth_source"]) == (SPEC_GBPS, "spec")
    assert v["thresholds"]["memory_bound_factor"] == MEMORY_BOUND_FACTOR
    assert describe(v) == "memory-bound (gemm at 78% of HBM bandwidth)"
    sentence = verdict_sentence(summary)
    assert sentence.startswith("memory-bound (gemm at 78% of HBM bandwidth): decode step ")
    assert (f"GEMMs {world['gemm_ms']:.3g} ms against a weight floor of {world['floor_ms']:.3g} ms "
            "(4800 GB/s, spec)") in sentence
    assert "headroom at most" in sentence and "(all-reduce floor not measured)" in sentence
    # the advice for memory-bound GEMMs, then one experiment per lever, largest first, with its milliseconds
    led = next(r for r in ledger["ranks"] if r["rank"] == v["rank"])
    assert v["next"][0].startswith("the GEMMs read their weights at 78% of HBM bandwidth")
    levers = led["levers"]
    assert len(levers) == 3 and v["next"][2:] == [
        f"{LEVERS[lv['part']][0]}: {lv['recoverable_ms']:.2f} ms a step above its floor; {lv['next'][0]}"
        for lv in levers]
    assert levers[0]["part"] == "weights"  # the GEMMs' 22% above the floor is the largest part over its floor
    assert levers[0]["recoverable_ms"] == pytest.approx(world["gemm_ms"] - world["floor_ms"], abs=1e-3)


def test_without_a_checkpoint_batch_1_gemms_are_memory_bound_by_their_intensity(world):
    """Issue 30, point 6: the same trace was compute-bound without the checkpoint and memory-bound
    with it. One token a step: at most 4 FLOP per weight byte (4-bit weights), against the H200's
    ridge of 989 TFLOP/s (dense BF16) over 4800 GB/s."""
    summary = summarize([str(world["traces"])])
    assert summary["ledger"] is None
    v = summary["verdict"]
    ridge = 989e12 / 4800e9
    assert (v["kind"], v["category"]) == ("memory-bound", "gemm") and "gemm_kind" not in v["evidence"]
    ev = v["evidence"]
    assert (ev["gemm_bound_from"], ev["tokens_per_step"], ev["intensity_max_flop_per_byte"]) == ("intensity", 1, 4)
    assert ev["ridge_flop_per_byte"] == pytest.approx(ridge, abs=0.05)
    assert "memory_bound_factor" not in v["thresholds"]
    assert describe(v) == f"memory-bound (gemm: 1 token a step, at most 4 FLOP per weight byte against the H200's " \
                          f"ridge of {ridge:.0f})"
    sentence = verdict_sentence(summary)
    assert f"GEMMs {world['gemm_ms']:.3g} ms, their floor not measured (no checkpoint)" in sentence
    assert v["next"][-1].startswith("pass --checkpoint (the model's directory) for the GEMMs' floor")
    assert "decode ledger" not in to_markdown(summary)
    # the checkpoint's verdict agrees, and says more
    with_checkpoint = summarize([str(world["traces"])], SummaryOptions(checkpoint=str(world["model"])))
    assert with_checkpoint["verdict"]["kind"] == "memory-bound"


def test_the_steps_carry_their_context_lengths_and_the_kv_floor_reads_them(world):
    summary = summarize([str(world["traces"])], SummaryOptions(checkpoint=str(world["gqa"])))
    steady = [s for s in summary["ranks"][0]["steps"] if s["steady"]]
    assert steady and all(s["key_tokens"] == KEY_TOKENS for s in steady)  # the detailed annotation's sk
    kv = KEY_TOKENS * 2 * 2 * 128 * LAYERS * 2 / TP  # 2 KV heads of 128, K and V, bf16, one head per rank
    rank = summary["ledger"]["ranks"][0]
    # the reads hold the KV cache, but the step ran no attention kernel (norms, GEMMs, all-reduces only):
    # no KV-cache floor is charged beside kernels that were not seen (issue 30: 0.000 / 0.050 / -0.050)
    assert rank["reads"]["kv_cache"] == kv and rank["floors"]["kv_cache"] == 0.0
    assert "no attention kernel" in rank["not_charged"]["kv_cache"]
    kv_part = next(p for p in rank["parts"] if p["part"] == "kv_cache")
    assert (kv_part["measured_ms"], kv_part["floor_ms"], kv_part["above_floor_ms"]) == (0.0, 0.0, 0.0)
    assert "Not charged (floor 0), and why:" in to_markdown(summary)
    # a key_tokens given replaces the steps' (a step that reads no KV cache, whatever its name says)
    given = summarize([str(world["traces"])], SummaryOptions(checkpoint=str(world["gqa"]), key_tokens=0))
    assert given["ledger"]["ranks"][0]["floors"]["kv_cache"] == 0.0
    assert all(r["graph_launches_without_activity"] == 0 for r in summary["ranks"])


def test_the_checkpoint_as_a_record_file_or_a_capture(world, tmp_path, capsys):
    from vllm_ops_host.checkpoint import read_checkpoint

    record = read_checkpoint(str(world["model"]))
    (tmp_path / "record.json").write_text(json.dumps(record))
    (tmp_path / "capture.json").write_text(json.dumps({"id": "c1", "checkpoint": record}))
    want = summarize([str(world["traces"])], SummaryOptions(checkpoint=str(world["model"])))["ledger"]
    for source in (record, str(tmp_path / "record.json"), str(tmp_path / "capture.json")):
        assert summarize([str(world["traces"])], SummaryOptions(checkpoint=source))["ledger"] == want
    # the command line: JSON with the ledger, Markdown with its table
    assert main([str(world["traces"]), "--checkpoint", str(tmp_path / "capture.json")]) == 0
    assert json.loads(capsys.readouterr().out)["ledger"] == json.loads(json.dumps(want))
    assert main([str(world["traces"]), "--checkpoint", str(world["model"]), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "## The steady decode step against its floor (the decode ledger)" in out
    assert "Bandwidth (ranks 0, 1): 4800 GB/s, spec: the vendor's peak for the H200" in out
    weights = next(line for line in out.splitlines() if line.startswith("| weights: GEMM and MoE GEMM kernels |"))
    assert f"{world['gemm_ms']:.3f} / {world['floor_ms']:.3f} / {world['gemm_ms'] - world['floor_ms']:.3f}" in weights
    assert "| all-reduce transfer | 0.032 / - / - |" in out  # 4 calls of 8 µs, no floor given: not measured
    assert "- rank 0, allreduce: no all-reduce floor given" in out
    # bad input: one line, exit 2
    (tmp_path / "capture-without.json").write_text(json.dumps({"id": "c2", "checkpoint": None}))
    assert main([str(world["traces"]), "--checkpoint", str(tmp_path / "capture-without.json")]) == 2
    assert "the capture recorded no checkpoint" in capsys.readouterr().err
    with pytest.raises(LedgerInputError, match="not a checkpoint record"):
        summarize([str(world["traces"])], SummaryOptions(checkpoint={"tool": "something else"}))


def _degraded(gpu: int) -> list[dict]:
    """The finding of a capture whose GPU ``gpu`` link trained at x4 of x16 under load, ranks on GPUs 0, 1."""
    readings = [{"index": i, "bus_id": f"00000000:{0x18 + 0x12 * i:02X}:00.0", "gen_current": 5, "gen_max": 5,
                 "width_current": 4 if i == gpu else 16, "width_max": 16, "utilization_pct": 60} for i in range(TP)]
    capture = {"tensor_parallel_size": TP, "environment": {},
               "fabric": {"read": True, "during": "during the profiled requests", "samples": 2, "gpus": readings,
                          "compute_apps": [{"pid": 100 + i, "process_name": f"VLLM::Worker_TP{i}",
                                            "bus_id": readings[i]["bus_id"], "used_mib": 1000} for i in range(TP)]}}
    return fabric.findings(fabric.assess(capture))


def test_a_degraded_link_is_a_warning_evidence_and_the_first_step_for_its_rank(world):
    before = summarize([str(world["idle"])])
    v0 = before["verdict"]
    assert v0["kind"] == "host-bound"  # the GPU idles 3/4 of each step
    rank = v0["rank"]
    found = _degraded(rank)
    after = summarize([str(world["idle"])], SummaryOptions(fabric=found))
    v = after["verdict"]
    assert (v["kind"], v["rank"]) == (v0["kind"], rank)
    (link,) = v["evidence"]["pcie_link"]
    assert (link["gpu"], link["rank"], link["evidence"]["width_current"]) == (rank, rank, 4)
    assert v["next"] == fabric.advice_for_rank(found, rank) + v0["next"]  # first, then today's advice
    assert v["next"][0].startswith(f"check GPU {rank}'s link: nvidia-smi -q -i {rank}")
    said = f"PCIe link of GPU {rank} ({link['bus_id']}, rank {rank}) at x4 of x16"
    assert any(w.startswith(said) for w in after["warnings"]) and len(after["warnings"]) == len(before["warnings"]) + 1
    assert after["fabric"] == found
    assert said in to_markdown(after)  # the verdict's evidence, in words
    # a degraded link on the other rank is evidence and a warning, but not the host-bound rank's first step
    other = _degraded(1 - rank)
    v = summarize([str(world["idle"])], SummaryOptions(fabric=other))["verdict"]
    assert v["evidence"]["pcie_link"][0]["rank"] == 1 - rank and v["next"] == v0["next"]


def test_fabric_must_be_findings(world):
    from vllm_ops.traces import TraceInputError

    with pytest.raises(TraceInputError, match="fabric: expected"):
        summarize([str(world["traces"])], SummaryOptions(fabric=[{"kind": "nonsense"}]))


def test_gemms_faster_than_their_weights_allow_say_the_inputs_do_not_fit(world, tmp_path):
    # the checkpoint of a model four times as large: the GEMMs would have run above the bandwidth
    big = tmp_path / "big"
    big.mkdir()
    write_safetensors(big / "model.safetensors", [(n, d, [s[0] * 4, *s[1:]]) for n, d, s in _tensors()])
    (big / "config.json").write_text(json.dumps(_config()))
    summary = summarize([str(world["traces"])], SummaryOptions(checkpoint=str(big)))
    assert {r["gemm"]["kind"] for r in summary["ledger"]["ranks"]} == {"below-weight-floor"}
    assert summary["verdict"]["kind"] == "compute-bound"  # not memory-bound: the ledger does not fit the run
    assert sum("less than reading its weights" in w for w in summary["warnings"]) == TP


def test_the_ledger_leaves_the_figures_alone(world):
    with_ledger = copy.deepcopy(summarize([str(world["traces"])], SummaryOptions(checkpoint=str(world["model"]))))
    without = summarize([str(world["traces"])])
    for key in ("ranks", "collectives", "pace", "steady_state", "allreduce", "coverage"):
        assert with_ledger[key] == without[key], key


def test_gemms_below_their_floor_get_no_negative_headroom(world):
    """A checkpoint twice the size the GEMMs can have read (TP 1 claimed for a TP-2 trace): the
    weights part is below its floor and the floors exceed the period; neither is a negative figure."""
    summary = summarize([str(world["traces"])], SummaryOptions(checkpoint=str(world["model"]),
                                                               context={"tensor_parallel_size": 1}))
    for rank in summary["ledger"]["ranks"]:
        assert rank["floors"]["weights"] == pytest.approx(2 * world["floor_ms"], abs=1e-4)
        weights = next(p for p in rank["parts"] if p["part"] == "weights")
        assert weights["measured_ms"] < weights["floor_ms"] and weights["above_floor_ms"] is None
        assert "below its floor" in rank["not_measured"]["weights_above_floor"]
        assert rank["headroom_ms"] is None and rank["headroom_at_most_ms"] is None
        assert "exceed the period" in rank["not_measured"]["headroom"]
        assert all(p["above_floor_ms"] is None or p["above_floor_ms"] >= 0 for p in rank["parts"])


ADVICE_FOR_OTHER_MODELS = ("Marlin", "W4A16", "MoE", "quantiz", "all-reduce + norm", "expert")


def test_a_dense_bf16_tp1_checkpoint_gets_advice_that_fits_it(world, tmp_path):
    """Issue 30, point 6: no Marlin W4A16, MoE, quantized-kernel or all-reduce-fusion advice for a
    dense bf16 model on one GPU; the checkpoint's record says dense and bf16, the trace TP 1."""
    floor_ms = 2 * world["weights"] / (SPEC_GBPS * 1e9) * 1e3  # TP 1: one GPU reads every weight
    gemm_us = floor_ms * 1e3 / SHARE
    kernels = [k for _ in range(LAYERS) for k in (("rms_norm_kernel", 40 * NORM_US),
                                                  ("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNT", gemm_us / LAYERS))]
    window = sum(d for _, d in kernels)
    (tmp_path / "tp1").mkdir()
    decode_trace(tmp_path / "tp1" / "rank0.pt.trace.json.gz", rank=0, world=1, steps=6, period_us=2 * window,
                 kernels=kernels, key_tokens=KEY_TOKENS, device=H200)
    summary = summarize([str(tmp_path / "tp1")], SummaryOptions(checkpoint=str(world["model"])))
    model = summary["context"]["model"]
    assert (model["moe"], model["quantized"], model["tensor_parallel_size"]) == (False, False, 1)
    assert model["from"] == {"moe": "checkpoint", "quantized": "checkpoint"}
    v = summary["verdict"]
    (rank,) = summary["ledger"]["ranks"]
    assert {lv["part"] for lv in rank["levers"]} >= {"weights", "other_kernels"}  # the levers those texts were on
    advice = v["next"] + [text for lv in rank["levers"] for text in lv["next"]]
    shown = to_markdown(summary)
    for words in ADVICE_FOR_OTHER_MODELS:
        assert not any(words in text for text in advice), words
        assert words not in shown.split("Next experiments:")[1].split("Hardware as")[0], words
    weights = next(lv for lv in rank["levers"] if lv["part"] == "weights")
    assert weights["next"] == ["more tokens per step for the same weights (more concurrency, speculative decoding)"]
    # the same levers where nothing is known of the model keep every experiment (advice is dropped on evidence)
    from vllm_ops.ledger import decode_ledger, load_checkpoint

    unknown = decode_ledger(summary, load_checkpoint(str(world["model"])), tensor_parallel_size=1, facts={})
    texts = [t for lv in unknown["ranks"][0]["levers"] for t in lv["next"]]
    assert any("Marlin W4A16" in t for t in texts) and any("all-reduce + norm" in t for t in texts)
