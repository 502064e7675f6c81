"""Settings in words: a variant's environment and extra arguments as one line of text."""

from __future__ import annotations

import shlex
from collections.abc import Mapping


def settings_text(environment: Mapping, extra_args: list, *, baseline: bool = False) -> str:
    """``NCCL_PROTO=LL128 NCCL_MAX_NCHANNELS=8 --max-num-seqs 64`` (environment in its order, then
    the arguments, shell-quoted; a variable the variant unsets reads ``-NCCL_ALGO``); with neither,
    ``(base settings)`` for the baseline, else ``(no overrides)``."""
    parts = [f"-{k}" if v is None else shlex.quote(f"{k}={v}") for k, v in environment.items()]
    if extra_args:
        parts.append(shlex.join(extra_args))
    if not parts:
        return "(base settings)" if baseline else "(no overrides)"
    return " ".join(parts)
