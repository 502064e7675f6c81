"""A rollout's change (vllm_ops.rollout.change): laid over a host's settings, checked, in words."""

import pytest

from vllm_ops.rollout import change_errors, change_text, target

CURRENT = {"vllm_version": "0.32.0", "vllm_environment": {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring"},
           "vllm_extra_args": ["--trust-remote-code"]}


def test_the_change_is_laid_over_the_settings():
    change = {"version": "0.33.0", "environment": {"NCCL_PROTO": "LL128", "NCCL_ALGO": None, "NCCL_MAX_NCHANNELS": 8},
              "extra_args": ["--max-num-seqs", 64]}
    assert target(change, CURRENT) == {
        "vllm_version": "0.33.0", "vllm_environment": {"NCCL_PROTO": "LL128", "NCCL_MAX_NCHANNELS": 8},
        "vllm_extra_args": ["--trust-remote-code", "--max-num-seqs", "64"]}
    assert target({}, CURRENT) == {**CURRENT, "vllm_environment": dict(CURRENT["vllm_environment"])}


def test_the_change_in_words():
    change = {"version": "0.33.0", "environment": {"NCCL_PROTO": "LL128", "NCCL_ALGO": None, "X": 1},
              "extra_args": ["--max-num-seqs", "64"]}
    assert change_text(change, CURRENT) == (
        "vLLM 0.32.0 -> 0.33.0; NCCL_PROTO LL -> LL128, -NCCL_ALGO, X=1; + --max-num-seqs 64")
    assert change_text({}, CURRENT) == "the settings as the inventory gives them (vLLM 0.32.0)"


def test_a_good_change_has_no_errors():
    assert change_errors({"version": "0.33.0"}, CURRENT) == []
    assert change_errors({"name": "tune-3", "environment": {"NCCL_PROTO": "Simple"}}, CURRENT) == []
    assert change_errors({}, CURRENT) == []


@pytest.mark.parametrize(("change", "expected"), [
    ("0.33.0", "vllm_rollout_change is '0.33.0': it must be a mapping"),
    ({"versoin": "0.33.0"}, "vllm_rollout_change has unknown keys versoin"),
    ({"version": "../0.33"}, "vllm_rollout_change.version is '../0.33': it must be a vLLM release"),
    ({"environment": {"NCCL_PROTO": "LLX"}}, "vllm_rollout_change.environment.NCCL_PROTO is 'LLX': allowed values are"),
    ({"extra_args": ["--port", "9000"]}, "vllm_rollout_change.extra_args sets --port, which the role sets itself"),
    ({"environment": {"HF_TOKEN": "x"}}, "vllm_rollout_change.environment holds HF_TOKEN"),
    ({"name": "x"}, "vllm_rollout_change changes nothing"),
])
def test_a_bad_change_is_named(change, expected):
    errors = change_errors(change, CURRENT)
    assert any(e.startswith(expected) for e in errors), errors


def test_a_version_on_a_host_whose_executable_does_not_follow_it_is_refused():
    fixed = {**CURRENT, "vllm_executable": "/opt/vllm-standin/bin/vllm",
             "vllm_executable_after": "/opt/vllm-standin/bin/vllm", "vllm_install_enabled": False}
    (error,) = change_errors({"version": "0.0.1"}, fixed)
    assert error.startswith("vllm_rollout_change.version is 0.0.1, but this host runs /opt/vllm-standin/bin/vllm "
                            "whatever the version (its vllm_executable does not follow vllm_version and "
                            "vllm_install_enabled is false (nothing installs it)): it would keep running vLLM "
                            "0.32.0 and be reported as changed. Nothing was stopped.")
    # The same version, or a host whose executable follows the version, or settings without the executables.
    assert change_errors({"version": "0.32.0"}, fixed) == []
    follows = {**fixed, "vllm_executable": "/opt/vllm/0.32.0/bin/vllm",
               "vllm_executable_after": "/opt/vllm/0.0.1/bin/vllm"}
    assert change_errors({"version": "0.0.1"}, follows) == []
    assert change_errors({"version": "0.0.1"}, CURRENT) == []
    # An environment-only change on the fixed host is fine.
    assert change_errors({"environment": {"NCCL_PROTO": "Simple"}}, fixed) == []
