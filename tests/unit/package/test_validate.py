"""vllm_ops.validate: each bad variable is named with what is allowed."""

from pathlib import Path

import pytest
import yaml

from vllm_ops.experiment.sweep import expand
from vllm_ops.validate import settings_errors, variant_errors

GOOD = {
    "vllm_model_path": "/models/Kimi-K2.5-INT4",
    "vllm_executable": "/opt/vllm/venv/bin/vllm",
    "vllm_port": 8000,
    "vllm_tensor_parallel_size": 8,
    "vllm_gpu_memory_utilization": 0.95,
    "vllm_max_model_len": 131072,
    "vllm_environment": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_MAX_NCHANNELS": 16},
    "vllm_profiling_trace_dir": "/var/lib/vllm/traces",
    "vllm_profiler_config": {"torch_profiler_with_stack": False},
    "vllm_health_timeout_s": 2400,
}


def with_(**changes):
    settings = dict(GOOD)
    settings.update(changes)
    return settings


def test_production_settings_are_valid():
    assert settings_errors(GOOD) == []


@pytest.mark.parametrize("proto", ["LL", "LL128", "Simple", "simple", "LL,LL128", "^LL128"])
def test_valid_nccl_protocols(proto):
    assert settings_errors(with_(vllm_environment={"NCCL_PROTO": proto})) == []


@pytest.mark.parametrize("proto", ["LLX", "", "Ring", "LL,,Simple"])
def test_invalid_nccl_protocol_names_the_variable_and_the_choices(proto):
    (error,) = settings_errors(with_(vllm_environment={"NCCL_PROTO": proto}))
    assert "vllm_environment.NCCL_PROTO" in error
    assert "LL, LL128, Simple" in error


def test_invalid_nccl_algo():
    (error,) = settings_errors(with_(vllm_environment={"NCCL_ALGO": "Butterfly"}))
    assert "NCCL_ALGO" in error and "Ring, Tree" in error


@pytest.mark.parametrize("channels", [0, -1, "x", 65])
def test_invalid_nccl_channels(channels):
    (error,) = settings_errors(with_(vllm_environment={"NCCL_MAX_NCHANNELS": channels}))
    assert "NCCL_MAX_NCHANNELS" in error


@pytest.mark.parametrize("tp", [0, -8, "eight", 2.5, True])
def test_tensor_parallel_size_must_be_a_positive_integer(tp):
    (error,) = settings_errors(with_(vllm_tensor_parallel_size=tp))
    assert error.startswith("vllm_tensor_parallel_size is ")
    assert "positive integer" in error


def test_missing_model_path():
    (error,) = settings_errors(with_(vllm_model_path=""))
    assert "vllm_model_path is not set" in error


@pytest.mark.parametrize("path", ["traces", "./traces", ""])
def test_trace_dir_must_be_absolute(path):
    (error,) = settings_errors(with_(vllm_profiling_trace_dir=path))
    assert "vllm_profiling_trace_dir" in error and "absolute" in error


@pytest.mark.parametrize("value", [0, 1.5, "high", None])
def test_gpu_memory_utilization_range(value):
    (error,) = settings_errors(with_(vllm_gpu_memory_utilization=value))
    assert "vllm_gpu_memory_utilization" in error


def test_port_range():
    (error,) = settings_errors(with_(vllm_port=70000))
    assert "from 1 to 65535" in error


def test_secrets_are_refused_in_the_plain_environment():
    (error,) = settings_errors(with_(vllm_environment={"HF_TOKEN": "hf_x"}))
    assert "vllm_hf_token" in error
    assert "hf_x" not in error


def test_profiler_config_must_not_set_the_fields_the_role_owns():
    (error,) = settings_errors(with_(vllm_profiler_config={"torch_profiler_dir": "/tmp"}))
    assert "torch_profiler_dir" in error


def test_bad_environment_names():
    (error,) = settings_errors(with_(vllm_environment={"1BAD": "x"}))
    assert "1BAD" in error


# --- Variants: {name, environment}, checked like vllm_environment ---


def test_good_variants_pass():
    assert variant_errors("v", [{"name": "LL128", "environment": {"NCCL_PROTO": "LL128"}},
                                {"name": "ring.16-ch", "environment": {"NCCL_MAX_NCHANNELS": "16"}}]) == []


@pytest.mark.parametrize("variants, expected", [
    ("LL128", "v is 'LL128': it must be a list of {name, environment} mappings."),
    (["LL128"], "v[0] is 'LL128': it must be a mapping with name and environment."),
    ([{"name": "a b", "environment": {"NCCL_PROTO": "LL"}}],
     "v[0].name is 'a b': use letters, digits, '.', '_' and '-' (it names files)."),
    ([{"name": "x", "environment": {}}], "v[x].environment is empty: a variant changes at least one variable."),
    ([{"name": "x", "environment": {"NCCL_PROTO": "LLX"}}],
     "v[x].environment.NCCL_PROTO is 'LLX': allowed values are LL, LL128, Simple"),
    ([{"name": "x", "environment": {"NCCL_MAX_NCHANNELS": 65}}],
     "v[x].environment.NCCL_MAX_NCHANNELS is 65: allowed values are from 1 to 64."),
    ([{"name": "x", "environment": {"HF_TOKEN": "t"}}], "v[x].environment holds HF_TOKEN"),
    ([{"name": "x", "env": {"NCCL_PROTO": "LL"}}], "v[x] has unknown keys env: a variant has name and environment."),
])
def test_bad_variants_are_named(variants, expected):
    errors = variant_errors("v", variants)
    assert any(e.startswith(expected) for e in errors), errors


