"""``hosts/<host>.json`` of a rollout's directory: one host's part in the rollout, written by the rollout
role once the host is back on its last-known-good.

::

    {schema: "vllm-ops/rollout-host/1", host, stage ("canary" | "fleet"), outcome (OUTCOMES),
     restarted (bool), error (the job's error, or null), job_id, job_dir, started_at, finished_at,
     downtime (the health poller's record, or null), change (the change in words),
     before {version, executable}, after {version, executable} (what the host runs now, as /version
     and the unit's ExecStart say), readback (the vllm role's read-back of the host's last start in
     the job, or null: no start, or none read back), gate (the path of the canary's gate.json, or
     null), smoke ({completion_tokens, metrics}: a later host's smoke check, or null)}

``outcome`` is where the host ended: ``kept`` (the change passed and is the host's new last-known-good),
``refused`` (before anything stopped), ``did not load`` (rolled back by the vllm role), ``regressed`` or
``inconclusive`` (the canary's gate), ``smoke failed`` (a later host's smoke check), ``failed`` (anything
else; the host is on its last-known-good all the same). A file without ``schema`` is an earlier
release's (schema 0), read as the same fields. The role hands the values to
``python -m vllm_ops.records write rollout-host DIR`` (``finished_at`` now unless given), which writes
``DIR/<host>.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import Record, flag, object_or_null, text
from .errors import RecordError

__all__ = ["OUTCOMES", "SCHEMA", "STAGES", "RolloutHostRecord"]

SCHEMA = "vllm-ops/rollout-host/1"
STAGES = ("canary", "fleet")
OUTCOMES = ("kept", "refused", "did not load", "regressed", "inconclusive", "smoke failed", "failed")


@dataclass(frozen=True)
class RolloutHostRecord(Record):
    """One host's part in a rollout (the module's docstring)."""

    SCHEMA: ClassVar[str] = SCHEMA
    FILE: ClassVar[str] = "<host>.json"
    TITLE: ClassVar[str] = "a rollout host record"
    READ_AS: ClassVar[str] = "rollout host record"
    MISSING: ClassVar[str | None] = "no such file; the rollout role writes it once the host is back"
    VALUES_AS: ClassVar[str] = "the host's values"

    host: str
    stage: str
    outcome: str
    restarted: bool = False
    error: str | None = None
    job_id: str | None = None
    job_dir: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    downtime: dict | None = None
    change: str | None = None
    before: dict | None = None
    after: dict | None = None
    readback: dict | None = None
    gate: str | None = None
    smoke: dict | None = None

    @classmethod
    def from_dict(cls, data: object, where: str = "hosts/<host>.json") -> RolloutHostRecord:
        """The record of ``data`` (a parsed host record, or the role's values), checked; an earlier
        schema's migrated. Every problem names ``where`` and the field."""
        data = cls.header(data, where)
        values: dict = {key: text(data, key, where) for key in ("host", "stage", "outcome")}
        if values["stage"] not in STAGES:
            raise RecordError(f"{where}: 'stage' must be canary or fleet, got {values['stage']!r}")
        if values["outcome"] not in OUTCOMES:
            raise RecordError(f"{where}: 'outcome' must be one of {list(OUTCOMES)}, got {values['outcome']!r}")
        values["restarted"] = flag(data, "restarted", where)
        for key in ("error", "job_id", "job_dir", "started_at", "finished_at", "change", "gate"):
            values[key] = text(data, key, where, required=False)
        for key in ("downtime", "before", "after", "readback", "smoke"):
            values[key] = object_or_null(data, key, where)
        return cls(**values)

    def file_name(self) -> str:
        return f"{self.host}.json"
