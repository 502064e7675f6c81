"""What the controller's report commands share: reading a JSON input and running a command.

:func:`read_json` raises the error class its caller names (``CampaignInputError``,
``ExperimentInputError``, ...); :func:`run_command` turns any :class:`~vllm_ops.errors.VllmOpsError`
into one line on stderr, whichever layer raised it.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

from .errors import VllmOpsError

__all__ = ["read_json", "run_command"]


def read_json(path: str | Path, what: str, error: type[Exception], *, missing: str | None = None,
              damaged: str = "") -> object:
    """The JSON document at ``path``, or ``error`` with one sentence naming ``what`` and the path.
    ``missing``, when given, replaces the system's words for a file that does not exist;
    ``damaged`` is appended to the message of a document that does not parse."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise error(f"{what} {path}: {missing or exc.strerror or exc}") from None
    except OSError as exc:
        raise error(f"{what} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise error(f"{what} {path}: not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{what} {path}: invalid JSON ({exc.msg}, line {exc.lineno}){damaged}") from None


def run_command(prog: str, call: Callable[[], str]) -> int:
    """Run ``call`` and print what it returns: exit 0; on bad input (a :class:`VllmOpsError`) or an
    output that could not be written, one line on stderr and exit 2."""
    try:
        text = call()
    except VllmOpsError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # an output could not be written
        print(f"{prog}: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    with contextlib.suppress(BrokenPipeError):  # stdout closed early (| head): not an error of ours
        print(text)
    return 0
