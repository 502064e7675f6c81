"""Sweeps: a compact grid of settings that expands into variants, and their spread over a fleet.

A sweep is ``{name?, environment?, options?, extra_args?, fixed_environment?}``:

- ``environment``: ``{VAR: [values] | scalar}`` and ``options``: ``{"--flag": [values] | scalar}``;
  every list-valued entry is an axis, and the variants are the Cartesian product of the axes in
  the order the sweep gives them (the first axis varies slowest). A scalar is common to all.
- an option value ``true`` is the bare flag, ``false`` or null leaves the flag out; any other value
  is ``--flag VALUE``.
- ``extra_args`` (a list of strings) and ``fixed_environment`` (scalars) are common to all.

Each variant is ``{name, environment, extra_args}``; ``extra_args`` are the sweep's ``extra_args``
then the options in order. The name lists the settings that vary (``NCCL_PROTO=LL128,NCCL_MAX_NCHANNELS=8``,
``max-num-seqs=64``; a flag without its dashes, ``flag=off`` when left out), or every setting when
none varies, prefixed ``<name>:`` when the sweep has one. Characters outside ``[A-Za-z0-9._=,+:-]``
become ``_``; a name over 128 characters is cut and ends in ``+`` and 8 hex digits of its hash.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Mapping

from .errors import ExperimentInputError
from .inputs import BASELINE

KEYS = ("name", "environment", "options", "extra_args", "fixed_environment")
MAX_NAME = 128
_BAD = re.compile(r"[^A-Za-z0-9._=,+:-]+")
_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _scalar(value: object) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _clean(name: str) -> str:
    name = _BAD.sub("_", name)
    if len(name) > MAX_NAME:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[:MAX_NAME - 9]}+{digest}"
    return name


def _env_value(where: str, value: object) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if value is None or not _scalar(value):
        raise ExperimentInputError(f"{where} must be a string or number, got {value!r}")
    return str(value)


def _axes(where: str, sweep: Mapping) -> list[tuple[str, str, list, bool]]:
    """(kind, key, values, varies) per entry, in the sweep's order; a scalar is a one-value, non-varying entry."""
    axes = []
    for kind in (k for k in sweep if k in ("environment", "options")):
        table = sweep[kind]
        if not isinstance(table, Mapping):
            raise ExperimentInputError(f"{where}: '{kind}' must be a mapping, got {type(table).__name__}")
        for key, value in table.items():
            if kind == "environment" and not (isinstance(key, str) and _VAR.fullmatch(key)):
                raise ExperimentInputError(f"{where}: environment variable name {key!r} is not valid")
            if kind == "options" and not (isinstance(key, str) and key.startswith("-") and key.strip("-")):
                raise ExperimentInputError(f"{where}: option {key!r} must be a flag such as '--max-num-seqs'")
            if isinstance(value, list):
                if not value:
                    raise ExperimentInputError(f"{where}: {kind} {key!r} has an empty list of values; "
                                               "give at least one value or remove it")
                if not all(_scalar(v) for v in value):
                    raise ExperimentInputError(f"{where}: {kind} {key!r}: each value must be a scalar, got {value!r}")
                axes.append((kind, key, value, True))
            elif _scalar(value):
                axes.append((kind, key, [value], False))
            else:
                raise ExperimentInputError(f"{where}: {kind} {key!r} must be a list of values or a scalar, "
                                           f"got {type(value).__name__}")
    return axes


def _label(kind: str, key: str, value: object) -> str:
    if kind == "environment":
        return f"{key}={_env_value(key, value)}"
    flag = key.lstrip("-")
    if value is True:
        return flag
    if value is False or value is None:
        return f"{flag}=off"
    return f"{flag}={value}"


