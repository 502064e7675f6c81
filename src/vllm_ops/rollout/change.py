"""A rollout's change: what it lays over a host's settings, checked before anything runs, and in words.

A change is ``{name, version, environment, extra_args}``, each optional - the experiment's variant
shape plus ``version``, so that a tune's winner is a change as it stands. ``version`` replaces
``vllm_version`` (a version directory of its own, ``/opt/vllm/<version>/``), ``environment`` is laid
over ``vllm_environment`` (a null value removes the variable), ``extra_args`` follow
``vllm_extra_args`` (argparse: the last of a repeated option wins). The empty change ``{}`` rolls
out the settings as the inventory (or the command line) gives them.

A ``version`` takes effect only where the unit's executable follows it (the vllm role's default,
``<vllm_versions_dir>/<version>/bin/vllm``): ``current`` may carry ``vllm_executable`` (what the unit
runs now) and ``vllm_executable_after`` (what it would run with the change's version), and a version
whose executable stays the same is refused, since the host would keep its release and be reported
as changed.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

from ..validate import variant_errors

__all__ = ["KEYS", "change_errors", "change_text", "target"]

KEYS = ("name", "version", "environment", "extra_args")
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")


def target(change: Mapping | None, current: Mapping) -> dict:
    """The settings a host runs after the change: ``{vllm_version, vllm_environment, vllm_extra_args}``
    from ``current`` (the same three keys) with ``change`` laid over them."""
    change = change or {}
    environment = {**(current.get("vllm_environment") or {}), **(change.get("environment") or {})}
    return {
        "vllm_version": str(change.get("version") or current.get("vllm_version")),
        "vllm_environment": {str(k): v for k, v in environment.items() if v is not None},
        "vllm_extra_args": [str(a) for a in current.get("vllm_extra_args") or []]
        + [str(a) for a in change.get("extra_args") or []],
    }


def change_errors(change: object, current: Mapping, where: str = "vllm_rollout_change") -> list[str]:
    """Every problem of ``change`` laid over ``current``, one sentence each naming the field."""
    if change is None or change == {}:
        return []
    if not isinstance(change, Mapping):
        return [f"{where} is {change!r}: it must be a mapping with version, environment and/or extra_args."]
    errors = []
    unknown = sorted(set(change) - set(KEYS))
    if unknown:
        errors.append(f"{where} has unknown keys {', '.join(map(str, unknown))}: a change has "
                      f"{', '.join(KEYS[:-1])} and {KEYS[-1]}.")
    version = change.get("version")
    if version is not None and not _VERSION.fullmatch(str(version)):
        errors.append(f"{where}.version is {version!r}: it must be a vLLM release such as 0.33.0 "
                      "(it names the version's directory).")
    elif version is not None:
        errors += _version_effect_errors(str(version), current, where)
    environment, args = change.get("environment") or {}, change.get("extra_args") or []
    if environment or args:
        variant = {"name": str(change.get("name") or "change"), "environment": environment, "extra_args": args}
        base = current.get("vllm_environment") or {}
        found = variant_errors(where, [variant], base if isinstance(base, Mapping) else None, server=True)
        errors += [e.replace(f"{where}[{variant['name']}]", where).replace(f"{where}[0]", where) for e in found]
    elif version is None and not unknown:
        errors.append(f"{where} changes nothing: give a version, environment or extra_args, or {{}} to roll out "
                      "the inventory's settings.")
    return errors


def _version_effect_errors(version: str, current: Mapping, where: str) -> list[str]:
    """The change's ``version`` refused where the unit's executable does not follow ``vllm_version``."""
    now, after = current.get("vllm_executable"), current.get("vllm_executable_after")
    if now is None or after is None or version == str(current.get("vllm_version")) or str(now) != str(after):
        return []
    installs = current.get("vllm_install_enabled")
    why = "" if installs is None or installs else " and vllm_install_enabled is false (nothing installs it)"
    return [f"{where}.version is {version}, but this host runs {now} whatever the version (its vllm_executable "
            f"does not follow vllm_version{why}): it would keep running vLLM {current.get('vllm_version')} and be "
            "reported as changed. Nothing was stopped. Either leave version out of the change, or make "
            "vllm_executable follow the version (the vllm role's default: {{ vllm_venv_dir }}/bin/vllm, "
            "vllm_venv_dir being <vllm_versions_dir>/<version>)."]


def change_text(change: Mapping | None, current: Mapping) -> str:
    """The change in words: ``vLLM 0.32.0 -> 0.33.0; NCCL_PROTO LL -> LL128, -NCCL_ALGO; + --max-num-seqs 64``;
    ``the settings as the inventory gives them (vLLM 0.32.0)`` for the empty change."""
    change = change or {}
    if not change:
        return f"the settings as the inventory gives them (vLLM {current.get('vllm_version')})"
    parts = []
    if change.get("version") and str(change["version"]) != str(current.get("vllm_version")):
        parts.append(f"vLLM {current.get('vllm_version')} -> {change['version']}")
    env, base = change.get("environment") or {}, current.get("vllm_environment") or {}
    words = []
    for key, value in env.items():
        if value is None:
            words.append(f"-{key}")
        elif key in base and str(base[key]) != str(value):
            words.append(f"{key} {base[key]} -> {value}")
        elif key not in base:
            words.append(f"{key}={value}")
    if words:
        parts.append(", ".join(words))
    if change.get("extra_args"):
        parts.append("+ " + shlex.join(str(a) for a in change["extra_args"]))
    return "; ".join(parts) or "no change to the settings"
