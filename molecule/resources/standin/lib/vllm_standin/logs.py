"""Logging as vLLM prints it: ``(APIServer pid=N) INFO MM-DD HH:MM:SS [f.py:NN] message``.

vLLM's logger puts the process prefix on its records only; what is written around it (tqdm's
progress, print()ed profiler tables, uvicorn's lines) has none. Each process sets its own
label once (``set_label``) before it logs."""

import os
import sys
import threading
import time

from vllm_standin.processes import ENTRY

_LABEL = "APIServer"
OUT_LOCK = threading.Lock()  # one writer at a time: lines of two threads never interleave


def set_label(label):
    """The process prefix of this process's records: ``APIServer``, ``EngineCore_DP0``, ..."""
    global _LABEL
    _LABEL = label


def _emit(stream, text, prefixed=True):
    """Write ``text`` line by line. vLLM's logger puts the process prefix on its
    records; what goes around it (tqdm, print(), uvicorn) has none."""
    prefix = f"({_LABEL} pid={os.getpid()}) " if prefixed else ""
    lines = "".join(prefix + line + "\n" for line in text.split("\n"))
    with OUT_LOCK:
        stream.write(lines)
        stream.flush()


def log(level, where, msg):
    stamp = time.strftime("%m-%d %H:%M:%S")
    _emit(sys.stdout, f"{level} {stamp} [{where}] {msg}")


def uvicorn_log(msg, level="INFO"):
    _emit(sys.stdout, f"{level + ':':<9} {msg}", prefixed=False)


def fail_with_traceback(exc_type, message, where="api_server.py:1"):
    _emit(sys.stderr, "Traceback (most recent call last):\n"
          f'  File "{ENTRY}", line 1, in <module>\n'
          f"    [{where}]\n{exc_type}: {message}")
