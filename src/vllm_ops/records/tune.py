"""``tune.json``: what the tune role records of one host's tune, beside its plan, pre-screen, profile and
``experiment/``.

::

    {schema: "vllm-ops/tune/1", id, host, started_at, finished_at,
     profile_path ("live": the armed service profiled as it ran; "restart": a profiling variant
                   loaded; "none": a plan file, no profile),
     stopped (whether the tune stopped the service: it loaded a variant), applied (the name of the
     winner it deployed, or null), loads [{what, name, status, seconds}] (the loads the tune timed
     itself), downtime (the health poller's record, or null), error (the job's
     error, or null), drift_error (why the baseline could not be measured again, or null), load (what
     the benchmark sent: vllm_ops.experiment.load.recorded)}

A file without ``schema`` is an earlier release's (schema 0): the same fields, any but ``id``, ``host``
and ``started_at`` absent. A later schema is refused. The role hands the values to
``python -m vllm_ops.records write tune DIR`` (a JSON object on stdin, ``finished_at`` now unless given).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from .base import Record, flag, object_or_null, text
from .errors import RecordError

__all__ = ["PROFILE_PATHS", "SCHEMA", "TUNE_JSON", "TuneRecord"]

SCHEMA = "vllm-ops/tune/1"
TUNE_JSON = "tune.json"
PROFILE_PATHS = ("live", "restart", "none")


@dataclass(frozen=True)
class TuneRecord(Record):
    """One host's tune as its role recorded it (the module's docstring)."""

    SCHEMA: ClassVar[str] = SCHEMA
    FILE: ClassVar[str] = TUNE_JSON
    TITLE: ClassVar[str] = "a tune record"
    READ_AS: ClassVar[str] = "tune record"
    MISSING: ClassVar[str | None] = "no such file; the tune role writes it"
    VALUES_AS: ClassVar[str] = "the tune's values"
    RENAMED: ClassVar[dict[str, str]] = {"bench_load": "load"}

    id: str
    host: str
    started_at: str
    finished_at: str | None = None
    profile_path: str | None = None
    stopped: bool = False
    applied: str | None = None
    loads: list[dict] = field(default_factory=list)
    downtime: dict | None = None
    error: str | None = None
    drift_error: str | None = None
    # The file's "load": what the benchmark sent (named apart from the classmethod load).
    bench_load: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: object, where: str = TUNE_JSON) -> TuneRecord:
        """The record of ``data`` (a parsed ``tune.json``, or the role's values), checked; an earlier
        schema's migrated. Every problem names ``where`` and the field."""
        data = cls.header(data, where)
        values: dict = {key: text(data, key, where) for key in ("id", "host", "started_at")}
        for key in ("finished_at", "profile_path", "applied", "error", "drift_error"):
            values[key] = text(data, key, where, required=False)
        if values["profile_path"] not in (None, *PROFILE_PATHS):
            raise RecordError(f"{where}: 'profile_path' must be one of {', '.join(PROFILE_PATHS)}, got "
                              f"{values['profile_path']!r}")
        values["stopped"] = flag(data, "stopped", where)
        values["downtime"] = object_or_null(data, "downtime", where)
        values["bench_load"] = object_or_null(data, "load", where) or {}
        loads = data.get("loads") or []
        if not isinstance(loads, list) or not all(isinstance(x, Mapping) for x in loads):
            raise RecordError(f"{where}: 'loads' must be a list of the loads the tune timed "
                              "({what, name, status, seconds})")
        values["loads"] = [dict(x) for x in loads]
        return cls(**values)
