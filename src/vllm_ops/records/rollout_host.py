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
``python -m vllm_ops.records.rollout_host write DIR`` (``finished_at`` now unless given), which writes
``DIR/<host>.json``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ..artifacts import write_json
from ..cliutil import read_json
from .base import check_header, text, write_main
from .errors import RecordError

__all__ = ["OUTCOMES", "SCHEMA", "STAGES", "RolloutHostRecord"]

SCHEMA = "vllm-ops/rollout-host/1"
PROG = "python -m vllm_ops.records.rollout_host"
STAGES = ("canary", "fleet")
OUTCOMES = ("kept", "refused", "did not load", "regressed", "inconclusive", "smoke failed", "failed")


@dataclass(frozen=True)
class RolloutHostRecord:
    """One host's part in a rollout (the module's docstring)."""

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
        data = check_header(data, where, SCHEMA, (f.name for f in fields(cls)), "a rollout host record")
        values: dict = {key: text(data, key, where) for key in ("host", "stage", "outcome")}
        if values["stage"] not in STAGES:
            raise RecordError(f"{where}: 'stage' must be canary or fleet, got {values['stage']!r}")
        if values["outcome"] not in OUTCOMES:
            raise RecordError(f"{where}: 'outcome' must be one of {list(OUTCOMES)}, got {values['outcome']!r}")
        restarted = data.get("restarted", False)
        if not isinstance(restarted, bool):
            raise RecordError(f"{where}: 'restarted' must be true or false, got {restarted!r}")
        values["restarted"] = restarted
        for key in ("error", "job_id", "job_dir", "started_at", "finished_at", "change", "gate"):
            values[key] = text(data, key, where, required=False)
        for key in ("downtime", "before", "after", "readback", "smoke"):
            value = data.get(key)
            if value is not None and not isinstance(value, Mapping):
                raise RecordError(f"{where}: '{key}' must be a mapping or null")
            values[key] = dict(value) if value is not None else None
        return cls(**values)

    @classmethod
    def load(cls, path: str | Path) -> RolloutHostRecord:
        """``path`` read and checked (:meth:`from_dict`)."""
        return cls.from_dict(read_json(path, "rollout host record", RecordError,
                                       missing="no such file; the rollout role writes it once the host is back"),
                             str(path))

    def to_dict(self) -> dict:
        """The record as its file holds it, with its schema."""
        return {"schema": SCHEMA, **asdict(self)}

    def dump(self, directory: str | Path) -> Path:
        """Write ``DIR/<host>.json`` atomically; its path."""
        return write_json(Path(directory) / f"{self.host}.json", self.to_dict())


def main(argv: list[str] | None = None) -> int:
    return write_main(argv, PROG, "a rollout host's record", "<host>.json",
                      lambda directory, values: RolloutHostRecord.from_dict(values, "the host's values")
                      .dump(directory))


if __name__ == "__main__":
    sys.exit(main())
