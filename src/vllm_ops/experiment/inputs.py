"""Read and check an experiment directory: ``DIR/experiment.json`` and the ``vllm bench serve
--save-result`` JSON of each run it lists (paths relative to ``DIR``).

:func:`load_experiment` returns the experiment dict with each run's bench result under
``run["result"]`` (only the keys this package reads, checked); the record itself is
:mod:`vllm_ops.records.experiment`'s. Every problem is an
:class:`ExperimentInputError` naming the file and field and saying what to do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from .. import loadcost
from ..cliutil import read_json
from ..records import RecordError
from ..records.experiment import BASELINE, EXPERIMENT_JSON, STATUSES, ExperimentRecord
from .errors import ExperimentInputError

__all__ = ["BASELINE", "COUNTERS", "METRICS", "STATUSES", "load_experiment"]

# The nine per-run figures, as vLLM 0.32's --save-result names them; direction: lower or higher is better.
METRICS: dict[str, str] = {
    "median_ttft_ms": "lower", "p99_ttft_ms": "lower",
    "median_tpot_ms": "lower", "p99_tpot_ms": "lower",
    "median_itl_ms": "lower", "p99_itl_ms": "lower",
    "median_e2el_ms": "lower", "p99_e2el_ms": "lower",
    "output_throughput": "higher",
}
# A replay's expectation in an experiment directory (vllm-experiment-report replay --out DIR/bench).
REPLAY_JSON = "bench/replay.json"
COUNTERS = ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
            "spec_decode_num_accepted_tokens_total", "num_preemptions_total", "request_success_total")


def _read_json(path: Path, what: str) -> object:
    return read_json(path, what, ExperimentInputError,
                     missing="no such file; check the experiment directory (the Ansible role writes it)",
                     damaged="; the file is damaged or was cut short, so re-run that step")


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


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
    """The checked experiment of ``directory`` (its ``experiment.json``, read through
    :class:`vllm_ops.records.experiment.ExperimentRecord`); runs carry ``result`` (the bench figures
    read) and ``metrics`` (counter deltas, missing keys being metrics the server does not have)."""
    d = Path(directory)
    path = d / EXPERIMENT_JSON
    try:
        record = ExperimentRecord.load(path)
    except RecordError as exc:
        raise ExperimentInputError(str(exc)) from None
    exp = {"dir": str(d)}
    exp.update({key: getattr(record, key) for key in (
        "id", "host", "started_at", "finished_at", "model", "vllm_version", "load",
        # The health poller's record of the whole experiment (the campaign's), or null.
        "downtime", "noise_floor_pct", "base", "variants")})
    # The model loads the job caused and the disk's floor, from the job's job.json (null: none yet).
    exp["model_loads"] = loadcost.read_job(d)
    exp["runs"] = [{**run, "result": _result(d / run["file"], f"{path}: runs[{i}]")}
                   for i, run in enumerate(record.runs)]
    # A replay: what the recording held (bench/replay.json, written by the replay command), or null.
    replay = d / REPLAY_JSON
    exp["replay"] = _read_json(replay, "the replay's expectation") if record.load.get("traffic") else None
    exp["recording"] = None if record.load.get("traffic") else recording_near(d, record.host)
    return exp


def recording_near(directory: Path, host: str) -> str | None:
    """A recording of ``host``'s traffic fetched beside the job's artifacts (playbooks/traffic.yml's
    ``ARTIFACTS/traffic/HOST``, the job's directory being ``ARTIFACTS/HOST/ID`` or below it), or None."""
    for parent in list(directory.resolve().parents)[:3]:
        found = parent / "traffic" / host
        if any(found.glob("traffic-*.jsonl")):
            return str(found)
    return None
