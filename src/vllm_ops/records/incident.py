"""``incident.json``: one of the watch's incidents (a hung engine), as the watch wrote it on the host.

::

    {schema: "vllm-ops/incident/1", time (the incident's UTC time, also its directory's name), unit,
     invocation_id, main_pid, verdict, stall (the watch's reading when it judged the engine stalled, or
     null), nccl_environment {NAME: value}, nvidia_smi (whether nvidia-smi.txt was kept), processes
     [{pid, role, rank, name, state, wchan, threads, py_spy, py_spy_error}...] (the service's processes,
     each with its Python stack), action (what the watch did: {taken: "restart" | "none", ok, why,
     old_main_pid, main_pid, seconds_to_healthy, load}, or null while it is still deciding)}

The watch (``roles/vllm/files/vllm_ops_watch.py``, on the host, where this package is not) writes the
file; it is read on the controller only through :class:`IncidentRecord`. A file without ``schema`` is
an earlier release's (schema 0): the same fields; it reads as schema 1. A file of a later schema is
refused: a newer vllm-ops wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from .base import Record, flag, object_or_null, text
from .errors import RecordError

__all__ = ["INCIDENT_JSON", "SCHEMA", "IncidentRecord"]

SCHEMA = "vllm-ops/incident/1"
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
    unit: str | None = None
    invocation_id: str | None = None
    main_pid: int | None = None
    stall: dict | None = None
    nccl_environment: dict = field(default_factory=dict)
    nvidia_smi: bool = False
    processes: list[dict] = field(default_factory=list)
    action: dict | None = None

    @classmethod
    def from_dict(cls, data: object, where: str = INCIDENT_JSON) -> IncidentRecord:
        """The record of ``data`` (a parsed ``incident.json``), checked; an earlier schema's migrated. Every
        problem names ``where`` and the field."""
        data = cls.header(data, where)
        main_pid = data.get("main_pid")
        if main_pid is not None and (isinstance(main_pid, bool) or not isinstance(main_pid, int) or main_pid < 0):
            raise RecordError(f"{where}: 'main_pid' must be a process id (an integer >= 0) or null, got {main_pid!r}")
        processes = data.get("processes") or []
        if not isinstance(processes, list) or not all(isinstance(p, Mapping) for p in processes):
            raise RecordError(f"{where}: 'processes' must be a list of objects, one per process of the service")
        nccl = object_or_null(data, "nccl_environment", where) or {}
        return cls(time=text(data, "time", where), verdict=text(data, "verdict", where),
                   unit=text(data, "unit", where, required=False),
                   invocation_id=text(data, "invocation_id", where, required=False), main_pid=main_pid,
                   stall=object_or_null(data, "stall", where), nccl_environment=nccl,
                   nvidia_smi=flag(data, "nvidia_smi", where),
                   processes=[dict(p) for p in processes], action=object_or_null(data, "action", where))

    def finished(self) -> bool:
        """Whether the watch has written the incident's outcome: an action, and for a restart its result."""
        return self.action is not None and not (self.action.get("taken") == "restart" and self.action.get("ok") is None)
