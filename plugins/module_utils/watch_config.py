"""The watch's configuration, ``watch.json``: its fields, their types and defaults, in one place.

The ``vllm_watch_config`` module writes the file from the values the ``vllm`` role passes it
(:func:`check`, then :func:`dumps`); the watch reads it (:func:`load`), with this file installed beside
it as ``vllm_ops_watch_config``. A field not given takes its default here; a field this file does not
know, or a value of the wrong type, is refused with what to change, so a typo in a role variable is an
error at deploy time rather than a watch that watches the wrong unit.

Standard library only, Python 3.9: the watch runs it on the host, beside itself.
"""

from __future__ import annotations

import dataclasses
import json

SCHEMA = "vllm-ops/watch-config/1"
WRITER = "the vllm role (playbooks/deploy.yml) writes it with the vllm_watch_config module"


class WatchConfigError(ValueError):
    """A configuration the watch cannot run with; the message says what to change."""


@dataclasses.dataclass(frozen=True)
class WatchConfig:
    """One field per setting of the watch (docs/watch.md says what each does; the role's ``vllm_watch_*``
    variables set them). ``list`` fields hold strings."""

    # what is watched
    unit: str = "vllm.service"
    url: str = "http://127.0.0.1:8000"
    environment_files: list = dataclasses.field(default_factory=list)
    model_path: str = ""
    # stalls and restarts
    interval_s: float = 5.0
    stall_s: float = 0.0
    stall_floor_s: float = 120.0
    max_restarts: int = 3
    restart_window_s: float = 3600.0
    health_timeout_s: float = 2400.0
    request_timeout_s: float = 5.0
    lock_file: str = "/run/vllm-ops/job.lock"
    # incidents
    incidents_dir: str = "/var/lib/vllm-ops/incidents"
    keep: int = 20
    max_bytes: int = 200 * 2**20
    journal_lines: int = 300
    py_spy: str = "/usr/local/bin/py-spy"
    # slowdowns, and the figures for Prometheus
    slowdown_interval_s: float = 60.0
    baseline_intervals: int = 30
    min_band: float = 0.10
    history_s: float = 14400.0
    metrics_file: str = "/var/lib/vllm-ops/metrics/vllm_ops_watch.prom"
    pcie_interval_s: float = 300.0
    nvidia_smi: str = "nvidia-smi"
    # the live capture
    auto_capture: bool = False
    armed: bool = False
    capture_after_s: float = 120.0
    capture_min_interval_s: float = 3600.0
    capture_s: float = 10.0
    capture_timeout_s: float = 600.0
    trace_dir: str = "/var/lib/vllm/traces"
    ranks: int = 1
    max_iterations: int = 0


# name -> the type its value must have (the annotations are strings under ``from __future__ import annotations``)
TYPES = {f.name: {"str": str, "float": float, "int": int, "bool": bool, "list": list}[f.type]
         for f in dataclasses.fields(WatchConfig)}
_WORDS = {str: "a text", float: "a number", int: "a whole number", bool: "true or false", list: "a list of texts"}


def defaults() -> dict:
    """Every field at its default."""
    return dataclasses.asdict(WatchConfig())


def _value(name, value):
    """``value`` as field ``name`` holds it, or None when it is not of the field's type: a whole number is
    a number, and nothing else converts (a bool is no number here, nor a number a bool)."""
    kind = TYPES[name]
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is list and isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    if kind in (str, bool) and isinstance(value, kind):
        return value
    return None


def check(values) -> WatchConfig:
    """The configuration ``values`` (a mapping of field to value; a missing field takes its default).

    Raises :class:`WatchConfigError` naming every unknown field and every value of the wrong type."""
    if not isinstance(values, dict):
        raise WatchConfigError(f"the watch's configuration is a mapping of its settings, not {type(values).__name__}")
    problems, given = [], {}
    schema = values.get("schema", SCHEMA)
    if schema != SCHEMA:
        problems.append(f"schema {schema!r} is not {SCHEMA!r}, the one this watch reads: deploy the watch and "
                        "its configuration from one release of the collection")
    for name, value in values.items():
        if name == "schema":
            continue
        if name not in TYPES:
            problems.append(f"{name!r} is no setting of the watch (the settings: {', '.join(sorted(TYPES))})")
            continue
        held = _value(name, value)
        if held is None:
            problems.append(f"{name} is {value!r}: it must be {_WORDS[TYPES[name]]}")
        else:
            given[name] = held
    if problems:
        raise WatchConfigError("; ".join(problems))
    return WatchConfig(**given)


def dumps(config: WatchConfig) -> str:
    """The file's text: every field, sorted, with the schema."""
    return json.dumps({"schema": SCHEMA, **dataclasses.asdict(config)}, indent=4, sort_keys=True) + "\n"


def load(path) -> dict:
    """The configuration in ``path``, every field set, as the watch reads it (a dict of field to value).

    Raises :class:`WatchConfigError` when the file is missing, is not JSON, or fails :func:`check`."""
    try:
        with open(path, encoding="utf-8") as fh:
            values = json.load(fh)
    except FileNotFoundError:
        raise WatchConfigError(f"{path}: no such file; {WRITER}") from None
    except (OSError, ValueError) as exc:
        raise WatchConfigError(f"{path}: cannot be read ({exc}); {WRITER}") from None
    try:
        return dataclasses.asdict(check(values))
    except WatchConfigError as exc:
        raise WatchConfigError(f"{path}: {exc}") from None
