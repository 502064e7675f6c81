"""Knobs (environment, or KEY=VALUE lines in the knob file) and fault switches (files, read
at the moment the fault applies, so a test can create or remove them while the server runs).

molecule/resources/standin/README.md lists them."""

import contextlib
import json
import os
import re

# The installed tree's root: lib/vllm_standin/knobs.py -> the directory holding bin/ and lib/.
INSTALL_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def env_float(name, default):
    value = os.environ.get(name, "")
    try:
        return float(value) if value.strip() else default
    except ValueError:
        return default


def release():
    """The installation's ``release.json`` beside its ``bin/`` and ``lib/`` (``{version, removed_args,
    knobs}``, each optional), so that one sandbox can hold the stand-in as several vLLM releases; ``{}``
    without one (vLLM 0.32.0 as modelled)."""
    try:
        with open(os.path.join(INSTALL_ROOT, "release.json"), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_knob_file():
    """Defaults for the knobs from the release's ``knobs`` (a slower release), then from a KEY=VALUE
    file, so a sandbox can set them without touching the unit the role renders; the environment wins."""
    for key, value in (release().get("knobs") or {}).items():
        if key.startswith(("VLLM_STANDIN_", "GPU_SIM_")):
            os.environ.setdefault(key, str(value))
    path = os.environ.get("VLLM_STANDIN_CONFIG", "/etc/vllm-standin.env")
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return
    for line in lines:
        key, sep, value = line.strip().partition("=")
        if sep and key.startswith(("VLLM_STANDIN_", "GPU_SIM_")):
            os.environ.setdefault(key, value.strip().strip('"'))


def fault_dir():
    return os.environ.get("VLLM_STANDIN_FAULT_DIR", "/run/vllm-standin")


def fault(name):
    """Content of fault switch ``name`` (stripped), or None when it is off."""
    try:
        with open(os.path.join(fault_dir(), name), encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


def consume_if_once(name):
    """A switch whose content is ``once`` fires one time: remove it when it fires.

    Lets a test fail one start (the profiling variant's) and not the next
    (the restore's). The fault dir must be writable by the server's user.
    """
    if fault(name) == "once":
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(fault_dir(), name))


def count_down(name):
    """A switch whose content is ``after N`` lets this one go by: ``after N-1``, or ``once`` after
    the last (which then fires one time). True when it let this one go by; False for any other
    content, which applies as it is.

    Lets a test fail a later start and not the ones before it (a tune's winner deployed after its
    own variant loaded). The fault dir must be writable by the server's user.
    """
    content = fault(name)
    match = re.fullmatch(r"after\s+(\d+)", content or "")
    if not match:
        return False
    left = int(match.group(1)) - 1
    with contextlib.suppress(OSError), open(os.path.join(fault_dir(), name), "w", encoding="utf-8") as fh:
        fh.write(f"after {left}\n" if left > 0 else "once\n")
    return True


def fault_names_rank(name, rank):
    """A switch whose content lists ranks (empty: all) applies to ``rank``."""
    content = fault(name)
    if content is None:
        return False
    ranks = [tok for tok in re.split(r"[\s,]+", content) if tok]
    return not ranks or str(rank) in ranks
