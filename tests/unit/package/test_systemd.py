"""vllm_ops.systemd: what systemd will hand the server is what we meant."""

import shlex

import pytest

from vllm_ops import systemd


def systemd_split(line: str) -> list[str]:
    """An independent reading of an ExecStart= value, for the quoting we use.

    Undo line continuations, then split like a POSIX shell, which agrees with
    systemd for our quoting (single quotes carry no backslash escapes in our
    output unless there were backslashes, which the tests below check apart),
    and undo the specifier and variable escapes.
    """
    joined = line.replace(" \\\n    ", " ")
    return [word.replace("%%", "%").replace("$$", "$") for word in shlex.split(joined)]


def test_exec_command_round_trips_a_vllm_command_line():
    argv = [
        "/opt/vllm/venv/bin/vllm",
        "serve",
        "/models/Kimi K2.5",
        "--port",
        "8000",
        "--profiler-config",
        '{"profiler": "torch", "torch_profiler_dir": "/var/lib/vllm/traces"}',
        "--chat-template",
        "it's 100% $HOME",
    ]
    rendered = systemd.exec_command(argv)
    assert systemd_split(rendered) == argv


def test_exec_command_puts_each_option_on_its_own_line():
    rendered = systemd.exec_command(["/bin/vllm", "serve", "/m", "--port", "8000", "--trust-remote-code"])
    assert rendered.splitlines() == ["/bin/vllm serve /m \\", "    --port 8000 \\", "    --trust-remote-code"]


def test_json_is_single_quoted_and_readable():
    assert systemd.quote_arg('{"a": 1}') == """'{"a": 1}'"""


def test_specifiers_and_variables_are_escaped():
    assert systemd.quote_arg("50%") == "'50%%'"
    assert systemd.quote_arg("$HOME") == "'$$HOME'"


def test_backslashes_are_escaped():
    assert systemd.quote_arg("a\\b") == "'a\\\\b'"


@pytest.mark.parametrize("bad", [["vllm", "serve"], []])
def test_exec_command_rejects_relative_or_empty_commands(bad):
    with pytest.raises(ValueError):
        systemd.exec_command(bad)


def test_line_breaks_are_refused():
    with pytest.raises(ValueError, match="line break"):
        systemd.quote_arg("a\nb")


def test_cli_options_skip_empty_values_and_keep_order():
    assert systemd.cli_options(
        {"host": "0.0.0.0", "served-model-name": "", "trust-remote-code": True, "enforce-eager": False, "port": 8000}
    ) == ["--host", "0.0.0.0", "--trust-remote-code", "--port", "8000"]


def test_cli_options_reject_names_that_are_not_long_options():
    with pytest.raises(ValueError, match="long option"):
        systemd.cli_options({"--port": 1})


def test_env_values_are_double_quoted_with_escapes():
    assert systemd.quote_env_value('a "b" \\c') == '"a \\"b\\" \\\\c"'
    assert systemd.quote_env_value(16) == '"16"'


# ------------------------------------------------------------------ drift: the host's files against the inventory's

HOST_ENV = '''# Ansible managed
# Environment of vllm-kimi (systemd EnvironmentFile syntax).
NCCL_ALGO="Ring"
NCCL_PROTO="LL128"
VLLM_ALLREDUCE_USE_FLASHINFER="0"
'''
INVENTORY_ENV = '''# Ansible managed
# Environment of vllm-kimi (systemd EnvironmentFile syntax).
NCCL_ALGO="Ring"
NCCL_PROTO="LL"
NCCL_MAX_NCHANNELS="16"
'''
HOST_UNIT = '''[Service]
Type=exec
ExecStart=/opt/vllm/0.33.0/bin/vllm serve /srv/models/kimi \\
    --tensor-parallel-size 8 \\
    --enforce-eager \\
    --speculative-config '{"method": "ngram"}'
Restart=always
'''
INVENTORY_UNIT = '''[Service]
Type=exec
ExecStart=/opt/vllm/0.32.0/bin/vllm serve /srv/models/kimi \\
    --tensor-parallel-size 8
Restart=always
TimeoutStopSec=120
'''


def test_drift_names_each_setting_the_host_runs_that_the_inventory_does_not_say():
    words = systemd.drift_words([
        {"kind": "environment", "path": "/etc/vllm/kimi.env", "changed": True, "before": HOST_ENV,
         "after": INVENTORY_ENV},
        {"kind": "unit", "path": "/etc/systemd/system/kimi.service", "changed": True, "before": HOST_UNIT,
         "after": INVENTORY_UNIT},
        {"kind": "secret", "path": "/etc/vllm/kimi.secrets.env", "changed": True, "before": None, "after": None},
    ])
    assert words == [
        "NCCL_MAX_NCHANNELS: the host has it unset, the inventory '16'",
        "NCCL_PROTO: the host has 'LL128', the inventory 'LL'",
        "VLLM_ALLREDUCE_USE_FLASHINFER: the host has '0', the inventory it unset",
        "the server's command: the host runs /opt/vllm/0.33.0/bin/vllm, the inventory /opt/vllm/0.32.0/bin/vllm; "
        "only the host's passes --enforce-eager --speculative-config '{\"method\": \"ngram\"}'",
        "/etc/systemd/system/kimi.service: TimeoutStopSec=120 in the inventory only",
        "/etc/vllm/kimi.secrets.env differs (not shown: it holds secrets)",
    ]


def test_no_drift_where_nothing_changed_and_a_file_changed_in_its_mode_only_is_named():
    same = {"kind": "environment", "path": "/etc/vllm/kimi.env", "changed": False, "before": HOST_ENV,
            "after": INVENTORY_ENV}
    assert systemd.drift_words([same]) == []
    mode = {"kind": "unit", "path": "/etc/systemd/system/kimi.service", "changed": True, "before": HOST_UNIT,
            "after": HOST_UNIT}
    assert systemd.drift_words([mode]) == ["/etc/systemd/system/kimi.service differs (its owner, mode or whitespace)"]


def test_drift_on_a_host_never_deployed_names_the_missing_file():
    missing = {"kind": "unit", "path": "/etc/systemd/system/kimi.service", "changed": True, "before": "",
               "after": INVENTORY_UNIT}
    assert systemd.drift_words([missing]) == [
        "/etc/systemd/system/kimi.service is missing on the host (never deployed: run deploy.yml)"]
