"""``experiment.json``: one host's benchmark of a baseline and its variants, the record every job that
benchmarks keeps in the experiment's layout (the experiment; the tune's ``experiment/``; the rollout's
canary, whose change is the one variant), so that all are judged by :mod:`vllm_ops.experiment`.

::

    {schema: "vllm-ops/experiment/1", id, host, started_at, finished_at, model, vllm_version,
     tensor_parallel_size, load (what the benchmark sent: vllm_ops.experiment.load.recorded),
     noise_floor_pct, base {environment, extra_args} (the normal service's settings),
     downtime (the health poller's record, or null), stopped (the error that stopped the job, or null),
     variants [{name, environment, extra_args, profile, status, failure, profile_report,
                profile_headline}],
     runs [{variant, round, concurrency, repeat, file, metrics, fidelity (a replay's)}]}

``status`` is ``ok``, ``failed`` (with ``failure {stage, message, journal}``) or ``not run`` (the job
stopped before the variant). A load that replayed a recording (``load.traffic``) has one point,
concurrency 0 (the recording's own arrivals), and each run its ``fidelity`` ``{valid, message, checks}``
(:func:`vllm_ops.traffic.fidelity`). ``baseline`` is the normal service's name, measured in round 1 and, where
the job measured it again at its end, round 2. A file without ``schema`` is an earlier release's
(schema 0): the same fields, any of ``started_at``, ``finished_at``, ``tensor_parallel_size``,
``downtime``, ``stopped`` and ``noise_floor_pct`` (1.0) absent. A later schema is refused.

The jobs hand the values to ``python -m vllm_ops.records write experiment DIR`` (a JSON object on
stdin, ``finished_at`` now unless given), which checks them and writes ``DIR/experiment.json``.
Each run's bench result file is read by :func:`vllm_ops.experiment.load_experiment`, not here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from .base import Record, text
from .errors import RecordError

__all__ = ["BASELINE", "EXPERIMENT_JSON", "SCHEMA", "STATUSES", "ExperimentRecord"]

SCHEMA = "vllm-ops/experiment/1"
EXPERIMENT_JSON = "experiment.json"
BASELINE = "baseline"  # the reserved variant name of the normal service, rounds 1 (start) and 2 (end)
STATUSES = ("ok", "failed", "not run")  # "not run": the job stopped before the variant


@dataclass(frozen=True)
class ExperimentRecord(Record):
    """One host's benchmark of a baseline and its variants (the module's docstring)."""

    SCHEMA: ClassVar[str] = SCHEMA
    FILE: ClassVar[str] = EXPERIMENT_JSON
    TITLE: ClassVar[str] = "an experiment record"
    READ_AS: ClassVar[str] = "experiment"
    MISSING: ClassVar[str | None] = "no such file; check the experiment directory (the Ansible role writes it)"
    DAMAGED: ClassVar[str] = "; the file is damaged or was cut short, so re-run that step"
    VALUES_AS: ClassVar[str] = "the experiment's values"

    id: str
    host: str
    load: dict
    started_at: str | None = None
    finished_at: str | None = None
    model: str | None = None
    vllm_version: str | None = None
    tensor_parallel_size: int | None = None
    noise_floor_pct: float = 1.0
    base: dict = field(default_factory=lambda: {"environment": {}, "extra_args": []})
    downtime: dict | None = None
    stopped: str | None = None
    variants: list[dict] = field(default_factory=list)
    runs: list[dict] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: object, where: str = EXPERIMENT_JSON) -> ExperimentRecord:
        """The record of ``data`` (a parsed ``experiment.json``, or a job's values), checked; an earlier
        schema's migrated. Every problem names ``where`` and the field."""
        data = cls.header(data, where)
        values: dict = {key: text(data, key, where) for key in ("id", "host")}
        for key in ("started_at", "finished_at", "model", "vllm_version", "stopped"):
            values[key] = text(data, key, where, required=False)
        tp = data.get("tensor_parallel_size")
        if tp is not None and (not isinstance(tp, int) or isinstance(tp, bool) or tp < 1):
            raise RecordError(f"{where}: 'tensor_parallel_size' must be a positive integer or null, got {tp!r}")
        values["tensor_parallel_size"] = tp
        values["load"] = _load(where, data)
        floor = data.get("noise_floor_pct", 1.0)
        if not _number(floor) or floor < 0:
            raise RecordError(f"{where}: 'noise_floor_pct' must be a non-negative number, got {floor!r}")
        values["noise_floor_pct"] = float(floor)
        base = _mapping(where, data, "base")
        values["base"] = {"environment": {str(k): str(x) for k, x in
                                          _mapping(f"{where}: base", base, "environment").items()},
                          "extra_args": _args(f"{where}: base", base)}
        values["downtime"] = _mapping(where, data, "downtime") or None
        variants = data.get("variants") or []
        if not isinstance(variants, list):
            raise RecordError(f"{where}: 'variants' must be a list, got {type(variants).__name__}")
        values["variants"] = [_variant(where, i, v) for i, v in enumerate(variants)]
        names = [v["name"] for v in values["variants"]]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise RecordError(f"{where}: variant names must be unique; {', '.join(dup)} appear twice")
        runs = data.get("runs") or []
        if not isinstance(runs, list):
            raise RecordError(f"{where}: 'runs' must be a list, got {type(runs).__name__}")
        values["runs"] = [_run(where, i, r, set(names), values["load"]["concurrencies"]) for i, r in enumerate(runs)]
        return cls(**values)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _mapping(where: str, data: Mapping, key: str) -> dict:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RecordError(f"{where}: '{key}' must be a mapping, got {type(value).__name__}")
    return dict(value)


def _args(where: str, data: Mapping) -> list[str]:
    value = data.get("extra_args")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise RecordError(f"{where}: 'extra_args' must be a list of strings, got {value!r}")
    return list(value)


def _load(where: str, data: Mapping) -> dict:
    load = _mapping(where, data, "load")
    conc = load.get("concurrencies")
    if load.get("traffic"):
        # a replay: one point, the recording's own arrivals (vllm_ops.experiment.load.REPLAY)
        if conc != [0]:
            raise RecordError(f"{where}: 'load.concurrencies' of a replay (load.traffic) must be [0], got {conc!r}")
    elif (not isinstance(conc, list) or not conc or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0
                                                            for c in conc)):
        raise RecordError(f"{where}: 'load.concurrencies' must be a non-empty list of positive integers, "
                          f"got {conc!r}")
    if len(set(conc)) != len(conc):
        raise RecordError(f"{where}: 'load.concurrencies' lists a concurrency twice: {conc!r}")
    for key in ("input_len", "output_len", "num_prompts", "repeats", "warmups"):
        v = load.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise RecordError(f"{where}: 'load.{key}' must be a non-negative integer, got {v!r}")
    return load


