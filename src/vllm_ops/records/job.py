"""``job.json``: what the job skeleton (role vllm_job) records of every job, at its end.

::

    {schema: "vllm-ops/job/1", id, kind, host, controller, started_at, finished_at,
     downtime (the health poller's record, vllm_ops.job, or null), loads (the vllm role's load
     records, vllm_ops_host.loads, each with its variant), disk (the vllm_disk role's floor, or null),
     page_cache_warmed (the warm-up's record, or null), error (the job's error, or null)}

A file without ``schema`` is an earlier release's (schema 0): the same fields, any of ``kind``,
``controller``, ``loads``, ``disk``, ``page_cache_warmed`` and ``error`` absent; it is read as
schema 1 with those empty. A file of a later schema is refused: a newer vllm-ops wrote it.

The skeleton hands the values to ``python -m vllm_ops.records write job DIR`` (a JSON object on
stdin, ``finished_at`` now unless given), which checks them and writes ``DIR/job.json`` atomically.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..artifacts import JOB_JSON
from ..job import JobInputError, parse_time
from .base import Record, object_or_null, text
from .errors import RecordError

__all__ = ["SCHEMA", "JobRecord"]

SCHEMA = "vllm-ops/job/1"


@dataclass(frozen=True)
class JobRecord(Record):
    """One job as the skeleton recorded it (the module's docstring)."""

    SCHEMA: ClassVar[str] = SCHEMA
    FILE: ClassVar[str] = JOB_JSON
    TITLE: ClassVar[str] = "a job record"
    READ_AS: ClassVar[str] = "job record"
    VALUES_AS: ClassVar[str] = "the job's values"

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
        data = cls.header(data, where)
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
        for key in ("downtime", "disk", "page_cache_warmed"):
            values[key] = object_or_null(data, key, where)
        values["loads"] = _loads(data.get("loads"), where)
        return cls(**values)

    @classmethod
    def read(cls, directory: str | Path) -> JobRecord | None:
        """``DIR/job.json``, or None where the job left none (a profiled variant reported while its
        experiment goes on, a job still running)."""
        path = Path(directory) / JOB_JSON
        return cls.load(path) if path.exists() else None



def _loads(value: object, where: str) -> list[dict]:
    """``loads``: each the vllm role's load record with its phases (vllm_ops_host.loads.parse_load); [] when absent
    (a record of an earlier release)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(x, Mapping) and isinstance(x.get("phases"), list)
                                              for x in value):
        raise RecordError(f"{where}: 'loads' must be a list of load records, each with its phases "
                          "(vllm_ops_host.loads.parse_load)")
    return [dict(x) for x in value]
