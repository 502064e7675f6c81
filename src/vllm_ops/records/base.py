"""What every record module shares: its header checks (an object, its schema, no unknown field), its
text fields, and its ``write DIR`` command (the values on stdin, ``finished_at`` now unless given)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from ..cliutil import run_command
from ..job import now_iso
from .errors import RecordError

__all__ = ["check_header", "text", "write_main"]


def check_header(data: object, where: str, schema: str, known: Iterable[str], what: str) -> Mapping:
    """``data`` as a mapping of ``known`` fields and of ``schema`` (or none: an earlier release's);
    else a :class:`RecordError` naming ``where``."""
    if not isinstance(data, Mapping):
        raise RecordError(f"{where}: {what} must be a JSON object, not {type(data).__name__}")
    found = data.get("schema")
    if found not in (None, schema):
        raise RecordError(f"{where}: schema {found!r} is not {schema!r}: a newer vllm-ops wrote it; read it with that "
                          "release")
    known = {*known, "schema"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise RecordError(f"{where}: unknown field(s) {', '.join(unknown)}; {what} has {', '.join(sorted(known))}")
    return data


def text(data: Mapping, key: str, where: str, required: bool = True) -> str | None:
    """A non-empty string field (None where absent, null or empty and not ``required``)."""
    value = data.get(key)
    if value in (None, "") and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise RecordError(f"{where}: '{key}' must be a non-empty string, got {value!r}")
    return value


def write_main(argv: list[str] | None, prog: str, what: str, name: str,
               write: Callable[[Path, Mapping], Path]) -> int:
    """The record's command, ``write DIR``: the values (a JSON object) read on stdin, ``finished_at``
    set to now unless given, handed to ``write`` (which checks them and writes ``DIR/<name>``)."""
    p = argparse.ArgumentParser(prog=prog, description=f"Write {what}, {name}, from the values a job hands it.",
                                epilog="Exit status: 0 on success, 2 on bad input or usage (one line on stderr).")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    w = sub.add_parser("write", help=f"read the values (a JSON object) on stdin, write DIR/{name}")
    w.add_argument("dir", metavar="DIR", help="the job's directory on the controller")
    args = p.parse_args(argv)

    def run() -> str:
        try:
            values = json.loads(sys.stdin.read())
        except json.JSONDecodeError as exc:
            raise RecordError(f"the values on stdin: invalid JSON ({exc.msg}, line {exc.lineno})") from None
        if isinstance(values, Mapping) and not values.get("finished_at"):
            values = {**values, "finished_at": now_iso()}
        return str(write(Path(args.dir), values))

    return run_command(prog, run)
