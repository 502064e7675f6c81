"""Read and check what the Ansible side leaves in a campaign's directory for the report.

``capture.json`` (:func:`load_capture`, required): what the capture recorded::

    {id, prefix, host, started_at, model, vllm_version, tensor_parallel_size, variant, environment,
     path, settings {model_path, gpu_memory_utilization, max_model_len, extra_args}, profiler_config,
     load {requests, concurrency, batch_size, prompt_tokens, output_tokens, warmup_requests,
           stop_profile_s},
     samples {ttft_ms: [ms...], tpot_ms: [ms...]}, traces [{rank, path, file, bytes, sha256}...],
     checkpoint (optional: the module vllm_checkpoint's record of the model's safetensors headers, for
                 the decode ledger; null when the capture did not read it),
     fabric (optional: the PCIe links read during the profiled requests, for vllm_ops.fabric)}

``job.json`` (:func:`load_job`, optional): what the job skeleton recorded after the restore, read
through :class:`vllm_ops.records.JobRecord` (its module defines the fields).

``topology.txt`` (:func:`read_topology`, optional): what ``nvidia-smi topo -m`` printed.

Numbers may arrive as strings where Ansible templated them (``"8"`` for 8): they are coerced, and
checked. Every problem is a :class:`CampaignInputError` of one line naming the file and the
field and saying what to do.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path

from .. import artifacts
from ..cliutil import read_json
from ..job import JobInputError, parse_time
from ..records import JobRecord
from ..traces.topology import parse_topology
from .errors import CampaignInputError

__all__ = ["load_capture", "load_job", "read_topology", "trace_files"]

_INT = re.compile(r"^[+-]?\d+$")
FIX = "correct it, or re-run the campaign (its Ansible role writes the file)"


class _File:
    """One input file's checks: every message names the file, the field and what to do."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, field: str, problem: str) -> CampaignInputError:
        return CampaignInputError(f"{self.path}: '{field}' {problem}; {FIX}")

    def mapping(self, data: Mapping, key: str, field: str | None = None, required: bool = True) -> dict:
        value = data.get(key)
        if value is None and not required:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(field or key, f"must be a mapping, got {_kind(value)}")
        return dict(value)

    def string(self, data: Mapping, key: str, field: str | None = None, required: bool = True) -> str | None:
        value = data.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(field or key, f"must be a non-empty string, got {value!r}")
        return value

    def integer(self, data: Mapping, key: str, field: str | None = None, minimum: int = 0) -> int:
        value = data.get(key)
        if isinstance(value, str) and _INT.match(value.strip()):
            value = int(value.strip())
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(field or key, f"must be an integer >= {minimum}, got {value!r}")
        return value

    def number(self, data: Mapping, key: str, field: str | None = None, required: bool = True) -> float | int | None:
        """A finite number >= 0; a string is read as an integer when it is one, else as a float."""
        value = data.get(key)
        if value is None and not required:
            return None
        if isinstance(value, str):
            text = value.strip()
            with contextlib.suppress(ValueError):
                value = int(text) if _INT.match(text) else float(text)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise self.fail(field or key, f"must be a number >= 0, got {data.get(key)!r}")
        return value

    def time(self, data: Mapping, key: str) -> str:
        value = self.string(data, key)
        try:
            parse_time(value, key)
        except JobInputError as exc:
            raise self.fail(key, f"is no time: {exc}") from None
        return value


def _kind(value: object) -> str:
    return "nothing" if value is None else type(value).__name__


def _read(path: Path, what: str, missing: str) -> Mapping:
    data = read_json(path, what, CampaignInputError, missing=missing,
                     damaged="; the file is damaged or was cut short: re-run the campaign")
    if not isinstance(data, Mapping):
        raise CampaignInputError(f"{what} {path}: expected a JSON object, got {type(data).__name__}; {FIX}")
    return data


def load_capture(directory: str | os.PathLike) -> dict:
    """``DIR/capture.json``, checked, numbers coerced; ``samples`` as lists of floats."""
    path = Path(directory) / artifacts.CAPTURE_JSON
    data = _read(path, "capture record", "no such file; give the campaign's directory (the capture writes it "
                                         "before the report)")
    f = _File(path)
    out = {
        "id": f.string(data, "id"), "prefix": f.string(data, "prefix", required=False),
        "host": f.string(data, "host"), "started_at": f.time(data, "started_at"), "model": f.string(data, "model"),
        "vllm_version": f.string(data, "vllm_version", required=False),
        "tensor_parallel_size": f.integer(data, "tensor_parallel_size", minimum=1),
        "variant": f.string(data, "variant", required=False),
        "environment": _environment(f, data), "path": f.string(data, "path"),
        "settings": _settings(f, data), "profiler_config": data.get("profiler_config"),
        "load": _load(f, data), "samples": _samples(f, data), "traces": _traces(f, data),
        "checkpoint": f.mapping(data, "checkpoint", required=False) or None,
        "fabric": f.mapping(data, "fabric", required=False) or None,
    }
    if not out["path"].startswith(("live", "restart")):
        raise f.fail("path", f"must say 'live (...)' or 'restart (...)', got {out['path']!r}")
    if not isinstance(out["profiler_config"], (Mapping, str, type(None))):
        raise f.fail("profiler_config", f"must be a mapping, a string or null, got {_kind(out['profiler_config'])}")
    return out


