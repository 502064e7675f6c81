"""Read and check an experiment directory: ``DIR/experiment.json`` and the ``vllm bench serve
--save-result`` JSON of each run it lists (paths relative to ``DIR``).

:func:`load_experiment` returns the experiment dict with each run's bench result under
``run["result"]`` (only the keys this package reads, checked). Every problem is an
:class:`ExperimentInputError` naming the file and field and saying what to do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from .. import loadcost
from ..cliutil import read_json
from .errors import ExperimentInputError

BASELINE = "baseline"  # the reserved variant name of the normal service, rounds 1 (start) and 2 (end)
STATUSES = ("ok", "failed", "not run")  # "not run": the experiment stopped before the variant
# The nine per-run figures, as vLLM 0.32's --save-result names them; direction: lower or higher is better.
METRICS: dict[str, str] = {
    "median_ttft_ms": "lower", "p99_ttft_ms": "lower",
    "median_tpot_ms": "lower", "p99_tpot_ms": "lower",
    "median_itl_ms": "lower", "p99_itl_ms": "lower",
    "median_e2el_ms": "lower", "p99_e2el_ms": "lower",
    "output_throughput": "higher",
}
COUNTERS = ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
            "spec_decode_num_accepted_tokens_total", "num_preemptions_total", "request_success_total")


def _read_json(path: Path, what: str) -> object:
    return read_json(path, what, ExperimentInputError,
                     missing="no such file; check the experiment directory (the Ansible role writes it)",
                     damaged="; the file is damaged or was cut short, so re-run that step")


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _str(where: str, data: Mapping, key: str, required: bool = True) -> str | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ExperimentInputError(f"{where}: '{key}' must be a non-empty string, got {value!r}")
    return value


def _mapping(where: str, data: Mapping, key: str) -> dict:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ExperimentInputError(f"{where}: '{key}' must be a mapping, got {type(value).__name__}")
    return dict(value)


def _args(where: str, data: Mapping) -> list[str]:
    value = data.get("extra_args")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise ExperimentInputError(f"{where}: 'extra_args' must be a list of strings, got {value!r}")
    return list(value)


def _load(where: str, data: Mapping) -> dict:
    load = _mapping(where, data, "load")
    conc = load.get("concurrencies")
    if (not isinstance(conc, list) or not conc or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0
                                                          for c in conc)):
        raise ExperimentInputError(f"{where}: 'load.concurrencies' must be a non-empty list of positive integers, "
                                   f"got {conc!r}")
    if len(set(conc)) != len(conc):
        raise ExperimentInputError(f"{where}: 'load.concurrencies' lists a concurrency twice: {conc!r}")
    for key in ("input_len", "output_len", "num_prompts", "repeats", "warmups"):
        v = load.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise ExperimentInputError(f"{where}: 'load.{key}' must be a non-negative integer, got {v!r}")
    return load


def _variant(where: str, i: int, v: object) -> dict:
    at = f"{where}: variants[{i}]"
    if not isinstance(v, Mapping):
        raise ExperimentInputError(f"{at} must be a mapping, got {type(v).__name__}")
    name = _str(at, v, "name")
    if name == BASELINE:
        raise ExperimentInputError(f"{at}: the name '{BASELINE}' is reserved for the normal service; rename it")
    status = v.get("status", "ok")
    if status not in STATUSES:
        raise ExperimentInputError(f"{at} ({name}): 'status' must be one of {list(STATUSES)}, got {status!r}")
    failure = v.get("failure")
    if failure is not None:
        if not isinstance(failure, Mapping):
            raise ExperimentInputError(f"{at} ({name}): 'failure' must be a mapping or null")
        journal = failure.get("journal") or []
        if not isinstance(journal, list) or not all(isinstance(line, str) for line in journal):
            raise ExperimentInputError(f"{at} ({name}): 'failure.journal' must be a list of strings")
        failure = {"stage": failure.get("stage"), "message": failure.get("message"), "journal": list(journal)}
    if status == "failed" and failure is None:
        failure = {"stage": None, "message": "no failure recorded", "journal": []}
    # A null value unsets the variable (the vllm role's UnsetEnvironment=): kept as None.
    env = {str(k): None if x is None else str(x) for k, x in _mapping(f"{at} ({name})", v, "environment").items()}
    profile = {key: v.get(key) for key in ("profile_report", "profile_headline")}
    for key, value in profile.items():
        if value is not None and not isinstance(value, str):
            raise ExperimentInputError(f"{at} ({name}): '{key}' must be a string or null")
    return {"name": name, "environment": env, "extra_args": _args(f"{at} ({name})", v),
            "profile": bool(v.get("profile", False)), "status": status, "failure": failure, **profile}


def _result(path: Path, where: str) -> dict:
    data = _read_json(path, f"{where}: bench result")
    if not isinstance(data, Mapping):
        raise ExperimentInputError(f"{where}: bench result {path} must be a JSON object "
                                   "(vllm bench serve --save-result)")
    out: dict = {}
    for key in ("completed", "failed"):
        v = data.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ExperimentInputError(f"{where}: bench result {path}: '{key}' must be a non-negative integer, "
                                       f"got {v!r}; is this a vllm bench serve --save-result file?")
        out[key] = v
    for key in METRICS:
        v = data.get(key)
        if v is not None and (not _number(v) or v < 0):
            raise ExperimentInputError(f"{where}: bench result {path}: '{key}' must be a non-negative number, "
                                       f"got {v!r}")
        out[key] = v
    for key in ("max_concurrency", "num_prompts", "duration"):
        out[key] = data.get(key)
    return out


def load_experiment(directory: str | Path) -> dict:
    """The checked experiment of ``directory``; runs carry ``result`` (the bench figures read)
    and ``metrics`` (counter deltas, missing keys being metrics the server does not have)."""
    d = Path(directory)
    path = d / "experiment.json"
    data = _read_json(path, "experiment")
    where = str(path)
    if not isinstance(data, Mapping):
        raise ExperimentInputError(f"{where}: must be a JSON object, got {type(data).__name__}")
    exp = {
        "dir": str(d), "id": _str(where, data, "id"), "host": _str(where, data, "host"),
        "started_at": _str(where, data, "started_at", False), "finished_at": _str(where, data, "finished_at", False),
        "model": data.get("model"), "vllm_version": data.get("vllm_version"), "load": _load(where, data),
        # The health poller's record of the whole experiment (the campaign's), or null.
        "downtime": _mapping(where, data, "downtime") or None,
        # The model loads the job caused and the disk's floor, from the job's job.json (null: none yet).
        "model_loads": loadcost.read_job(d),
    }
    floor = data.get("noise_floor_pct", 1.0)
    if not _number(floor) or floor < 0:
        raise ExperimentInputError(f"{where}: 'noise_floor_pct' must be a non-negative number, got {floor!r}")
    exp["noise_floor_pct"] = float(floor)
    base = _mapping(where, data, "base")
    exp["base"] = {"environment": {str(k): str(x) for k, x in _mapping(f"{where}: base", base, "environment").items()},
                   "extra_args": _args(f"{where}: base", base)}
    variants = data.get("variants") or []
    if not isinstance(variants, list):
        raise ExperimentInputError(f"{where}: 'variants' must be a list, got {type(variants).__name__}")
    exp["variants"] = [_variant(where, i, v) for i, v in enumerate(variants)]
    names = [v["name"] for v in exp["variants"]]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ExperimentInputError(f"{where}: variant names must be unique; {', '.join(dup)} appear twice")
    runs = data.get("runs") or []
    if not isinstance(runs, list):
        raise ExperimentInputError(f"{where}: 'runs' must be a list, got {type(runs).__name__}")
    exp["runs"] = [_run(d, where, i, r, set(names), exp["load"]["concurrencies"]) for i, r in enumerate(runs)]
    return exp


def _run(d: Path, where: str, i: int, r: object, names: set, concurrencies: list) -> dict:
    at = f"{where}: runs[{i}]"
    if not isinstance(r, Mapping):
        raise ExperimentInputError(f"{at} must be a mapping, got {type(r).__name__}")
    variant = _str(at, r, "variant")
    if variant != BASELINE and variant not in names:
        raise ExperimentInputError(f"{at}: variant {variant!r} is not 'baseline' nor listed in 'variants'")
    rnd = r.get("round", 1)
    if rnd not in ((1, 2) if variant == BASELINE else (1,)):
        raise ExperimentInputError(f"{at}: 'round' must be 1 or 2 for the baseline and 1 for a variant, got {rnd!r}")
    conc = r.get("concurrency")
    if conc not in concurrencies:
        raise ExperimentInputError(f"{at}: 'concurrency' {conc!r} is not one of load.concurrencies {concurrencies}")
    metrics = _mapping(at, r, "metrics")
    for k, v in metrics.items():
        if not _number(v):
            raise ExperimentInputError(f"{at}: 'metrics.{k}' must be a number, got {v!r}")
    file = _str(at, r, "file")
    return {"variant": variant, "round": rnd, "concurrency": conc, "repeat": r.get("repeat"), "file": file,
            "metrics": metrics, "result": _result(d / file, at)}
