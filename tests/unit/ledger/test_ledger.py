"""The decode ledger (vllm_ops.ledger.decode_ledger) on a synthetic two-rank trace whose kernel times
the test sets against the bytes of the synthetic checkpoint it wrote; every figure is recomputed here
from the rule written out in the test:

    weight floor = (always + shared + routed x E(1 - (1 - k/E)^B) / E-per-layer + B rows + LM head) / TP / bandwidth
    KV floor     = key tokens x (kv_lora_rank + qk_rope_head_dim) x layers x 2 bytes / bandwidth   (MLA: whole per rank)
    all-reduce   = calls per step x the floor at the message size (log-log between the sizes measured)
    headroom     = period - the three floors; above floor = measured - floor, per part
"""

from __future__ import annotations

import copy
import math

import pytest

from vllm_ops.ledger import LEVERS, MEMORY_BOUND_FACTOR, LedgerInputError, decode_ledger, describe
from vllm_ops.records import RecordError
from vllm_ops.traces import summarize
from vllm_ops_host.checkpoint import read_checkpoint, unreadable

from ledger_helpers import DENSE, EXPERTS, HEADS, HIDDEN, KV_LORA, LAYERS, PER_TOKEN, ROPE, decode_trace, moe_checkpoint

TP, BATCH, PERIOD_US = 2, 2, 8000.0
GEMM_US, MOE_US, ATTN_US, NORM_US, AR_US = 1000.0, 600.0, 500.0, 80.0, 20.0
KERNELS = [("nvjet_sm90_tst_128x8_64x12_4x1_v_bz_TNT", GEMM_US), ("marlin_moe_wna16::Marlin<half>", MOE_US),
           ("flash_fwd_splitkv_mla_kernel", ATTN_US), ("rms_norm_kernel", NORM_US),
           ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", AR_US),
           ("rms_norm_kernel", NORM_US),
           ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", AR_US)]
GEMM_SHARE = 0.78  # the GEMMs are set to run at 78% of the bandwidth
ATTN_SHARE = 0.8


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The checkpoint, the bandwidth that puts the GEMMs at 78% of it, the two ranks' summary."""
    tmp = tmp_path_factory.mktemp("ledger")
    built = moe_checkpoint(tmp / "kimi", stray=False)
    record = read_checkpoint(str(built.directory))
    routed = sum(built.expert_bytes(layer, 0) * EXPERTS * (1 - (1 - PER_TOKEN / EXPERTS) ** BATCH)
                 for layer in range(DENSE, LAYERS))
    weights = (built.part_bytes("always") + built.part_bytes("shared_experts") + routed + BATCH * HIDDEN * 2
               + built.part_bytes("lm_head")) / TP
    gemm_s = (GEMM_US + MOE_US) * 1e-6
    gbps = weights / (GEMM_SHARE * gemm_s) / 1e9  # weight floor = 78% of the GEMM time
    kv_per_token = (KV_LORA + ROPE) * LAYERS * 2
    key_tokens = round(ATTN_SHARE * ATTN_US * 1e-6 * gbps * 1e9 / kv_per_token)
    (tmp / "traces").mkdir()
    for rank in range(TP):
        decode_trace(tmp / "traces" / f"tp2_rank{rank}.pt.trace.json.gz", rank=rank, world=TP, steps=6,
                     period_us=PERIOD_US, kernels=KERNELS, batch=BATCH, key_tokens=key_tokens,
                     allreduce=(HIDDEN, "BFloat16"))
    floor = {"tool": "allreduce_bench", "schema": 1, "backend": "nccl", "world_size": TP, "gpu_name": "Test GPU",
             "sizes": [{"bytes": 64, "median_us": 4.0}, {"bytes": 256, "median_us": 6.0}],
             "device_copy": {"bytes": 1 << 30, "hbm_gbps": gbps, "hbm_gbps_by_rank": [gbps, gbps],
                             "timing": "synthetic"}}
    return {"record": record, "summary": summarize([str(tmp / "traces")]), "floor": floor, "gbps": gbps,
            "weights": weights, "key_tokens": key_tokens, "kv_bytes": key_tokens * kv_per_token,
            # 128 bytes (64 bf16) lies halfway between 64 and 256 on a log scale: sqrt(4 x 6) µs per call
            "ar_floor_ms": 2 * math.sqrt(4.0 * 6.0) / 1000}


def ms(nbytes, gbps):
    return nbytes / (gbps * 1e9) * 1e3


def test_the_ledger_of_each_rank(world):
    ledger = decode_ledger(world["summary"], world["record"], allreduce_floor=world["floor"],
                           key_tokens=world["key_tokens"])
    assert ledger["tensor_parallel_size"] == TP and [r["rank"] for r in ledger["ranks"]] == [0, 1]
    weights_ms, kv_ms = ms(world["weights"], world["gbps"]), ms(world["kv_bytes"], world["gbps"])
    total = weights_ms + kv_ms + world["ar_floor_ms"]
    for rank in ledger["ranks"]:
        assert rank["bandwidth"]["source"] == "measured" and rank["bandwidth"]["gbps"] == world["gbps"]
        assert rank["reads"]["tokens"] == BATCH and rank["reads"]["weights"] == round(world["weights"])
        assert rank["floors"] == pytest.approx({"weights": weights_ms, "kv_cache": kv_ms,
                                                "allreduce": world["ar_floor_ms"], "total": total}, abs=1e-4)
        measured = {"weights": (GEMM_US + MOE_US) / 1e3, "kv_cache": ATTN_US / 1e3, "other_kernels": 2 * NORM_US / 1e3,
                    "allreduce_transfer": 2 * AR_US / 1e3, "allreduce_wait": 0.0, "gpu_idle": 0.0,
                    "host": (PERIOD_US - sum(d for _, d in KERNELS)) / 1e3}
        floors = {"weights": weights_ms, "kv_cache": kv_ms, "allreduce_transfer": world["ar_floor_ms"]}
        for part in rank["parts"]:
            want = measured[part["part"]]
            floor = floors.get(part["part"], 0.0)
            assert part["measured_ms"] == pytest.approx(want, abs=1e-4), part
            assert part["floor_ms"] == pytest.approx(floor, abs=1e-4), part
            assert part["above_floor_ms"] == pytest.approx(want - floor, abs=2e-4), part
        # the parts add up to the step's period, so the headroom is the period less the floors
        assert sum(measured.values()) == pytest.approx(PERIOD_US / 1e3)
        assert rank["headroom_ms"] == pytest.approx(PERIOD_US / 1e3 - total, abs=1e-4)
        assert rank["headroom_share"] == pytest.approx(1 - total / (PERIOD_US / 1e3), abs=1e-4)
        assert rank["headroom_at_most_ms"] is None and rank["not_measured"] == {}
        # GEMMs at 78% of the bandwidth: within the factor of the floor, so memory-bound
        gemm = rank["gemm"]
        assert gemm["kind"] == "memory-bound" and gemm["hbm_share"] == pytest.approx(GEMM_SHARE, abs=1e-4)
        assert gemm["factor"] == pytest.approx(1 / GEMM_SHARE, abs=1e-3) and gemm["factor"] <= MEMORY_BOUND_FACTOR
        # the three parts furthest above their floor, largest first: host, GEMMs, the norms
        above = sorted(((measured[p] - floors.get(p, 0.0), p) for p in measured), reverse=True)
        assert [lv["part"] for lv in rank["levers"]] == [p for _, p in above[:3]] == ["host", "weights",
                                                                                      "other_kernels"]
        for lever in rank["levers"]:
            table = [text for text, _needs in LEVERS[lever["part"]][1]]
            assert lever["next"] and all(t in table for t in lever["next"]) and lever["recoverable_ms"] > 0
        line = describe(rank)
        assert "GEMMs at 78% of HBM bandwidth" in line and "memory-bound" in line
    assert any("uniform routing" in s for s in ledger["blind_spots"])  # batch 2 of a MoE model
    assert any("fused kernels" in s for s in ledger["blind_spots"])


def test_context_lengths_per_step_are_averaged(world):
    summary = copy.deepcopy(world["summary"])
    keys = [1000, 2000, 3000, 4000]
    for r in summary["ranks"]:
        steady = [s for s in r["steps"] if s["phase"] == "decode" and s["steady"] and s["period_ms"] is not None]
        assert len(steady) == len(keys)
        for s, k in zip(steady, keys, strict=True):
            s["key_tokens"] = k  # as the summary will carry it, from the detailed annotation's sk
    ledger = decode_ledger(summary, world["record"], allreduce_floor=world["floor"])
    kv = sum(keys) / len(keys) * (KV_LORA + ROPE) * LAYERS * 2
    assert ledger["ranks"][0]["reads"]["kv_cache"] == round(kv)
    assert ledger["ranks"][0]["floors"]["kv_cache"] == pytest.approx(ms(kv, world["gbps"]), abs=1e-4)


def test_without_the_context_lengths_the_kv_floor_is_not_measured(world):
    summary = copy.deepcopy(world["summary"])
    for r in summary["ranks"]:
        for s in r["steps"]:
            s["key_tokens"] = None  # as vLLM's native step annotation leaves it: no sk
    rank = decode_ledger(summary, world["record"], allreduce_floor=world["floor"])["ranks"][0]
    assert rank["floors"]["kv_cache"] is None and rank["floors"]["total"] is None and rank["headroom_ms"] is None
    known = ms(world["weights"], world["gbps"]) + world["ar_floor_ms"]
    assert rank["headroom_at_most_ms"] == pytest.approx(PERIOD_US / 1e3 - known, abs=1e-4)
    assert "detailed_trace_annotation" in rank["not_measured"]["kv_cache"]
    kv_part = next(p for p in rank["parts"] if p["part"] == "kv_cache")
    assert kv_part["measured_ms"] == ATTN_US / 1e3 and kv_part["above_floor_ms"] is None
    assert "kv_cache" not in [lv["part"] for lv in rank["levers"]]
    assert "floor not measured (kv_cache), headroom at most" in describe(rank)


def test_kernels_replayed_from_graphs_without_records_are_not_measured(world):
    summary = copy.deepcopy(world["summary"])
    summary["ranks"][0]["graph_launches_without_activity"] = 12
    ledger = decode_ledger(summary, world["record"], allreduce_floor=world["floor"], key_tokens=world["key_tokens"])
    r0, r1 = ledger["ranks"]
    parts = {p["part"]: p for p in r0["parts"]}
    assert all(parts[p]["measured_ms"] is None and parts[p]["above_floor_ms"] is None
               for p in ("weights", "kv_cache", "other_kernels"))
    assert r0["gemm"]["kind"] == "not measured" and "CUDA graphs" in r0["gemm"]["why"]
    assert r0["headroom_ms"] == r1["headroom_ms"] is not None  # the floors do not need the kernels
    assert r1["gemm"]["kind"] == "memory-bound"
    assert any("CUDA graphs without per-kernel records" in s for s in ledger["blind_spots"])
    # a summary written before the ranks carried the count: the verdict's reason says it for the whole group
    summary = copy.deepcopy(world["summary"])
    for r in summary["ranks"]:
        del r["graph_launches_without_activity"]
    summary["verdict"]["reason"] = "CUDA graph launches without recorded kernels: the trace misses ..."
    ledger = decode_ledger(summary, world["record"], allreduce_floor=world["floor"], key_tokens=0)
    assert [r["gemm"]["kind"] for r in ledger["ranks"]] == ["not measured", "not measured"]


# memory-bound down to 1 / MEMORY_BOUND_FACTOR of the bandwidth (50%), below the floor past 110%
@pytest.mark.parametrize(("share", "kind"), [(0.3, "above-weight-floor"), (0.48, "above-weight-floor"),
                                             (0.52, "memory-bound"), (1.05, "memory-bound"),
                                             (1.2, "below-weight-floor")])
def test_the_gemms_against_the_weight_floor(world, share, kind):
    # a bandwidth that puts the weight floor at `share` of the GEMM time
    gbps = world["weights"] / (share * (GEMM_US + MOE_US) * 1e-6) / 1e9
    bandwidth = {"gbps": gbps, "source": "spec", "how": "test"}
    rank = decode_ledger(world["summary"], world["record"], bandwidth=bandwidth, key_tokens=0)["ranks"][0]
    assert rank["gemm"]["kind"] == kind and rank["gemm"]["hbm_share"] == pytest.approx(share, abs=1e-4)
    assert ("spec" in describe(rank)) and (kind != "below-weight-floor" or "check the inputs" in describe(rank))


def test_what_is_missing_is_said_never_guessed(world):
    bare = decode_ledger(world["summary"])["ranks"][0]
    assert bare["reads"] is None and bare["floors"]["total"] is None
    assert "no checkpoint given" in bare["not_measured"]["reads"]
    assert "no all-reduce floor given" in bare["not_measured"]["allreduce"]
    assert "not in the table of known GPUs" in bare["not_measured"]["bandwidth"]  # "Test GPU"
    assert bare["headroom_at_most_ms"] == PERIOD_US / 1e3  # nothing known to subtract
    assert bare["gemm"]["kind"] == "not measured" and [lv["part"] for lv in bare["levers"]][:1] == ["host"]

    one_rank = dict(world["floor"], world_size=1)
    rank = decode_ledger(world["summary"], world["record"], allreduce_floor=one_rank, key_tokens=0)["ranks"][0]
    assert "one rank" in rank["not_measured"]["allreduce"] and rank["floors"]["allreduce"] is None

    error = decode_ledger(world["summary"], unreadable("/srv/m", "a model given by name"),
                          allreduce_floor=world["floor"])["ranks"][0]
    assert error["not_measured"]["checkpoint"] == "a model given by name" and error["floors"]["weights"] is None


def test_a_rank_without_gpu_kernels(world):
    summary = copy.deepcopy(world["summary"])
    summary["ranks"][1].update(gpu_time_measured=False, decomposition=None)
    r1 = decode_ledger(summary, world["record"], allreduce_floor=world["floor"], key_tokens=0)["ranks"][1]
    assert r1["parts"] == [] and r1["headroom_ms"] is None and r1["gemm"]["kind"] == "not measured"
    assert r1["not_measured"]["step"] == "no GPU kernel events in the rank's trace"


def test_what_is_no_summary_is_refused_by_the_summary_record():
    with pytest.raises(RecordError, match=r"the summary: unknown field\(s\) traceEvents; a trace summary has "):
        decode_ledger({"traceEvents": []})


@pytest.mark.parametrize(("summary", "kwargs", "message"), [
    ({"ranks": []}, {}, "tensor_parallel_size: the summary gives none"),
    ({"ranks": [], "world_size": 2}, {"key_tokens": -1}, "key_tokens must be a non-negative integer"),
    ({"ranks": [], "world_size": 2}, {"checkpoint": {"tool": "x"}}, "not a checkpoint record"),
])
def test_bad_input(summary, kwargs, message):
    with pytest.raises(LedgerInputError, match=message):
        decode_ledger(summary, **kwargs)


@pytest.mark.parametrize(("tp", "refused"), [(1, False), (2, False), (4, False), (3, True), (8, True)])
def test_a_tp_size_that_does_not_divide_the_heads_is_refused(world, tp, refused):
    # The synthetic checkpoint has HEADS (4) attention heads: vLLM starts only where the ranks split them whole.
    assert world["record"]["model"]["num_attention_heads"] == HEADS == 4
    if refused:
        with pytest.raises(LedgerInputError, match=rf"^tensor_parallel_size {tp} contradicts the model: its "
                                                   rf"config.json gives 4 attention heads"):
            decode_ledger(world["summary"], world["record"], tensor_parallel_size=tp, key_tokens=0)
    else:
        assert decode_ledger(world["summary"], world["record"], tensor_parallel_size=tp,
                             key_tokens=0)["tensor_parallel_size"] == tp


def test_a_record_without_the_heads_is_not_checked(world):
    # capture.json records written before the heads were kept, and a model without attention (the sandbox's)
    for heads in (None, 0):
        record = copy.deepcopy(world["record"])
        record["model"]["num_attention_heads"] = heads
        ledger = decode_ledger(world["summary"], record, tensor_parallel_size=3, key_tokens=0)
        assert ledger["tensor_parallel_size"] == 3
