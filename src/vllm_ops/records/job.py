"""``job.json``: what the job skeleton (role vllm_job) records of every job, at its end.

::

    {schema: "vllm-ops/job/1", id, kind, host, controller, started_at, finished_at,
     downtime (the health poller's record, vllm_ops.job, or null), loads (the vllm role's load
     records, vllm_ops.loads, each with its variant), disk (the vllm_disk role's floor, or null),
     page_cache_warmed (the warm-up's record, or null), error (the job's error, or null)}

A file without ``schema`` is an earlier release's (schema 0): the same fields, any of ``kind``,
``controller``, ``loads``, ``disk``, ``page_cache_warmed`` and ``error`` absent; it is read as
schema 1 with those empty. A file of a later schema is refused: a newer vllm-ops wrote it.

The skeleton hands the values to ``python -m vllm_ops.records.job write DIR`` (a JSON object on
stdin, ``finished_at`` now unless given), which checks them and writes ``DIR/job.json`` atomically.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..artifacts import JOB_JSON, write_json
from ..cliutil import read_json
from ..job import JobInputError, parse_time
from .base import check_header, text, write_main
from .errors import RecordError

__all__ = ["SCHEMA", "JobRecord"]

SCHEMA = "vllm-ops/job/1"
PROG = "python -m vllm_ops.records.job"
_OPTIONAL_MAPPINGS = ("downtime", "disk", "page_cache_warmed")


@dataclass(frozen=True)
class JobRecord:
    """One job as the skeleton recorded it (the module's docstring)."""

    id: str
    host: str
    started_at: str
    finished_at: str
    kind: str | None = None
    controller: str | None = None
    downtime: dict | None = None
    loads: list[dict] = field(default_factory=list)
    disk: dict | None = None
    page_cache_warmed: dict | None = None
    error: str | None = None

    @classmethod
    def from_dict(cls, data: object, where: str = JOB_JSON) -> JobRecord:
        """The record of ``data`` (a parsed ``job.json``, or the skeleton's values), checked; an
        earlier schema's migrated. Every problem names ``where`` and the field."""
        data = check_header(data, where, SCHEMA, (f.name for f in fields(cls)), "a job record")
        values = {}
        for key in ("id", "host", "started_at", "finished_at"):
            values[key] = text(data, key, where)
        for key in ("started_at", "finished_at"):
            try:
                parse_time(values[key], key)
            except JobInputError as exc:
                raise RecordError(f"{where}: '{key}' is no time: {exc}") from None
        for key in ("kind", "controller", "error"):
            values[key] = text(data, key, where, required=False)
        for key in _OPTIONAL_MAPPINGS:
            value = data.get(key)
            if value is not None and not isinstance(value, Mapping):
                raise RecordError(f"{where}: '{key}' must be an object or null, not {type(value).__name__}")
            values[key] = dict(value) if value is not None else None
        values["loads"] = _loads(data.get("loads"), where)
        return cls(**values)

    @classmethod
    def load(cls, path: str | Path) -> JobRecord:
        """``path`` read and checked (:meth:`from_dict`)."""
        return cls.from_dict(read_json(path, "job record", RecordError), str(path))

    @classmethod
    def read(cls, directory: str | Path) -> JobRecord | None:
        """``DIR/job.json``, or None where the job left none (a profiled variant reported while its
        experiment goes on, a job still running)."""
        path = Path(directory) / JOB_JSON
        return cls.load(path) if path.exists() else None

    def to_dict(self) -> dict:
        """The record as ``job.json`` holds it, with its schema."""
        return {"schema": SCHEMA, **asdict(self)}

    def dump(self, directory: str | Path) -> Path:
        """Write ``DIR/job.json`` atomically; its path."""
        return write_json(Path(directory) / JOB_JSON, self.to_dict())


def _loads(value: object, where: str) -> list[dict]:
    """``loads``: each the vllm role's load record with its phases (vllm_ops.loads.parse_load); [] when absent
    (a record of an earlier release)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(x, Mapping) and isinstance(x.get("phases"), list)
                                              for x in value):
        raise RecordError(f"{where}: 'loads' must be a list of load records, each with its phases "
                          "(vllm_ops.loads.parse_load)")
    return [dict(x) for x in value]


def main(argv: list[str] | None = None) -> int:
    return write_main(argv, PROG, "a job's record", JOB_JSON,
                      lambda directory, values: JobRecord.from_dict(values, "the job's values").dump(directory))


if __name__ == "__main__":
    sys.exit(main())