def _variant(where: str, i: int, v: object) -> dict:
    at = f"{where}: variants[{i}]"
    if not isinstance(v, Mapping):
        raise RecordError(f"{at} must be a mapping, got {type(v).__name__}")
    name = text(v, "name", at)
    if name == BASELINE:
        raise RecordError(f"{at}: the name '{BASELINE}' is reserved for the normal service; rename it")
    status = v.get("status", "ok")
    if status not in STATUSES:
        raise RecordError(f"{at} ({name}): 'status' must be one of {list(STATUSES)}, got {status!r}")
    failure = v.get("failure")
    if failure is not None:
        if not isinstance(failure, Mapping):
            raise RecordError(f"{at} ({name}): 'failure' must be a mapping or null")
        journal = failure.get("journal") or []
        if not isinstance(journal, list) or not all(isinstance(line, str) for line in journal):
            raise RecordError(f"{at} ({name}): 'failure.journal' must be a list of strings")
        failure = {"stage": failure.get("stage"), "message": failure.get("message"), "journal": list(journal)}
    if status == "failed" and failure is None:
        failure = {"stage": None, "message": "no failure recorded", "journal": []}
    # A null value unsets the variable (the vllm role's UnsetEnvironment=): kept as None.
    env = {str(k): None if x is None else str(x) for k, x in _mapping(f"{at} ({name})", v, "environment").items()}
    profile = {key: v.get(key) for key in ("profile_report", "profile_headline")}
    for key, value in profile.items():
        if value is not None and not isinstance(value, str):
            raise RecordError(f"{at} ({name}): '{key}' must be a string or null")
    return {"name": name, "environment": env, "extra_args": _args(f"{at} ({name})", v),
            "profile": bool(v.get("profile", False)), "status": status, "failure": failure, **profile}


def _run(where: str, i: int, r: object, names: set, concurrencies: list) -> dict:
    at = f"{where}: runs[{i}]"
    if not isinstance(r, Mapping):
        raise RecordError(f"{at} must be a mapping, got {type(r).__name__}")
    variant = text(r, "variant", at)
    if variant != BASELINE and variant not in names:
        raise RecordError(f"{at}: variant {variant!r} is not 'baseline' nor listed in 'variants'")
    rnd = r.get("round", 1)
    if rnd not in ((1, 2) if variant == BASELINE else (1,)):
        raise RecordError(f"{at}: 'round' must be 1 or 2 for the baseline and 1 for a variant, got {rnd!r}")
    conc = r.get("concurrency")
    if conc not in concurrencies:
        raise RecordError(f"{at}: 'concurrency' {conc!r} is not one of load.concurrencies {concurrencies}")
    metrics = _mapping(at, r, "metrics")
    for k, v in metrics.items():
        if not _number(v):
            raise RecordError(f"{at}: 'metrics.{k}' must be a number, got {v!r}")
    fidelity = r.get("fidelity")
    if fidelity is not None and (not isinstance(fidelity, Mapping) or not isinstance(fidelity.get("valid"), bool)):
        raise RecordError(f"{at}: 'fidelity' must be a mapping with a boolean 'valid', or absent")
    out = {"variant": variant, "round": rnd, "concurrency": conc, "repeat": r.get("repeat"),
           "file": text(r, "file", at), "metrics": metrics}
    # a replay's run: whether it reproduced the recording (vllm_ops.traffic.fidelity)
    return out | ({"fidelity": dict(fidelity)} if fidelity is not None else {})
