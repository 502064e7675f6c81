"""What every record module shares: :class:`Record` (``load``, ``to_dict`` and ``dump``, from each
record's class attributes), the ``write RECORD DIR`` command, the header checks (an object, its schema, no unknown
field) and the fields every record has: a text, an object or null, a flag."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import ClassVar

from ..artifacts import write_json
from ..cliutil import read_json, run_command
from ..job import now_iso
from .errors import RecordError

__all__ = ["Record", "check_header", "flag", "object_or_null", "text", "write_main"]


class Record:
    """What every record's dataclass inherits: its file read (``load``), its fields as the file holds them
    (``to_dict``, with its schema) and written atomically (``dump``), from the class attributes below. A
    subclass defines ``from_dict(data, where)``."""

    SCHEMA: ClassVar[str]
    FILE: ClassVar[str]  # its file's name in the directory it is written to
    TITLE: ClassVar[str]  # "a job record": what the header checks call it
    READ_AS: ClassVar[str]  # "job record": what a message about reading its file calls it
    MISSING: ClassVar[str | None] = None  # the words for a file that does not exist; None: the system's
    DAMAGED: ClassVar[str] = ""  # appended to the message of a file that does not parse
    RENAMED: ClassVar[dict[str, str]] = {}  # attribute -> the file's field, where a field's name is taken
    VALUES_AS: ClassVar[str]  # "the job's values": what a message about the command's values calls them

    @classmethod
    def file_fields(cls) -> list[str]:
        """The fields of the record's file (schema aside)."""
        return [cls.RENAMED.get(f.name, f.name) for f in fields(cls)]

    @classmethod
    def header(cls, data: object, where: str) -> Mapping:
        """:func:`check_header` of ``data`` for this record."""
        return check_header(data, where, cls.SCHEMA, cls.file_fields(), cls.TITLE)

    @classmethod
    def load(cls, path: str | Path):
        """``path`` read and checked (``from_dict``)."""
        return cls.from_dict(read_json(path, cls.READ_AS, RecordError, missing=cls.MISSING, damaged=cls.DAMAGED),
                             str(path))

    def to_dict(self) -> dict:
        """The record as its file holds it, with its schema."""
        out = asdict(self)
        for attribute, name in self.RENAMED.items():
            out[name] = out.pop(attribute)
        return {"schema": self.SCHEMA, **out}

    def file_name(self) -> str:
        return self.FILE

    def dump(self, directory: str | Path) -> Path:
        """Write the record to ``DIR/<its file>`` atomically; its path."""
        return write_json(Path(directory) / self.file_name(), self.to_dict())


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


def object_or_null(data: Mapping, key: str, where: str) -> dict | None:
    """A field that is an object (a copy of it) or null."""
    value = data.get(key)
    if value is not None and not isinstance(value, Mapping):
        raise RecordError(f"{where}: '{key}' must be an object or null, not {type(value).__name__}")
    return dict(value) if value is not None else None


def flag(data: Mapping, key: str, where: str) -> bool:
    """A true-or-false field, false where absent."""
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise RecordError(f"{where}: '{key}' must be true or false, got {value!r}")
    return value


def write_main(argv: list[str] | None, records: Mapping[str, type[Record]]) -> int:
    """The records' command, ``python -m vllm_ops.records write RECORD DIR``: the values (a JSON object)
    read on stdin, ``finished_at`` set to now unless given, checked as ``RECORD``'s and written to
    ``DIR/<its file>``; the path printed."""
    prog = "python -m vllm_ops.records"
    p = argparse.ArgumentParser(prog=prog, description="Write a job's record from the values the job hands it.",
                                epilog="Exit status: 0 on success, 2 on bad input or usage (one line on stderr).")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    w = sub.add_parser("write", help="read the values (a JSON object) on stdin, write the record in DIR")
    w.add_argument("record", choices=sorted(records), help="which record: " + ", ".join(
        f"{name} ({record.FILE})" for name, record in sorted(records.items())))
    w.add_argument("dir", metavar="DIR", help="the directory on the controller the record goes to")
    args = p.parse_args(argv)
    record = records[args.record]

    def run() -> str:
        try:
            values = json.loads(sys.stdin.read())
        except json.JSONDecodeError as exc:
            raise RecordError(f"the values on stdin: invalid JSON ({exc.msg}, line {exc.lineno})") from None
        if isinstance(values, Mapping) and not values.get("finished_at"):
            values = {**values, "finished_at": now_iso()}
        return str(record.from_dict(values, record.VALUES_AS).dump(args.dir))

    return run_command(prog, run)
