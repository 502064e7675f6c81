"""Check the vllm role's variables before anything changes on a host.

Each problem is one sentence that names the variable and what is allowed,
so an operator can fix the inventory without reading the role.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Mapping

__all__ = ["NCCL_ALGOS", "NCCL_PROTOS", "environment_errors", "settings_errors", "variant_errors"]

NCCL_PROTOS = ("LL", "LL128", "Simple")
# A variant's name names result files and reads as the settings it changes (NCCL_PROTO=LL128).
_VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=,+:-]{0,127}")
# Server options the role sets itself: a variant that changed them would move the server away from
# where the health check, the fence and the benchmark look for it.
_OWNED_OPTIONS = {
    "--host": "vllm_host", "--port": "vllm_port", "--api-key": "vllm_api_key",
    "--profiler-config": "the variant's profile", "--middleware": "vllm_profiler_armed",
}
# What VLLM_BATCH_INVARIANT=1 overwrites in NCCL's environment (vLLM 0.32).
_BATCH_INVARIANT_OVERWRITES = ("NCCL_PROTO", "NCCL_ALGO", "NCCL_MAX_NCHANNELS")
NCCL_ALGOS = ("Ring", "Tree", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")


def _is_int(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and value.strip().isdigit()


def _truthy(value: object) -> bool:
    """A boolean as Ansible passes it: a bool, or its text form."""
    return value is True or str(value).strip().lower() in ("true", "yes", "on", "1")


def _positive_int(name: str, value: object, upper: int | None = None) -> list[str]:
    if not _is_int(value) or int(value) < 1 or (upper is not None and int(value) > upper):
        bound = f"from 1 to {upper}" if upper else "a positive integer"
        return [f"{name} is {value!r}: allowed values are {bound}."]
    return []


def _nccl_list(name: str, value: object, allowed: tuple[str, ...]) -> list[str]:
    """NCCL_PROTO/NCCL_ALGO: a comma-separated list, optionally prefixed by ^."""
    text = str(value).strip()
    items = text[1:] if text.startswith("^") else text
    names = [item.strip() for item in items.split(",")]
    lowered = {a.lower(): a for a in allowed}
    bad = [item for item in names if item.lower() not in lowered]
    if not text or bad:
        return [
            f"{name} is {value!r}: allowed values are {', '.join(allowed)} "
            "(several joined by commas, optionally prefixed by ^ to exclude them)."
        ]
    return []


def _absolute(name: str, value: object) -> list[str]:
    if not isinstance(value, str) or not posixpath.isabs(value):
        return [f"{name} is {value!r}: it must be an absolute path."]
    return []


def environment_errors(where: str, environment: object) -> list[str]:
    """Problems of a server environment (``vllm_environment`` or a variant's): names, NCCL values,
    secrets. ``where`` names it in each message."""
    environment = environment or {}
    if not isinstance(environment, Mapping):
        return [f"{where} is {environment!r}: it must be a mapping of variable names to values."]
    errors: list[str] = []
    for key in environment:
        if not str(key).replace("_", "A").isalnum() or str(key)[0].isdigit():
            errors.append(f"{where} key {key!r} is not a valid environment variable name.")
    if "NCCL_PROTO" in environment:
        errors += _nccl_list(f"{where}.NCCL_PROTO", environment["NCCL_PROTO"], NCCL_PROTOS)
    if "NCCL_ALGO" in environment:
        errors += _nccl_list(f"{where}.NCCL_ALGO", environment["NCCL_ALGO"], NCCL_ALGOS)
    if "NCCL_MAX_NCHANNELS" in environment:
        errors += _positive_int(f"{where}.NCCL_MAX_NCHANNELS", environment["NCCL_MAX_NCHANNELS"], 64)
    for secret in ("VLLM_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if secret in environment:
            errors.append(
                f"{where} holds {secret}: set the secret through vllm_api_key or vllm_hf_token, "
                "which keep it in a root-only file and out of logs."
            )
    if _truthy(environment.get("VLLM_BATCH_INVARIANT", "")):
        named = [name for name in _BATCH_INVARIANT_OVERWRITES if environment.get(name) is not None]
        if named:
            errors.append(
                f"{where} sets VLLM_BATCH_INVARIANT=1 together with {', '.join(named)}: batch-invariant mode "
                "silently overwrites NCCL_PROTO and NCCL_ALGO and sets NCCL_MAX_NCHANNELS=1, so the server "
                "would not run the NCCL settings named. Drop one or the other."
            )
    return errors


def _option_name(arg: object) -> str:
    return str(arg).split("=", 1)[0].split(".", 1)[0]


def _speculative_errors(where: str, args: list) -> list[str]:
    """``--speculative-config`` must be a JSON object with a method: a typo found now, not after a load."""
    errors = []
    for i, arg in enumerate(args):
        text = str(arg)
        if text.startswith("--speculative-config="):
            value: object = text.split("=", 1)[1]
        elif text == "--speculative-config":
            value = args[i + 1] if i + 1 < len(args) else None
        else:
            continue
        try:
            config = json.loads(str(value)) if value is not None else None
        except ValueError as exc:
            errors.append(f"{where} --speculative-config is {value!r}, which is not JSON ({exc}).")
            continue
        if not isinstance(config, Mapping) or not config.get("method"):
            errors.append(f"{where} --speculative-config is {value!r}: it must be a JSON object with a "
                          "\"method\" (ngram, draft_model, eagle, eagle3, mtp, suffix, ...).")
    return errors


def _variant_args_errors(where: str, args: object) -> list[str]:
    if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool)
                                             for a in args):
        return [f"{where} is {args!r}: it must be a list of arguments (strings), one item per argument."]
    errors = []
    for arg in args:
        owner = _OWNED_OPTIONS.get(_option_name(arg))
        if owner:
            errors.append(f"{where} sets {_option_name(arg)}, which the role sets itself ({owner}): remove it.")
    return errors + _speculative_errors(where, args)


def variant_errors(where: str, variants: object, base_environment: object = None,
                   server: bool = False) -> list[str]:
    """Problems of a list of variants, each ``{name, environment}``; with ``server``, also
    ``extra_args`` and ``profile`` (the vllm role's ``vllm_variant``).

    The name is letters, digits and ``._=,+:-`` (it names files), unique. The environment passes the
    checks of ``vllm_environment``, and so does ``base_environment`` laid under it (a null value
    unsets a variable): a variant must not make a conflict of the two. Extra arguments must not
    set what the role owns (``--host``, ``--port``, ...), and a ``--speculative-config`` must be a
    JSON object with a method."""
    ordered = ["name", "environment", "extra_args", "profile"] if server else ["name", "environment"]
    keys = set(ordered)
    shape = "{" + ", ".join(ordered) + "}"
    if not isinstance(variants, list):
        return [f"{where} is {variants!r}: it must be a list of {shape} mappings."]
    if base_environment is not None and not isinstance(base_environment, Mapping):
        return [f"the base environment is {base_environment!r}: it must be a mapping."]
    errors: list[str] = []
    seen: set[str] = set()
    for i, variant in enumerate(variants):
        if not isinstance(variant, Mapping):
            errors.append(f"{where}[{i}] is {variant!r}: it must be a mapping with name and "
                          f"{'environment and/or extra_args' if server else 'environment'}.")
            continue
        name = variant.get("name")
        label = f"{where}[{i}]"
        if not isinstance(name, str) or not _VARIANT_NAME.fullmatch(name):
            errors.append(f"{label}.name is {name!r}: use letters, digits, '.', '_' and '-' (it names files).")
        elif name in seen:
            errors.append(f"{label}.name {name!r} is used twice: each variant needs its own name.")
        else:
            seen.add(name)
            label = f"{where}[{name}]"
        unknown = sorted(set(variant) - keys)
        if unknown:
            errors.append(f"{label} has unknown keys {', '.join(unknown)}: "
                          f"a variant has {', '.join(ordered[:-1])} and {ordered[-1]}.")
        environment = variant.get("environment") or {}
        changes = bool(environment) or bool(server and (variant.get("extra_args") or variant.get("profile")))
        if not changes:
            errors.append(f"{label}.environment is empty: a variant changes at least one variable"
                          f"{' or argument' if server else ''}.")
        own = environment_errors(f"{label}.environment",
                                 {k: v for k, v in environment.items() if v is not None}
                                 if isinstance(environment, Mapping) else environment)
        errors += own
        if not own and base_environment and isinstance(environment, Mapping):
            merged = {k: v for k, v in {**base_environment, **environment}.items() if v is not None}
            errors += [f"{e} (with vllm_environment under it)"
                       for e in environment_errors(f"{label}.environment", merged)
                       if "VLLM_BATCH_INVARIANT" in e]
        if server:
            errors += _variant_args_errors(f"{label}.extra_args", variant.get("extra_args") or [])
            if not isinstance(variant.get("profile", False), bool) and str(variant.get("profile")).lower() not in (
                    "true", "false", "yes", "no"):
                errors.append(f"{label}.profile is {variant.get('profile')!r}: it must be true or false.")
    return errors


def settings_errors(settings: Mapping[str, object]) -> list[str]:
    """Return every problem found in the role's settings (empty when valid)."""
    errors: list[str] = []
    model = settings.get("vllm_model_path")
    if not model:
        errors.append("vllm_model_path is not set: it must name the model checkpoint directory on the host.")
    else:
        errors += _absolute("vllm_model_path", model)
    errors += _absolute("vllm_executable", settings.get("vllm_executable"))
    errors += _absolute("vllm_profiling_trace_dir", settings.get("vllm_profiling_trace_dir"))
    errors += _positive_int("vllm_port", settings.get("vllm_port"), 65535)
    errors += _positive_int("vllm_tensor_parallel_size", settings.get("vllm_tensor_parallel_size"))
    errors += _positive_int("vllm_max_model_len", settings.get("vllm_max_model_len"))
    errors += _positive_int("vllm_health_timeout_s", settings.get("vllm_health_timeout_s"))

    utilization = settings.get("vllm_gpu_memory_utilization")
    try:
        fraction = float(utilization)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        fraction = -1.0
    if isinstance(utilization, bool) or not 0 < fraction <= 1:
        errors.append(
            f"vllm_gpu_memory_utilization is {utilization!r}: allowed values are above 0 and at most 1."
        )

    errors += environment_errors("vllm_environment", settings.get("vllm_environment"))

    extra = settings.get("vllm_extra_args") or []
    if not isinstance(extra, list):
        errors.append(f"vllm_extra_args is {extra!r}: it must be a list of arguments.")
        extra = []
    if any(str(a) == "--profiler-config" or str(a).startswith(("--profiler-config=", "--profiler-config."))
           for a in extra):
        errors.append("vllm_extra_args sets --profiler-config, which the role sets itself (vllm_profiling_enabled, "
                      "vllm_profiler_armed, vllm_profiler_config): remove it.")
    errors += _speculative_errors("vllm_extra_args", extra)

    variant = settings.get("vllm_variant") or {}
    if variant:
        env = settings.get("vllm_environment")
        errors += variant_errors("vllm_variant", [variant], env if isinstance(env, Mapping) else None, server=True)

    if _truthy(settings.get("vllm_profiler_armed")):
        errors += _positive_int("vllm_profiler_armed_max_iterations",
                                settings.get("vllm_profiler_armed_max_iterations"))

    profiler = settings.get("vllm_profiler_config") or {}
    if not isinstance(profiler, Mapping):
        errors.append(f"vllm_profiler_config is {profiler!r}: it must be a mapping of profiler fields.")
    else:
        for reserved in ("profiler", "torch_profiler_dir"):
            if reserved in profiler:
                errors.append(
                    f"vllm_profiler_config sets {reserved}, which the role sets itself "
                    "(from vllm_profiling_trace_dir): remove it."
                )
    return errors
