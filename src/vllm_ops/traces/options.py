"""What a summary is asked for: :class:`SummaryOptions`, every choice of :func:`.summary.summarize` but the
files, and :meth:`SummaryOptions.resolve`, the same choices checked and read (the floor's file, the
checkpoint's record) before any trace is.

``decode_pattern`` / ``prefill_pattern`` override the annotation families for that phase
(:class:`.annotations.StepMatcher`). ``categories`` adds classification rules ahead of the built-in
table (:func:`.categories.parse_rules`). ``context`` tells the advisor about the hardware:
``interconnect`` (``nvlink``/``pcie``), ``gpu``, ``tensor_parallel_size``, ``cuda_graphs``; what it
lacks comes from the traces where they say it. ``allreduce_floor`` is the host's measured all-reduce
floor (:mod:`vllm_ops.allreduce.floor`: a path to allreduce_bench's JSON, or the dict), set beside each
collective's transfer, and its measured copy the bandwidth of the ledger's floors. ``checkpoint`` (a
model directory, its record as ``capture.json`` keeps it, or a JSON file of either) turns on the decode
ledger; ``tokens`` and ``key_tokens`` are given to it, replacing the steps' own
(:func:`vllm_ops.ledger.decode_ledger`). ``fabric``: the capture's PCIe findings
(:func:`vllm_ops.fabric.findings`), for the warnings and the verdict. ``jobs`` bounds the worker
processes (default: one per file, at most one per CPU). ``exclude`` names files never to read, by path
or as ``(st_dev, st_ino)`` (the file the summary is being written to; :func:`.reader.find_rank_traces`
says how directories are read). ``keep_going``: a bad file only adds a warning, unless every file is
bad. ``top``: the kernels kept per phase. ``parser``: the reader's (:func:`.reader.read_trace`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .. import ledger as ledger_mod
from ..allreduce import floor
from .categories import Classifier, Rule, parse_rules
from .errors import TraceInputError
from .reader import file_id

__all__ = ["Resolved", "SummaryOptions"]


@dataclass(frozen=True)
class SummaryOptions:
    """Every choice of a summary but its files (the module's docstring says what each does)."""

    decode_pattern: str | None = None
    prefill_pattern: str | None = None
    keep_going: bool = False
    top: int = 10
    categories: object = None
    jobs: int | None = None
    parser: str = "auto"
    context: Mapping | None = None
    allreduce_floor: object = None
    exclude: Iterable = ()
    checkpoint: object = None
    tokens: int | None = None
    key_tokens: int | None = None
    fabric: Sequence[Mapping] | None = None

    def resolve(self) -> Resolved:
        """The options checked, and what they name read; a :class:`TraceInputError` (or the floor's or
        the checkpoint's own error) with a one-line message for a bad one."""
        top = self.top
        if isinstance(top, bool) or not isinstance(top, int) or top < 0:
            raise TraceInputError(f"top must be a non-negative integer, got {top!r}")
        for what, pattern in (("decode_pattern", self.decode_pattern), ("prefill_pattern", self.prefill_pattern)):
            if pattern is not None:
                _compile(what, pattern)
        if self.context is not None and not isinstance(self.context, Mapping):
            raise TraceInputError(f"context must be a mapping, got {type(self.context).__name__}")
        measured_floor = floor.load_floor(self.allreduce_floor) if self.allreduce_floor is not None else None
        record = ledger_mod.load_checkpoint(self.checkpoint) if self.checkpoint is not None else None
        for what, value in (("tokens", self.tokens), ("key_tokens", self.key_tokens)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise TraceInputError(f"{what} must be a non-negative integer, got {value!r}")
        pcie = _fabric(self.fabric)
        rules = parse_rules(self.categories)
        Classifier(rules)  # validate the user's regexes here, once, with a clean message
        jobs = self.jobs
        if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
            raise TraceInputError(f"jobs must be a positive integer, got {jobs!r}")
        excluded = frozenset(i for i in (x if isinstance(x, tuple) else file_id(os.fspath(x)) for x in self.exclude)
                             if i is not None)
        return Resolved(self, dict(self.context or {}), measured_floor, record, pcie, rules, excluded)


@dataclass(frozen=True)
class Resolved:
    """:class:`SummaryOptions` checked: ``floor`` the measured floor read (or None), ``checkpoint`` its
    record (or None), ``fabric`` the PCIe findings (a list), ``rules`` the classification rules,
    ``excluded`` the files never to read, as ``(st_dev, st_ino)``."""

    options: SummaryOptions
    context: dict
    floor: dict | None
    checkpoint: Mapping | None
    fabric: list[dict]
    rules: list[Rule]
    excluded: frozenset = field(default_factory=frozenset)


def _fabric(found: object) -> list[dict]:
    """The PCIe findings given, checked: a list of :func:`vllm_ops.fabric.findings`' mappings."""
    if found is None:
        return []
    if not isinstance(found, Sequence) or isinstance(found, (str, bytes)) or not all(
            isinstance(f, Mapping) and f.get("kind") in ("pcie-link-degraded", "p2p-unavailable") for f in found):
        raise TraceInputError("fabric: expected vllm_ops.fabric.findings' list of findings")
    return [dict(f) for f in found]


def _compile(what: str, pattern: str) -> re.Pattern:
    if not isinstance(pattern, str) or not pattern:
        raise TraceInputError(f"{what}: expected a non-empty regular expression, got {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise TraceInputError(f"{what}: invalid regular expression {pattern!r}: {exc}") from None