def _environment(f: _File, data: Mapping) -> dict:
    env = f.mapping(data, "environment", required=False)
    for name, value in env.items():
        if isinstance(value, (Mapping, list)):
            raise f.fail(f"environment.{name}", f"must be a string or null, got {_kind(value)}")
    return env


def _settings(f: _File, data: Mapping) -> dict:
    settings = f.mapping(data, "settings")
    args = settings.get("extra_args")
    if isinstance(args, list) and all(isinstance(a, str) for a in args):
        args = " ".join(args)
    if not isinstance(args, str):
        raise f.fail("settings.extra_args", f"must be a string or a list of strings, got {args!r}")
    return {
        **settings,
        "model_path": f.string(settings, "model_path", "settings.model_path"),
        "gpu_memory_utilization": f.number(settings, "gpu_memory_utilization", "settings.gpu_memory_utilization"),
        "max_model_len": f.integer(settings, "max_model_len", "settings.max_model_len", minimum=1),
        "extra_args": args,
    }


def _load(f: _File, data: Mapping) -> dict:
    load = f.mapping(data, "load")
    out = {key: f.integer(load, key, f"load.{key}", minimum=minimum) for key, minimum in (
        ("requests", 1), ("concurrency", 1), ("batch_size", 1), ("prompt_tokens", 0), ("output_tokens", 1),
        ("warmup_requests", 0))}
    out["stop_profile_s"] = f.number(load, "stop_profile_s", "load.stop_profile_s", required=False)
    return out


def _samples(f: _File, data: Mapping) -> dict:
    samples = f.mapping(data, "samples")
    out = {}
    for key in ("ttft_ms", "tpot_ms"):
        values = samples.get(key)
        if not isinstance(values, list):
            raise f.fail(f"samples.{key}", f"must be a list of milliseconds, got {_kind(values)}")
        out[key] = [f.number({"v": v}, "v", f"samples.{key}[{i}]") for i, v in enumerate(values)]
    return out


def _traces(f: _File, data: Mapping) -> list[dict]:
    traces = data.get("traces")
    if not isinstance(traces, list) or not traces:
        raise f.fail("traces", f"must list the fetched traces, one per rank, got {traces!r}")
    out = []
    for i, t in enumerate(traces):
        where = f"traces[{i}]"
        if not isinstance(t, Mapping):
            raise f.fail(where, f"must be a mapping, got {_kind(t)}")
        out.append({**t, "rank": f.integer(t, "rank", f"{where}.rank"), "path": f.string(t, "path", f"{where}.path"),
                    "file": f.string(t, "file", f"{where}.file"), "bytes": f.integer(t, "bytes", f"{where}.bytes"),
                    "sha256": f.string(t, "sha256", f"{where}.sha256")})
    ranks = [t["rank"] for t in out]
    if len(set(ranks)) != len(ranks):
        raise f.fail("traces", f"names a rank twice: {ranks}")
    return out


def load_job(directory: str | os.PathLike, capture: Mapping) -> dict | None:
    """``DIR/job.json``, checked, or None when there is none (a profiled experiment variant,
    reported while its experiment goes on). It must be the capture's job."""
    path = Path(directory) / artifacts.JOB_JSON
    job = JobRecord.read(directory)
    if job is None:
        return None
    out = job.to_dict()
    out["downtime"] = out["downtime"] or None
    for key in ("id", "host"):
        if out[key] != capture[key]:
            raise CampaignInputError(
                f"{path}: '{key}' is {out[key]!r}, capture.json's is {capture[key]!r}: the two files are of "
                "different jobs; give the campaign's own directory, or remove the stray job.json")
    return out


def read_topology(directory: str | os.PathLike) -> dict:
    """``parse_topology`` of ``DIR/topology.txt``; an absent or empty file: interconnect unknown."""
    path = Path(directory) / artifacts.TOPOLOGY_TXT
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        text = None
    except OSError as exc:
        raise CampaignInputError(f"{path}: {exc.strerror or exc}; make it readable or remove it") from None
    return parse_topology(text)


def trace_files(directory: str | os.PathLike, capture: Mapping) -> list[str]:
    """The paths of the capture's traces in ``directory``, sorted as a directory listing is; each
    trace ``capture.json`` lists must be there."""
    files = []
    for t in capture["traces"]:
        path = os.path.join(os.fspath(directory), os.path.basename(t["file"]))
        if not os.path.isfile(path):
            raise CampaignInputError(
                f"{path}: rank {t['rank']}'s trace, listed in capture.json, is missing; fetch the traces again "
                "(re-run the campaign)")
        files.append(path)
    return sorted(files)
