"""vllm_ops.validate: each bad variable is named with what is allowed."""

import pytest

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
