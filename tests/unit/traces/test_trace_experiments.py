"""The verdict's next experiments as data (``next_tests``): what runs each, valid as any variant,
in step with the example experiment files, and the ledger's milliseconds where there is one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from vllm_ops import validate
from vllm_ops.experiment.sweep import expand
from vllm_ops.traces import SummaryOptions, summarize
from vllm_ops.traces.experiments import NCCL_SWEEP, TESTS, data_form, sweep_words, with_ledger
from vllm_ops.traces.verdict import _advice, advise, judge

ROOT = Path(__file__).resolve().parents[3]
H200 = ROOT / "tests" / "data" / "traces" / "h200_tp2_decode"


def _variants(entry):
    return [*entry["variants"], *expand(entry["sweeps"])] if entry["sweeps"] else list(entry["variants"])


@pytest.mark.parametrize("name", sorted(TESTS))
def test_every_test_is_a_valid_variant_list(name):
    variants = _variants(data_form("x", name))
    assert variants, name
    assert validate.variant_errors("next_tests", variants, {"NCCL_PROTO": "LL"}, server=True) == []


def test_the_nccl_sweep_is_the_example_file_s_six_variants():
    example = yaml.safe_load((ROOT / "examples/experiments/nccl-sweep.yml").read_text())
    assert example["vllm_experiment_sweeps"] == [NCCL_SWEEP]
    names = [v["name"] for v in expand([NCCL_SWEEP])]
    assert len(names) == 6 and names[0] == "nccl:NCCL_PROTO=LL,NCCL_MAX_NCHANNELS=8"
    assert sweep_words() == "NCCL_PROTO LL / LL128 / Simple x NCCL_MAX_NCHANNELS 8 / 16"


def test_the_all_reduce_paths_are_the_example_file_s():
    example = yaml.safe_load((ROOT / "examples/experiments/allreduce-paths.yml").read_text())
    ours = [{k: v for k, v in variant.items() if v} for variant in TESTS["allreduce-paths"]["variants"]]
    assert ours == example["vllm_experiment_variants"]


def test_an_experiment_that_is_no_variant_has_no_data_and_an_unknown_test_is_refused():
    assert data_form("check the clocks", None) == {"text": "check the clocks", "test": None, "variants": [],
                                                   "sweeps": [], "ledger_part": None, "expected_ms": None}
    with pytest.raises(KeyError, match="no test named 'bogus'"):
        data_form("x", "bogus")
    # a copy: changing it leaves the catalogue alone
    form = data_form("x", "cuda-graphs")
    form["variants"][0]["extra_args"].append("--more")
    assert TESTS["cuda-graphs"]["variants"][0]["extra_args"] == ["--no-enforce-eager"]


def _comm_verdict(context, ratio=None):
    return {"kind": "communication-bound", "rank": None, "category": None,
            "evidence": {"allreduce_floor_ratio": ratio}}


@pytest.mark.parametrize(("context", "ratio", "tests"), [
    ({"interconnect": "pcie", "tensor_parallel_size": 8}, None, ["nccl-sweep", "speculative"]),
    ({"interconnect": "pcie"}, 2.4, ["nccl-sweep", "speculative"]),
    ({"interconnect": "pcie"}, 1.1, ["speculative", None]),
    ({"interconnect": "nvlink"}, None, ["allreduce-paths", "speculative"]),
    ({"interconnect": "pcie", "engine": "sglang"}, None, [None, None]),
])
def test_communication_bound_advice_carries_its_tests(context, ratio, tests):
    pairs = _advice(_comm_verdict(context, ratio), context)
    assert [t for _, t in pairs] == tests
    assert [text for text, _ in pairs] == advise(_comm_verdict(context, ratio), context)


def test_the_text_of_the_nccl_sweep_names_the_sweep_its_data_runs():
    (text, test), _ = _advice(_comm_verdict({"interconnect": "pcie"}), {"interconnect": "pcie"})
    assert test == "nccl-sweep" and "NCCL_PROTO LL / LL128 / Simple x NCCL_MAX_NCHANNELS 8 / 16" in text


def test_a_host_bound_verdict_plans_host_side_changes_and_no_nccl_sweep():
    """The real H200 pair: host-bound on rank 1, no CUDA graph launched."""
    v = summarize([str(H200)], SummaryOptions(decode_pattern="^decode_step$"))["verdict"]
    assert v["kind"] == "host-bound" and len(v["next_tests"]) == len(v["next"])
    assert [t["text"] for t in v["next_tests"]] == v["next"]
    assert [t["test"] for t in v["next_tests"]] == ["cuda-graphs", None]  # graphs first: both hosts are slow
    assert v["next_tests"][0]["variants"] == [{"name": "cuda-graphs", "environment": {},
                                               "extra_args": ["--no-enforce-eager"]}]
    assert not any(t["sweeps"] for t in v["next_tests"])
    assert json.loads(json.dumps(v)) == v  # JSON as it is


def test_a_verdict_without_advice_has_no_tests():
    v = judge({}, None, {}, missing="no decode steps")
    assert v["next"] and v["next_tests"] == [data_form(v["next"][0], None)]


LEDGER_TOP = {"levers": [{"part": "allreduce_transfer", "recoverable_ms": 4.25},
                         {"part": "gpu_idle", "recoverable_ms": 1.5}]}
LEDGER_RANKS = {"ranks": [
    {"rank": 0, "levers": [{"part": "allreduce_transfer", "recoverable_ms": 3.0}],
     "parts": [{"part": "host", "above_floor_ms": 0.75}, {"part": "gpu_idle", "above_floor_ms": -0.1}]},
    {"rank": 1, "levers": [{"part": "allreduce_transfer", "recoverable_ms": 5.5}],
     "parts": [{"part": "host", "above_floor_ms": 2.0}]}]}


def test_the_ledger_gives_what_a_test_could_recover_and_nothing_else():
    tests = [data_form("a", "nccl-sweep"), data_form("b", "speculative"), data_form("c", "cuda-graphs"),
             data_form("d", "async-scheduling")]
    top = with_ledger(tests, LEDGER_TOP)
    assert [t["expected_ms"] for t in top] == [4.25, None, 1.5, None]
    per_rank = with_ledger(tests, LEDGER_RANKS)
    # a lever beats a part; the largest over the ranks; a part below its floor recovers 0
    assert [t["expected_ms"] for t in per_rank] == [5.5, None, 0.0, 2.0]
    assert [t["expected_ms"] for t in with_ledger(tests, LEDGER_RANKS, rank=0)] == [3.0, None, 0.0, 0.75]
    assert with_ledger(tests, None) == tests
