"""The benchmark load: what every job that benchmarks sends (role vllm_bench), set once.

Three layers, each a mapping of the fields below: ``vllm_bench_load_defaults`` (role vllm_bench's
defaults: every field), ``vllm_bench_load`` (the fleet's inventory: what it changes, once for every
job) and a job's own (``vllm_experiment_bench_load``, ``vllm_tune_bench_load``,
``vllm_rollout_bench_load``: what that job changes). ``resolve`` lays them over each other and checks
the result, naming the variable a wrong value came from; ``recorded`` is what a job's record keeps.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from .errors import ExperimentInputError

__all__ = ["FIELDS", "RECORDED", "REPLAY", "recorded", "replaying", "resolve"]

# Each field of a load and what it is, in the order the manual lists them.
FIELDS = {
    "input_len": "prompt tokens per request (the random dataset)",
    "output_len": "output tokens per request, EOS ignored",
    "concurrencies": "requests in flight at once (--max-concurrency), one benchmark point each",
    "num_prompts": "requests per point",
    "repeats": "runs of each point",
    "warmups": "warm-up requests before each point (--num-warmups)",
    "seed": "the random dataset's seed",
    "temperature": "sampling temperature of every request",
    "prompts_file": "a prompts file on the controller (JSONL), sent instead of random tokens",
    "args": "further vllm bench serve arguments",
    "environment": "environment of the benchmark process on the host",
    "tokenizer": "local tokenizer directory on the host; empty: vllm_model_path",
    "timeout_s": "seconds one point may take",
    "traffic": "a recording on the controller (playbooks/traffic.yml), replayed instead of random tokens",
    "traffic_speed": "how much faster than recorded the replay sends its requests (1: as recorded)",
}
# What a job's record keeps of its load, under the record's names (args is bench_args there).
RECORDED = {"input_len": "input_len", "output_len": "output_len", "num_prompts": "num_prompts",
            "concurrencies": "concurrencies", "repeats": "repeats", "warmups": "warmups", "seed": "seed",
            "temperature": "temperature", "prompts_file": "prompts_file", "args": "bench_args",
            "traffic": "traffic", "traffic_speed": "traffic_speed"}
# The concurrency of a replay's one point: the recording's own arrivals, nothing capped.
REPLAY = 0

# Least value of each whole-number field, and why.
_AT_LEAST = {"input_len": (1, ""), "output_len": (2, " (TPOT needs two tokens)"), "num_prompts": (1, ""),
             "repeats": (1, ""), "warmups": (0, ""), "seed": (0, ""), "timeout_s": (1, "")}


def _integer(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ExperimentInputError(f"{where} must be a whole number, not {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ExperimentInputError(f"{where} must be a whole number, not {value!r}") from None


def _check(load: Mapping, where: dict[str, str]) -> dict:
    out: dict = {}
    for key, (least, why) in _AT_LEAST.items():
        out[key] = _integer(load[key], where[key])
        if out[key] < least:
            raise ExperimentInputError(f"{where[key]} ({out[key]}) must be at least {least}{why}")
    concurrencies = load["concurrencies"]
    if load.get("traffic") and concurrencies == [REPLAY]:
        concurrencies = [1]  # a load already resolved as a replay, checked again: its one point
    if isinstance(concurrencies, (str, Mapping)) or not hasattr(concurrencies, "__iter__"):
        raise ExperimentInputError(f"{where['concurrencies']} must be a list of whole numbers, not {concurrencies!r}")
    out["concurrencies"] = [_integer(c, where["concurrencies"]) for c in concurrencies]
    if not out["concurrencies"] or min(out["concurrencies"]) < 1:
        raise ExperimentInputError(f"{where['concurrencies']} ({concurrencies!r}) must list positive whole numbers")
    if out["num_prompts"] < max(out["concurrencies"]):
        raise ExperimentInputError(
            f"{where['num_prompts']} ({out['num_prompts']}) must be at least the highest of "
            f"{where['concurrencies']} ({max(out['concurrencies'])}), so that each point reaches its concurrency")
    try:
        out["temperature"] = float(load["temperature"])
    except (TypeError, ValueError):
        raise ExperimentInputError(f"{where['temperature']} must be a number, not {load['temperature']!r}") from None
    if out["temperature"] < 0:
        raise ExperimentInputError(f"{where['temperature']} ({out['temperature']}) must be at least 0")
    for key in ("prompts_file", "tokenizer", "traffic"):
        if not isinstance(load[key], str):
            raise ExperimentInputError(f"{where[key]} must be a path (a string; empty for none), not {load[key]!r}")
        out[key] = load[key]
    try:
        out["traffic_speed"] = float(load["traffic_speed"])
    except (TypeError, ValueError):
        raise ExperimentInputError(
            f"{where['traffic_speed']} must be a number, not {load['traffic_speed']!r}") from None
    if out["traffic_speed"] <= 0:
        raise ExperimentInputError(f"{where['traffic_speed']} ({out['traffic_speed']}) must be above 0 "
                                   "(1: the recording's own pace, 2: twice as fast)")
    if out["traffic"]:
        if out["prompts_file"]:
            raise ExperimentInputError(f"{where['traffic']} and {where['prompts_file']} are both set: a load "
                                       "replays a recording or sends a prompts file, not both")
        # A replay is one point a repeat: the recording's requests at their own times.
        out["concurrencies"] = [REPLAY]
    args = load["args"]
    if isinstance(args, (str, Mapping)) or not all(isinstance(a, (str, int, float)) for a in args):
        raise ExperimentInputError(f"{where['args']} must be a list of arguments, not {args!r}")
    out["args"] = [str(a) for a in args]
    environment = load["environment"]
    if not isinstance(environment, Mapping) or not all(isinstance(k, str) for k in environment):
        raise ExperimentInputError(f"{where['environment']} must be a mapping of variable names to values, "
                                   f"not {environment!r}")
    out["environment"] = {k: str(v) for k, v in environment.items()}
    return {key: out[key] for key in FIELDS}


def _unknown(given: Mapping, name: str) -> None:
    unknown = sorted(str(k) for k in given if k not in FIELDS)
    if not unknown:
        return
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, FIELDS, n=1)
        hints.append(f"{key} (did you mean {close[0]}?)" if close else key)
    raise ExperimentInputError(f"{name} has no field {', '.join(hints)}; a load has {', '.join(FIELDS)}")


def resolve(defaults: Mapping, fleet: Mapping | None = None, overrides: Mapping | None = None,
            overrides_name: str = "vllm_bench_load", fleet_name: str = "vllm_bench_load",
            defaults_name: str = "vllm_bench_load_defaults") -> dict:
    """The load a job sends: its ``overrides`` (the job's variable, named ``overrides_name``) laid over
    the ``fleet``'s fields (``fleet_name``), laid over ``defaults`` (every field), checked. A wrong
    value's message names the variable and field it came from, e.g. ``vllm_tune_bench_load.repeats
    (0) must be at least 1``; an unknown field is refused with the closest known one."""
    layers = ((defaults, defaults_name), (fleet or {}, fleet_name), (overrides or {}, overrides_name))
    for value, name in layers:
        if not isinstance(value, Mapping):
            raise ExperimentInputError(f"{name} must be a mapping of load fields ({', '.join(FIELDS)}), "
                                       f"not {value!r}")
        _unknown(value, name)
    missing = [key for key in FIELDS if not any(key in value for value, _ in layers)]
    if missing:
        raise ExperimentInputError(f"{defaults_name} lacks {', '.join(missing)}: it must name every field of a "
                                   f"load (role vllm_bench's defaults do)")
    merged, where = {}, {}
    for value, name in layers:
        for key in FIELDS:
            if key in value:
                merged[key], where[key] = value[key], f"{name}.{key}"
    return _check(merged, where)


def replaying(load: Mapping) -> bool:
    """Whether a resolved (or recorded) load replays a recording."""
    return bool(load.get("traffic"))


def recorded(load: Mapping) -> dict:
    """What a job's record (experiment.json, a tune's or rollout's) keeps of a resolved load: not
    the benchmark's environment, tokenizer or timeout, which say where it ran, not what it sent."""
    return {name: load[key] for key, name in RECORDED.items() if key in load}
