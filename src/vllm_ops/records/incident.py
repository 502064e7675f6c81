"""``incident.json``: one of the watch's incidents (a hung engine, or a slowdown), as the watch wrote it.

::

    {schema: "vllm-ops/incident/2", kind ("stall" | "slowdown"), time (the incident's UTC time, also its
     directory's name), unit, invocation_id, main_pid, verdict, stall (the watch's reading when it judged the
     engine stalled, or null), nccl_environment {NAME: value}, nvidia_smi (whether nvidia-smi.txt was kept),
     processes [{pid, role, rank, name, state, wchan, threads, py_spy, py_spy_error}...] (a stall's: the
     service's processes, each with its Python stack), slowdown (a slowdown's, else null: {since, held_s,
     latest (the last judged interval: step_ms, expected_ms, residual, band, batch, kv, ...), intervals (those
     above the band), baseline, fitted_at, host_at_baseline, host_now, changes [words]}), capture (a
     slowdown's live capture, where one ran: {ok, why, prefix, started_at, finished_at, seconds,
     stop_profile_s, tensor_parallel_size, traces [{rank, file, bytes, sha256}]}, its files in capture/),
     action (what the watch did: {taken: "restart" | "capture" | "none", ok, why, old_main_pid, main_pid,
     seconds_to_healthy, load}, or null while it is still deciding)}

The watch (``roles/vllm/files/vllm_ops_watch.py``, on the host, where this package is not) writes the
file; it is read on the controller only through :class:`IncidentRecord`. Schema 1 (and a file without
``schema``, schema 0) is an earlier release's: a stall's, without ``kind``, ``slowdown`` and ``capture``;
it reads as schema 2 of kind ``stall``. A file of a later schema is refused: a newer vllm-ops wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from .base import Record, flag, object_or_null, text
from .errors import RecordError

__all__ = ["INCIDENT_JSON", "SCHEMA", "IncidentRecord"]

SCHEMA = "vllm-ops/incident/2"
EARLIER = ("vllm-ops/incident/1",)  # read as this one, of kind "stall"
KINDS = ("stall", "slowdown")
INCIDENT_JSON = "incident.json"


@dataclass(frozen=True)
class IncidentRecord(Record):
    """One incident as the watch recorded it (the module's docstring)."""

    SCHEMA: ClassVar[str] = SCHEMA
    FILE: ClassVar[str] = INCIDENT_JSON
    TITLE: ClassVar[str] = "an incident record"
    READ_AS: ClassVar[str] = "incident"
    DAMAGED: ClassVar[str] = "; the file is damaged or was cut short: fetch it again (playbooks/incidents.yml)"
    VALUES_AS: ClassVar[str] = "the incident's values"

    time: str
    verdict: str
    kind: str = "stall"
    unit: str | None = None
    invocation_id: str | None = None
    main_pid: int | None = None
    stall: dict | None = None
    nccl_environment: dict = field(default_factory=dict)
    nvidia_smi: bool = False
    processes: list[dict] = field(default_factory=list)
    slowdown: dict | None = None
    capture: dict | None = None
    action: dict | None = None

    @classmethod
    def from_dict(cls, data: object, where: str = INCIDENT_JSON) -> IncidentRecord:
        """The record of ``data`` (a parsed ``incident.json``), checked; an earlier schema's migrated. Every
        problem names ``where`` and the field."""
        if isinstance(data, Mapping) and data.get("schema") in EARLIER:
            data = {k: v for k, v in data.items() if k != "schema"}
        data = cls.header(data, where)
        kind = data.get("kind", "stall")
        if kind not in KINDS:
            raise RecordError(f"{where}: 'kind' must be one of {', '.join(KINDS)}, got {kind!r}")
        main_pid = data.get("main_pid")
        if main_pid is not None and (isinstance(main_pid, bool) or not isinstance(main_pid, int) or main_pid < 0):
            raise RecordError(f"{where}: 'main_pid' must be a process id (an integer >= 0) or null, got {main_pid!r}")
        processes = data.get("processes") or []
        if not isinstance(processes, list) or not all(isinstance(p, Mapping) for p in processes):
            raise RecordError(f"{where}: 'processes' must be a list of objects, one per process of the service")
        nccl = object_or_null(data, "nccl_environment", where) or {}
        return cls(time=text(data, "time", where), verdict=text(data, "verdict", where), kind=kind,
                   unit=text(data, "unit", where, required=False),
                   invocation_id=text(data, "invocation_id", where, required=False), main_pid=main_pid,
                   stall=object_or_null(data, "stall", where), nccl_environment=nccl,
                   nvidia_smi=flag(data, "nvidia_smi", where),
                   processes=[dict(p) for p in processes], slowdown=object_or_null(data, "slowdown", where),
                   capture=object_or_null(data, "capture", where), action=object_or_null(data, "action", where))

    def finished(self) -> bool:
        """Whether the watch has written the incident's outcome: an action, and for a restart its result."""
        return self.action is not None and not (self.action.get("taken") in ("restart", "capture")
                                                and self.action.get("ok") is None)
