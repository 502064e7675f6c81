"""The stand-in's all-reduce, which NCCL settings scale: one model for the server (its decode step,
its traces) and for the floor benchmark's double (``allreduce_bench.py``), so that a setting moves
the floor's figures and the served latency the same way.

Knobs (environment, or the knob file):

- ``VLLM_STANDIN_ALLREDUCE_MS`` (default 0: no all-reduce time, the stand-in as it always was): the
  all-reduce part of each decode step at factor 1, added to ``VLLM_STANDIN_TPOT_MS``. When it is
  above 0 the traces are the model's own (``traces.model_trace``), not the templates.
- ``VLLM_STANDIN_NCCL_FACTORS``: entries ``VAR=VALUE:FACTOR`` separated by spaces or commas, e.g.
  ``NCCL_PROTO=LL128:0.5 NCCL_MAX_NCHANNELS=8:1.3``. The factor of an environment is the product of
  the factors of the entries it matches (a variable set to that value), 1 when it matches none.
- ``VLLM_STANDIN_ALLREDUCE_CALL_US`` (20) and ``VLLM_STANDIN_ALLREDUCE_GBPS`` (10): the floor double's
  time per call of B bytes at factor 1, ``CALL_US + B / (GBPS * 1000)`` µs.
"""

import os
import re

from vllm_standin.knobs import env_float

# The floor double's loops: each one's time is the model's times one of these, so that every run
# has the same small spread (min 0.98, p90 about 1.02 of the median) and a test can compute it.
LOOP_SPREAD = (1.0, 0.98, 1.02, 0.99, 1.01)


def factors(text=None):
    """``[(VAR, VALUE, FACTOR)]`` of ``VLLM_STANDIN_NCCL_FACTORS`` (or ``text``); a bad entry is a
    ValueError naming it."""
    text = os.environ.get("VLLM_STANDIN_NCCL_FACTORS", "") if text is None else text
    out = []
    for entry in (e for e in re.split(r"[\s,]+", text) if e):
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=([^:]*):([0-9.]+)", entry)
        if not match:
            raise ValueError(f"VLLM_STANDIN_NCCL_FACTORS: {entry!r} is not VAR=VALUE:FACTOR")
        out.append((match.group(1), match.group(2), float(match.group(3))))
    return out


def factor(environ=None, text=None):
    """The all-reduce factor of ``environ`` (default: this process's environment)."""
    environ = os.environ if environ is None else environ
    result = 1.0
    for var, value, f in factors(text):
        if environ.get(var) == value:
            result *= f
    return result


def step_allreduce_ms(environ=None):
    """The all-reduce part of a decode step under ``environ``'s NCCL settings, ms."""
    return env_float("VLLM_STANDIN_ALLREDUCE_MS", 0.0) * factor(environ)


def call_us(nbytes, environ=None):
    """The floor double's time per all-reduce call of ``nbytes`` under ``environ``'s settings, µs."""
    base = env_float("VLLM_STANDIN_ALLREDUCE_CALL_US", 20.0) + nbytes / (env_float("VLLM_STANDIN_ALLREDUCE_GBPS", 10.0)
                                                                          * 1000.0)
    return base * factor(environ)