def test_a_variant_name_used_twice_is_refused():
    twice = [{"name": "LL", "environment": {"NCCL_PROTO": "LL"}}, {"name": "LL", "environment": {"NCCL_PROTO": "LL"}}]
    assert variant_errors("v", twice) == ["v[1].name 'LL' is used twice: each variant needs its own name."]


def test_extra_args_may_not_set_the_profiler_config_the_role_owns():
    for args in (["--profiler-config", "{}"], ["--profiler-config={}"], ["--profiler-config.profiler", "torch"]):
        assert settings_errors(with_(vllm_extra_args=args)) == [
            "vllm_extra_args sets --profiler-config, which the role sets itself (vllm_profiling_enabled, "
            "vllm_profiler_armed, vllm_profiler_config): remove it."]
    assert settings_errors(with_(vllm_extra_args=["--middleware", "other.Middleware"])) == []


def test_an_armed_capture_must_be_bounded():
    assert settings_errors(with_(vllm_profiler_armed="True", vllm_profiler_armed_max_iterations=0)) == [
        "vllm_profiler_armed_max_iterations is 0: allowed values are a positive integer."]
    assert settings_errors(with_(vllm_profiler_armed=False, vllm_profiler_armed_max_iterations=0)) == []


# --- Server variants (vllm_variant, experiments): environment, extra_args, profile ---

NGRAM = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}'


def test_server_variants_may_change_arguments_only():
    variants = [{"name": "ngram", "extra_args": ["--speculative-config", NGRAM]},
                {"name": "max-num-seqs=64", "extra_args": ["--max-num-seqs", "64"]},
                {"name": "NCCL_PROTO=LL128,NCCL_MAX_NCHANNELS=8",
                 "environment": {"NCCL_PROTO": "LL128", "NCCL_MAX_NCHANNELS": "8"}},
                {"name": "nccl-defaults", "environment": {"NCCL_ALGO": None, "NCCL_PROTO": None}},
                {"name": "profiled", "profile": True}]
    assert variant_errors("v", variants, GOOD["vllm_environment"], server=True) == []


def test_arguments_are_refused_where_only_an_environment_is_meant():
    assert variant_errors("v", [{"name": "a", "extra_args": ["--max-num-seqs", "8"]}]) == [
        "v[a] has unknown keys extra_args: a variant has name and environment.",
        "v[a].environment is empty: a variant changes at least one variable."]


@pytest.mark.parametrize("args, expected", [
    (["--port", "9000"], "v[x].extra_args sets --port, which the role sets itself (vllm_port): remove it."),
    (["--host=0.0.0.0"], "v[x].extra_args sets --host, which the role sets itself (vllm_host): remove it."),
    (["--profiler-config.profiler", "torch"],
     "v[x].extra_args sets --profiler-config, which the role sets itself (the variant's profile): remove it."),
    (["--speculative-config", "{method: ngram}"],
     "v[x].extra_args --speculative-config is '{method: ngram}', which is not JSON"),
    (["--speculative-config={\"num_speculative_tokens\": 3}"],
     "v[x].extra_args --speculative-config is '{\"num_speculative_tokens\": 3}': it must be a JSON object with a "
     "\"method\""),
    ("--max-num-seqs 8", "v[x].extra_args is '--max-num-seqs 8': it must be a list of arguments"),
])
def test_variant_arguments_the_role_owns_or_cannot_parse_are_named(args, expected):
    errors = variant_errors("v", [{"name": "x", "extra_args": args}], server=True)
    assert len(errors) == 1 and errors[0].startswith(expected), errors


def test_batch_invariant_mode_conflicts_with_the_nccl_settings_it_overwrites():
    (error,) = settings_errors(with_(vllm_environment={"VLLM_BATCH_INVARIANT": "1", "NCCL_PROTO": "LL"}))
    assert error.startswith("vllm_environment sets VLLM_BATCH_INVARIANT=1 together with NCCL_PROTO: ")
    # A variant that turns it on over a base that sets NCCL: the conflict is in the merged environment.
    (error,) = variant_errors("v", [{"name": "bi", "environment": {"VLLM_BATCH_INVARIANT": "1"}}],
                              GOOD["vllm_environment"], server=True)
    assert error.startswith("v[bi].environment sets VLLM_BATCH_INVARIANT=1 together with "
                            "NCCL_PROTO, NCCL_ALGO, NCCL_MAX_NCHANNELS")
    assert error.endswith("(with vllm_environment under it)")
    # ... unless the variant unsets them.
    unset = {"VLLM_BATCH_INVARIANT": "1", "NCCL_PROTO": None, "NCCL_ALGO": None, "NCCL_MAX_NCHANNELS": None}
    assert variant_errors("v", [{"name": "bi", "environment": unset}], GOOD["vllm_environment"], server=True) == []
    assert settings_errors(with_(vllm_environment={"VLLM_BATCH_INVARIANT": "0", "NCCL_PROTO": "LL"})) == []


def test_the_variant_in_force_is_checked_with_the_settings():
    assert settings_errors(with_(vllm_variant={"name": "p", "extra_args": ["--port", "1"]})) == [
        "vllm_variant[p].extra_args sets --port, which the role sets itself (vllm_port): remove it."]
    assert settings_errors(with_(vllm_variant={"name": "p", "profile": True})) == []
    assert settings_errors(with_(vllm_extra_args=["--speculative-config", "{}"]))[0].startswith(
        "vllm_extra_args --speculative-config is '{}': it must be a JSON object")


EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples/experiments").glob("*.yml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_experiment_passes_the_variant_check(example):
    data = yaml.safe_load(example.read_text())
    variants = data.get("vllm_experiment_variants", []) + expand(data.get("vllm_experiment_sweeps", []))
    assert variants, f"{example.name} names no variant"
    assert variant_errors("vllm_experiment_variants", variants, {"NCCL_PROTO": "LL"}, server=True) == []
