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