def _expand_one(where: str, sweep: Mapping) -> list[dict]:
    unknown = [k for k in sweep if k not in KEYS]
    if unknown:
        raise ExperimentInputError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
                                   f"{', '.join(map(repr, unknown))}; a sweep has only {', '.join(KEYS)}")
    prefix = sweep.get("name")
    if prefix is not None and (not isinstance(prefix, str) or not prefix.strip()):
        raise ExperimentInputError(f"{where}: 'name' must be a non-empty string, got {prefix!r}")
    extra = sweep.get("extra_args") or []
    if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
        raise ExperimentInputError(f"{where}: 'extra_args' must be a list of strings, got {extra!r}")
    fixed = sweep.get("fixed_environment") or {}
    if not isinstance(fixed, Mapping):
        raise ExperimentInputError(f"{where}: 'fixed_environment' must be a mapping, got {type(fixed).__name__}")
    fixed_env = {k: _env_value(f"{where}: fixed_environment {k!r}", v) for k, v in fixed.items()}
    axes = _axes(where, sweep)
    if not axes and not fixed_env and not extra:
        raise ExperimentInputError(f"{where}: the sweep sets nothing; give environment, options or extra_args")
    varying = [a for a in axes if a[3]]
    out = []
    for combo in itertools.product(*(a[2] for a in axes)):
        env = dict(fixed_env)
        args = list(extra)
        labels = []
        for (kind, key, _values, varies), value in zip(axes, combo, strict=True):
            if kind == "environment":
                env[key] = _env_value(f"{where}: environment {key!r}", value)
            elif value is True:
                args.append(key)
            elif value is not False and value is not None:
                args += [key, str(value)]
            if varies or not varying:
                labels.append(_label(kind, key, value))
        if not labels:  # only fixed settings
            labels = [f"{k}={v}" for k, v in fixed_env.items()] + [a.lstrip("-") for a in extra]
        name = _clean((f"{prefix}:" if prefix else "") + ",".join(labels))
        out.append({"name": name, "environment": env, "extra_args": args})
    return out


def expand(sweeps: list[Mapping] | Mapping) -> list[dict]:
    """The variants of ``sweeps`` (a list of sweeps, or one), in order; names are unique across them."""
    if isinstance(sweeps, Mapping):
        sweeps = [sweeps]
    if not isinstance(sweeps, list):
        raise ExperimentInputError(f"sweeps must be a list of mappings, got {type(sweeps).__name__}")
    variants: list[dict] = []
    seen: dict[str, int] = {}
    for i, sweep in enumerate(sweeps):
        where = f"sweep {i + 1}" + (f" ({sweep.get('name')})" if isinstance(sweep, Mapping) and sweep.get("name")
                                    else "")
        if not isinstance(sweep, Mapping):
            raise ExperimentInputError(f"{where} must be a mapping, got {type(sweep).__name__}")
        for v in _expand_one(where, sweep):
            if v["name"] == BASELINE:
                raise ExperimentInputError(f"{where}: a variant may not be named '{BASELINE}'; give the sweep a name")
            if v["name"] in seen:
                other = seen[v["name"]]
                raise ExperimentInputError(f"{where}: variant name {v['name']!r} is also produced by sweep {other}; "
                                           "give the sweeps different names (prefixes) or remove the duplicate")
            seen[v["name"]] = i + 1
            variants.append(v)
    return variants


def assign(variants: list[Mapping], hosts: list[str], host: str) -> list[Mapping]:
    """The variants ``host`` runs when ``variants`` are spread over ``hosts``: round-robin over the
    sorted host list (variant i goes to sorted(hosts)[i % len(hosts)])."""
    if not hosts:
        raise ExperimentInputError("assign: the host list is empty; give the fleet's hosts")
    if len(set(hosts)) != len(hosts):
        raise ExperimentInputError(f"assign: the host list names a host twice: {list(hosts)}")
    order = sorted(hosts)
    if host not in order:
        raise ExperimentInputError(f"assign: host {host!r} is not in the host list {order}")
    k = order.index(host)
    return [v for i, v in enumerate(variants) if i % len(order) == k]
