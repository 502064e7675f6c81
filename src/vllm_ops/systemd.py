"""Render values for systemd unit files: command lines and environment files.

systemd parses ExecStart= itself (no shell): words are split on white
space, single and double quotes group words, backslash escapes are
interpreted inside quotes, ``%`` starts a specifier and ``$`` a variable
reference. These helpers quote so that the server receives exactly the
argument vector it was given.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["cli_options", "drift_words", "exec_command", "quote_arg", "quote_env_value", "service_environment",
           "unset_names"]

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


def _env_values(text: str) -> dict[str, str]:
    """``NAME=value`` of an EnvironmentFile= text (comments and blank lines left out), the values as
    written (quoted as :func:`quote_env_value` quotes them, then unquoted)."""
    out = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        name, value = line.split("=", 1)
        words = shlex.split(value) if value else [""]
        out[name.strip()] = words[0] if len(words) == 1 else value
    return out


def _unit_lines(text: str) -> tuple[list[str], list[str]]:
    """(the ExecStart= argument vector, every other directive line) of a unit file's text, comments left
    out and continuation lines joined."""
    joined, argv, other = (text or "").replace("\\\n", " "), [], []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("ExecStart="):
            argv = shlex.split(line[len("ExecStart="):].replace("%%", "%").replace("$$", "$"))
        else:
            other.append(line)
    return argv, other


def drift_words(files: Sequence[Mapping]) -> list[str]:
    """What differs between the host's files and the inventory's rendering of them, in words: one item
    per environment variable, per group of arguments, per other unit line, per file that differs without
    a diff to show (the secrets file: never shown). ``files``: ``[{kind, path, changed, before, after}]``,
    ``kind`` ``environment``, ``unit`` or ``secret``; ``before`` the host's text, ``after`` the inventory's.
    """
    out: list[str] = []
    for f in files:
        if not f.get("changed"):
            continue
        kind, before, after = f.get("kind"), f.get("before"), f.get("after")
        shown = len(out)
        if before == "" and after:
            out.append(f"{f.get('path')} is missing on the host (never deployed: run deploy.yml)")
        elif kind == "environment" and before is not None and after is not None:
            host, inv = _env_values(before), _env_values(after)
            for name in sorted(set(host) | set(inv)):
                if host.get(name) == inv.get(name):
                    continue
                out.append(f"{name}: the host has {_said(host.get(name))}, the inventory {_said(inv.get(name))}")
        elif kind == "unit" and before is not None and after is not None:
            (host_argv, host_other), (inv_argv, inv_other) = _unit_lines(before), _unit_lines(after)
            if host_argv != inv_argv:
                out.append("the server's command: " + _argv_words(host_argv, inv_argv))
            only_host = [x for x in host_other if x not in inv_other]
            only_inv = [x for x in inv_other if x not in host_other]
            out += [f"{f.get('path')}: {x} on the host only" for x in only_host]
            out += [f"{f.get('path')}: {x} in the inventory only" for x in only_inv]
        if len(out) == shown:
            out.append(f"{f.get('path')} differs" + (" (not shown: it holds secrets)" if kind == "secret" else
                                                      " (its owner, mode or whitespace)" if before is not None
                                                      else ""))
    return out


def _said(value: str | None) -> str:
    return "it unset" if value is None else f"{value!r}" if value else "it empty"


def _argv_words(host: Sequence[str], inventory: Sequence[str]) -> str:
    """The arguments one command has and the other lacks, in order: ``only the host's passes
    --enforce-eager; only the inventory's passes --max-model-len 4096``; the executables first when
    they differ."""
    parts = []
    if host[:1] != inventory[:1]:
        parts.append(f"the host runs {host[0] if host else 'nothing'}, the inventory "
                     f"{inventory[0] if inventory else 'nothing'}")
    host_opts, inv_opts = _options(host[1:]), _options(inventory[1:])
    only_host = [o for o in host_opts if o not in inv_opts]
    only_inv = [o for o in inv_opts if o not in host_opts]
    if only_host:
        parts.append(f"only the host's passes {' '.join(only_host)}")
    if only_inv:
        parts.append(f"only the inventory's passes {' '.join(only_inv)}")
    return "; ".join(parts) or "the same arguments in another order"


def _options(argv: Sequence[str]) -> list[str]:
    """An argument vector as options, each with its values (``--max-model-len 4096``)."""
    out: list[str] = []
    for word in argv:
        if out and not word.startswith("-"):
            out[-1] = f"{out[-1]} {shlex.quote(word)}"
        else:
            out.append(shlex.quote(word))
    return out
