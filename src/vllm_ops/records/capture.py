"""``capture.json``: what the profiling capture (role vllm_capture) records beside the traces it fetched.

::

    {schema: "vllm-ops/capture/1", id, prefix, host, started_at, finished_at, model, vllm_version,
     tensor_parallel_size, variant, environment, path,
     settings {model_path, gpu_memory_utilization, max_model_len, extra_args},
     profiler_config (vLLM's profiler settings as the server ran: an object, a string or null),
     load {requests, concurrency, batch_size, prompt_tokens, output_tokens, warmup_requests, stop_profile_s},
     samples {ttft_ms: [ms...], tpot_ms: [ms...]}, traces [{rank, path, file, bytes, sha256}...],
     checkpoint (the module vllm_checkpoint's record of the model's safetensors headers, for the decode
                 ledger; null when the capture did not read it),
     fabric (the PCIe links read during the profiled requests, for vllm_ops.fabric; null when not read)}

A file without ``schema`` is an earlier release's (schema 0), shaped in YAML: its numbers may be strings
(``"8"`` for 8, as Ansible templated them), ``finished_at``, ``checkpoint`` and ``fabric`` may be absent
and ``extra_args`` may be a list. It is read as schema 1: numbers coerced and checked, the arguments
joined. A file of a later schema is refused: a newer vllm-ops wrote it.

The capture hands the values to ``python -m vllm_ops.records write capture DIR`` (a JSON object on stdin,
``finished_at`` now unless given), which checks them and writes ``DIR/capture.json`` atomically.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from ..artifacts import CAPTURE_JSON
from ..job import JobInputError, parse_time
from .base import Record, check_header
from .errors import RecordError

__all__ = ["LOAD_FIELDS", "SCHEMA", "CaptureRecord"]

SCHEMA = "vllm-ops/capture/1"
# The load's integer fields and their least value; stop_profile_s is a number or null.
LOAD_FIELDS = (("requests", 1), ("concurrency", 1), ("batch_size", 1), ("prompt_tokens", 0), ("output_tokens", 1),
               ("warmup_requests", 0))
FIX = "correct it, or re-run the campaign (its Ansible role writes the file)"
_INT = re.compile(r"^[+-]?\d+$")


@dataclass(frozen=True)
class CaptureRecord(Record):
    """One capture as the vllm_capture role recorded it (the module's docstring)."""

    SCHEMA: ClassVar[str] = SCHEMA
    FILE: ClassVar[str] = CAPTURE_JSON
    TITLE: ClassVar[str] = "a capture record"
    READ_AS: ClassVar[str] = "capture record"
    MISSING: ClassVar[str | None] = ("no such file; give the campaign's directory (the capture writes it before "
                                     "the report)")
    DAMAGED: ClassVar[str] = "; the file is damaged or was cut short: re-run the campaign"
    VALUES_AS: ClassVar[str] = "the capture's values"
    # The file's "load" (the profiled requests' load) is ``profiled_load`` here: ``load`` reads a file.
    RENAMED: ClassVar[dict[str, str]] = {"profiled_load": "load"}

    id: str
    host: str
    started_at: str
    model: str
    tensor_parallel_size: int
    path: str
    settings: dict
    profiled_load: dict
    samples: dict
    traces: list[dict]
    prefix: str | None = None
    finished_at: str | None = None
    vllm_version: str | None = None
    variant: str | None = None
    environment: dict = field(default_factory=dict)
    profiler_config: dict | str | None = None
    checkpoint: dict | None = None
    fabric: dict | None = None

    @classmethod
    def from_dict(cls, data: object, where: str = CAPTURE_JSON) -> CaptureRecord:
        """The record of ``data`` (a parsed ``capture.json``, or the capture's values), checked, numbers
        coerced; an earlier schema's migrated. Every problem names ``where``, the field and what to do."""
        if not isinstance(data, Mapping):
            raise RecordError(f"{where}: {cls.TITLE} must be a JSON object, not {type(data).__name__}; {FIX}")
        data = check_header(data, where, cls.SCHEMA, cls.file_fields(), cls.TITLE)
        f = _Fields(where)
        path = f.string(data, "path")
        if not path.startswith(("live", "restart")):
            raise f.fail("path", f"must say 'live (...)' or 'restart (...)', got {path!r}")
        profiler_config = data.get("profiler_config")
        if not isinstance(profiler_config, (Mapping, str, type(None))):
            raise f.fail("profiler_config", f"must be a mapping, a string or null, got {_kind(profiler_config)}")
        return cls(
            id=f.string(data, "id"), prefix=f.string(data, "prefix", required=False), host=f.string(data, "host"),
            started_at=f.time(data, "started_at"), finished_at=f.time(data, "finished_at", required=False),
            model=f.string(data, "model"), vllm_version=f.string(data, "vllm_version", required=False),
            tensor_parallel_size=f.integer(data, "tensor_parallel_size", minimum=1),
            variant=f.string(data, "variant", required=False), environment=_environment(f, data), path=path,
            settings=_settings(f, data),
            profiler_config=dict(profiler_config) if isinstance(profiler_config, Mapping) else profiler_config,
            profiled_load=_load(f, data), samples=_samples(f, data), traces=_traces(f, data),
            checkpoint=f.mapping(data, "checkpoint", required=False) or None,
            fabric=f.mapping(data, "fabric", required=False) or None,
        )


class _Fields:
    """One file's checks: every message names the file, the field and what to do."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, name: str, problem: str) -> RecordError:
        return RecordError(f"{self.where}: '{name}' {problem}; {FIX}")

    def mapping(self, data: Mapping, key: str, name: str | None = None, required: bool = True) -> dict:
        value = data.get(key)
        if value is None and not required:
            return {}
        if not isinstance(value, Mapping):
            raise self.fail(name or key, f"must be a mapping, got {_kind(value)}")
        return dict(value)

    def string(self, data: Mapping, key: str, name: str | None = None, required: bool = True) -> str | None:
        value = data.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(name or key, f"must be a non-empty string, got {value!r}")
        return value

    def integer(self, data: Mapping, key: str, name: str | None = None, minimum: int = 0) -> int:
        value = data.get(key)
        if isinstance(value, str) and _INT.match(value.strip()):
            value = int(value.strip())
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(name or key, f"must be an integer >= {minimum}, got {value!r}")
        return value

    def number(self, data: Mapping, key: str, name: str | None = None, required: bool = True) -> float | int | None:
        """A finite number >= 0; a string is read as an integer when it is one, else as a float."""
        value = data.get(key)
        if value is None and not required:
            return None
        if isinstance(value, str):
            text = value.strip()
            with contextlib.suppress(ValueError):
                value = int(text) if _INT.match(text) else float(text)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise self.fail(name or key, f"must be a number >= 0, got {data.get(key)!r}")
        return value

    def time(self, data: Mapping, key: str, required: bool = True) -> str | None:
        value = self.string(data, key, required=required)
        if value is None:
            return None
        try:
            parse_time(value, key)
        except JobInputError as exc:
            raise self.fail(key, f"is no time: {exc}") from None
        return value


def _kind(value: object) -> str:
    return "nothing" if value is None else type(value).__name__


def _environment(f: _Fields, data: Mapping) -> dict:
    env = f.mapping(data, "environment", required=False)
    for name, value in env.items():
        if isinstance(value, (Mapping, list)):
            raise f.fail(f"environment.{name}", f"must be a string or null, got {_kind(value)}")
    return env


def _settings(f: _Fields, data: Mapping) -> dict:
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


def _load(f: _Fields, data: Mapping) -> dict:
    load = f.mapping(data, "load")
    out = {key: f.integer(load, key, f"load.{key}", minimum=minimum) for key, minimum in LOAD_FIELDS}
    out["stop_profile_s"] = f.number(load, "stop_profile_s", "load.stop_profile_s", required=False)
    return out


def _samples(f: _Fields, data: Mapping) -> dict:
    samples = f.mapping(data, "samples")
    out = {}
    for key in ("ttft_ms", "tpot_ms"):
        values = samples.get(key)
        if not isinstance(values, list):
            raise f.fail(f"samples.{key}", f"must be a list of milliseconds, got {_kind(values)}")
        out[key] = [f.number({"v": v}, "v", f"samples.{key}[{i}]") for i, v in enumerate(values)]
    return out


def _traces(f: _Fields, data: Mapping) -> list[dict]:
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
