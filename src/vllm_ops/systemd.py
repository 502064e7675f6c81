"""Render values for systemd unit files: command lines and environment files.

systemd parses ExecStart= itself (no shell): words are split on white
space, single and double quotes group words, backslash escapes are
interpreted inside quotes, ``%`` starts a specifier and ``$`` a variable
reference. These helpers quote so that the server receives exactly the
argument vector it was given.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = ["cli_options", "exec_command", "quote_arg", "quote_env_value", "service_environment", "unset_names"]

# Words that systemd passes through unchanged when left bare.
_BARE = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")


def _escape_specials(text: str) -> str:
    return text.replace("%", "%%").replace("$", "$$")


def quote_arg(arg: object) -> str:
    """Quote one argument of an ExecStart= line."""
    text = str(arg)
    if any(ch in text for ch in "\n\r\0"):
        raise ValueError(f"argument {text!r} contains a line break or NUL, which a unit file cannot carry")
    if text and _BARE.match(text):
        return text
    escaped = _escape_specials(text.replace("\\", "\\\\"))
    # Prefer single quotes for JSON and other text full of double quotes.
    if "'" not in escaped:
        return f"'{escaped}'"
    return '"' + escaped.replace('"', '\\"') + '"'


def exec_command(argv: Iterable[object], continuation: str = " \\\n    ") -> str:
    """Join an argument vector into an ExecStart= value, one option per line.

    An option and its value share a line, so the rendered unit reads like the
    command an operator would type.
    """
    words = [quote_arg(arg) for arg in argv]
    if not words:
        raise ValueError("the command is empty")
    if not str(words[0]).startswith("/"):
        raise ValueError(f"the executable {words[0]!r} is not an absolute path")
    lines: list[str] = []
    for word in words:
        if lines and not word.startswith("-"):
            lines[-1] = f"{lines[-1]} {word}"
        else:
            lines.append(word)
    return continuation.join(lines)


def cli_options(options: Mapping[str, object]) -> list[str]:
    """Turn ``{"max-model-len": 4096, "trust-remote-code": True}`` into flags.

    ``True`` gives a bare flag; ``False``, ``None`` and ``""`` leave the option
    out; anything else becomes ``--name value``. Order is kept.
    """
    argv: list[str] = []
    for name, value in options.items():
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", str(name)):
            raise ValueError(f"option name {name!r} is not a vLLM long option (lowercase words joined by '-')")
        if value is None or value is False or value == "":
            continue
        argv.append(f"--{name}")
        if value is not True:
            argv.append(str(value))
    return argv


def quote_env_value(value: object) -> str:
    """Quote a value for an EnvironmentFile= line (``NAME=<this>``)."""
    text = str(value)
    if any(ch in text for ch in "\n\r\0"):
        raise ValueError("environment values cannot contain line breaks or NUL")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def service_environment(base: Mapping[str, object] | None, overrides: Mapping[str, object] | None = None,
                        python_path: str | None = None) -> dict[str, object]:
    """The server's environment: ``base`` (``vllm_environment``) with a variant's ``overrides`` laid
    over it (a ``None`` value unsets the variable, see :func:`unset_names`) and ``python_path``, when
    given, put first on ``PYTHONPATH`` (the armed profiler's fence directory)."""
    merged = {**(base or {}), **(overrides or {})}
    environment = {str(k): v for k, v in merged.items() if v is not None}
    if python_path:
        rest = str(environment.get("PYTHONPATH") or "")
        environment["PYTHONPATH"] = ":".join(p for p in (python_path, rest) if p)
    return environment


def unset_names(overrides: Mapping[str, object] | None) -> list[str]:
    """The variables a variant unsets (``None`` values), for ``UnsetEnvironment=``: a variable of an
    earlier EnvironmentFile= is gone then, not set to an empty string."""
    return sorted(str(k) for k, v in (overrides or {}).items() if v is None)
