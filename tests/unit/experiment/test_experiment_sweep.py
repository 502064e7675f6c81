"""Sweep expansion (order, names, options) and the fleet's round-robin assignment."""

import pytest

from vllm_ops.experiment import ExperimentInputError, assign, expand


def test_cartesian_product_in_the_order_given():
    got = expand([{"environment": {"NCCL_PROTO": ["LL", "LL128"], "NCCL_MAX_NCHANNELS": [8, 16],
                                   "NCCL_DEBUG": "WARN"}}])
    assert [v["name"] for v in got] == [
        "NCCL_PROTO=LL,NCCL_MAX_NCHANNELS=8", "NCCL_PROTO=LL,NCCL_MAX_NCHANNELS=16",
        "NCCL_PROTO=LL128,NCCL_MAX_NCHANNELS=8", "NCCL_PROTO=LL128,NCCL_MAX_NCHANNELS=16"]
    assert got[2] == {"name": "NCCL_PROTO=LL128,NCCL_MAX_NCHANNELS=8",
                      "environment": {"NCCL_PROTO": "LL128", "NCCL_MAX_NCHANNELS": "8", "NCCL_DEBUG": "WARN"},
                      "extra_args": []}


def test_options_flags_prefix_and_fixed_settings():
    got = expand({"name": "sched", "options": {"--max-num-seqs": [64, 128], "--enforce-eager": [True, False],
                                               "--block-size": 32},
                  "extra_args": ["--trust-remote-code"], "fixed_environment": {"VLLM_LOGGING_LEVEL": "INFO"}})
    assert [v["name"] for v in got] == [
        "sched:max-num-seqs=64,enforce-eager", "sched:max-num-seqs=64,enforce-eager=off",
        "sched:max-num-seqs=128,enforce-eager", "sched:max-num-seqs=128,enforce-eager=off"]
    assert got[0]["extra_args"] == ["--trust-remote-code", "--max-num-seqs", "64", "--enforce-eager",
                                    "--block-size", "32"]
    assert got[1]["extra_args"] == ["--trust-remote-code", "--max-num-seqs", "64", "--block-size", "32"]
    assert all(v["environment"] == {"VLLM_LOGGING_LEVEL": "INFO"} for v in got)


def test_several_sweeps_and_a_scalar_only_sweep():
    got = expand([{"options": {"--max-num-seqs": [64]}}, {"environment": {"NCCL_ALGO": "Tree"}}])
    assert [v["name"] for v in got] == ["max-num-seqs=64", "NCCL_ALGO=Tree"]


def test_names_are_clean_and_bounded():
    got = expand({"options": {"--speculative-config": ['{"method": "ngram"}']}})
    assert got[0]["name"] == "speculative-config=_method_:_ngram_"  # ":" is allowed
    assert got[0]["extra_args"] == ["--speculative-config", '{"method": "ngram"}']
    long = expand({"environment": {"X": ["a" * 200, "b" * 200]}})
    assert all(len(v["name"]) == 128 for v in long) and long[0]["name"] != long[1]["name"]
    import re

    assert all(re.fullmatch(r"[A-Za-z0-9._=,+:-]+", v["name"]) for v in long + got)


@pytest.mark.parametrize(("sweeps", "message"), [
    ([{"environment": {"NCCL_PROTO": []}}], r"sweep 1: environment 'NCCL_PROTO' has an empty list of values"),
    ([{"envirnoment": {"A": [1]}}], r"sweep 1: unknown key 'envirnoment'; a sweep has only name, environment"),
    ([{"environment": {"A": [1]}}, {"environment": {"A": [1, 2]}}],
     r"sweep 2: variant name 'A=1' is also produced by sweep 1"),
    ([{"options": {"max-num-seqs": [1]}}], r"option 'max-num-seqs' must be a flag"),
    ([{"environment": {"1BAD": [1]}}], r"environment variable name '1BAD' is not valid"),
    ([{"environment": {"A": {"x": 1}}}], r"must be a list of values or a scalar"),
    ([{}], r"the sweep sets nothing"),
    ("x", r"sweeps must be a list"),
])
def test_errors(sweeps, message):
    with pytest.raises(ExperimentInputError, match=message):
        expand(sweeps)


def test_assign_round_robin_over_sorted_hosts():
    variants = [{"name": f"v{i}"} for i in range(7)]
    hosts = ["h3", "h1", "h2"]
    assert [v["name"] for v in assign(variants, hosts, "h1")] == ["v0", "v3", "v6"]
    assert [v["name"] for v in assign(variants, hosts, "h2")] == ["v1", "v4"]
    assert [v["name"] for v in assign(variants, hosts, "h3")] == ["v2", "v5"]
    with pytest.raises(ExperimentInputError, match="host 'h9' is not in the host list"):
        assign(variants, hosts, "h9")
    with pytest.raises(ExperimentInputError, match="names a host twice"):
        assign(variants, ["h1", "h1"], "h1")
