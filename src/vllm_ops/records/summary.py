"""``summary.json``: a trace summary (:func:`vllm_ops.traces.summarize`'s answer) as the campaign's report
and the watch's incidents keep it, and as ``vllm-trace-summary --format json`` prints it.

::

    {schema: "vllm-ops/summary/1", decode_pattern, prefill_pattern, world_size, gpu_time_measured,
     ranks_without_gpu_kernels [rank...], ranks [{rank, file, steps [...], decomposition, ...}...],
     steady_state, pace, regimes [...], stalls, coverage, inputs, sanity, collectives, allreduce_floor,
     verdict, context, ledger, fabric [...], allreduce, prefill [...], warnings [text...]}

:mod:`vllm_ops.traces.summary` defines every figure; this module owns the file: its fields, their
types at the top level (each rank an object, the warnings texts), read (``load``), checked and written
(``dump``) with its schema. A file without ``schema`` is an earlier release's (schema 0): fields were
only ever added to it, so it reads as schema 1 with the fields it lacks null (a list field empty). A
file of a later schema is refused: a newer vllm-ops wrote it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import ClassVar

from ..artifacts import SUMMARY_JSON
from .base import Record, object_or_null, text
from .errors import RecordError

__all__ = ["SCHEMA", "SummaryRecord", "checked"]

SCHEMA = "vllm-ops/summary/1"
FIX = "summarize the traces again (vllm-trace-summary, or vllm-campaign-report analyze DIR)"


@dataclass(frozen=True)
class SummaryRecord(Record):
    """One trace summary (the module's docstring); its fields in the order the summarizer gives them."""

    SCHEMA: ClassVar[str] = SCHEMA
    FILE: ClassVar[str] = SUMMARY_JSON
    TITLE: ClassVar[str] = "a trace summary"
    READ_AS: ClassVar[str] = "summary"
    DAMAGED: ClassVar[str] = f"; the file is damaged or was cut short: {FIX}"
    VALUES_AS: ClassVar[str] = "the summary"
    # the fields that are lists, texts, or of one type or null; every other is an object or null
    LISTS: ClassVar[tuple[str, ...]] = ("ranks", "ranks_without_gpu_kernels", "regimes", "fabric", "prefill",
                                        "warnings")
    TEXTS: ClassVar[tuple[str, ...]] = ("decode_pattern", "prefill_pattern")
    TYPED: ClassVar[dict[str, type]] = {"world_size": int, "gpu_time_measured": bool}

    decode_pattern: str | None = None
    prefill_pattern: str | None = None
    world_size: int | None = None
    gpu_time_measured: bool | None = None
    ranks_without_gpu_kernels: list = field(default_factory=list)
    ranks: list[dict] = field(default_factory=list)
    steady_state: dict | None = None
    pace: dict | None = None
    regimes: list = field(default_factory=list)
    stalls: dict | None = None
    coverage: dict | None = None
    inputs: dict | None = None
    sanity: dict | None = None
    collectives: dict | None = None
    allreduce_floor: dict | None = None
    verdict: dict | None = None
    context: dict | None = None
    ledger: dict | None = None
    fabric: list = field(default_factory=list)
    allreduce: dict | None = None
    prefill: list = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: object, where: str = SUMMARY_JSON) -> SummaryRecord:
        """``data`` checked at the top level (the module's docstring); an earlier schema's read as this
        one. Every problem names ``where``, the field and what to do."""
        data = cls.header(data, where)
        values: dict = {}
        for f in fields(cls):
            if f.name in cls.LISTS:
                values[f.name] = _list(data, f.name, where)
            elif f.name in cls.TEXTS:
                values[f.name] = text(data, f.name, where, required=False)
            elif f.name in cls.TYPED:
                values[f.name] = _typed(data, f.name, cls.TYPED[f.name], where)
            else:
                values[f.name] = object_or_null(data, f.name, where)
        for i, rank in enumerate(values["ranks"]):
            if not isinstance(rank, Mapping):
                raise RecordError(f"{where}: 'ranks' entry {i} must be an object, not {type(rank).__name__}; {FIX}")
        if not all(isinstance(w, str) for w in values["warnings"]):
            raise RecordError(f"{where}: 'warnings' must be a list of texts; {FIX}")
        return cls(**values)


def checked(summary: object, where: str = "the summary") -> Mapping:
    """``summary`` (:func:`vllm_ops.traces.summarize`'s answer, or a ``summary.json`` read) as the record reads
    it: checked, and a list field it lacks (an earlier release's) empty. The one check of a summary, for every
    function that takes one; else :class:`RecordError` naming ``where``. A shallow copy where a list was
    missing, else ``summary`` itself."""
    SummaryRecord.from_dict(summary, where)
    missing = {name: [] for name in SummaryRecord.LISTS if summary.get(name) is None}
    return {**summary, **missing} if missing else summary


def _list(data: Mapping, key: str, where: str) -> list:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise RecordError(f"{where}: '{key}' must be a list, not {type(value).__name__}; {FIX}")
    return list(value)


def _typed(data: Mapping, key: str, kind: type, where: str) -> object:
    """A field of ``kind`` or null (a bool is no int)."""
    value = data.get(key)
    if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
        raise RecordError(f"{where}: '{key}' must be {kind.__name__} or null, got {value!r}; {FIX}")
    return value
