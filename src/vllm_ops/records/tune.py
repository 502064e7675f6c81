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
``python -m vllm_ops.records.tune write DIR`` (a JSON object on stdin, ``finished_at`` now unless given).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..artifacts import write_json
from ..cliutil import read_json
from .base import check_header, text, write_main
from .errors import RecordError

__all__ = ["PROFILE_PATHS", "SCHEMA", "TUNE_JSON", "TuneRecord"]

SCHEMA = "vllm-ops/tune/1"
TUNE_JSON = "tune.json"
PROG = "python -m vllm_ops.records.tune"
PROFILE_PATHS = ("live", "restart", "none")


@dataclass(frozen=True)
class TuneRecord:
    """One host's tune as its role recorded it (the module's docstring)."""

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
        known = ["load" if f.name == "bench_load" else f.name for f in fields(cls)]
        data = check_header(data, where, SCHEMA, known, "a tune record")
        values: dict = {key: text(data, key, where) for key in ("id", "host", "started_at")}
        for key in ("finished_at", "profile_path", "applied", "error", "drift_error"):
            values[key] = text(data, key, where, required=False)
        if values["profile_path"] not in (None, *PROFILE_PATHS):
            raise RecordError(f"{where}: 'profile_path' must be one of {', '.join(PROFILE_PATHS)}, got "
                              f"{values['profile_path']!r}")
        stopped = data.get("stopped", False)
        if not isinstance(stopped, bool):
            raise RecordError(f"{where}: 'stopped' must be true or false (whether the tune stopped the service), "
                              f"got {stopped!r}")
        values["stopped"] = stopped
        for key in ("downtime", "load"):
            value = data.get(key)
            if value is not None and not isinstance(value, Mapping):
                raise RecordError(f"{where}: '{key}' must be an object or null, not {type(value).__name__}")
            values["bench_load" if key == "load" else key] = (dict(value) if value is not None
                                                              else {} if key == "load" else None)
        loads = data.get("loads") or []
        if not isinstance(loads, list) or not all(isinstance(x, Mapping) for x in loads):
            raise RecordError(f"{where}: 'loads' must be a list of the loads the tune timed "
                              "({what, name, status, seconds})")
        values["loads"] = [dict(x) for x in loads]
        return cls(**values)

    @classmethod
    def load(cls, path: str | Path) -> TuneRecord:
        """``path`` read and checked (:meth:`from_dict`)."""
        return cls.from_dict(read_json(path, "tune record", RecordError, missing="no such file; the tune role "
                                                                                "writes it"), str(path))

    def to_dict(self) -> dict:
        """The record as ``tune.json`` holds it, with its schema."""
        out = asdict(self)
        out["load"] = out.pop("bench_load")
        return {"schema": SCHEMA, **out}

    def dump(self, directory: str | Path) -> Path:
        """Write ``DIR/tune.json`` atomically; its path."""
        return write_json(Path(directory) / TUNE_JSON, self.to_dict())


def main(argv: list[str] | None = None) -> int:
    return write_main(argv, PROG, "a tune's record", TUNE_JSON,
                      lambda directory, values: TuneRecord.from_dict(values, "the tune's values").dump(directory))


if __name__ == "__main__":
    sys.exit(main())
