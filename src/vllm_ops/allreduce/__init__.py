"""The host's all-reduce floor, in one package: how it is measured, read, drawn and reported.

Public API::

    from vllm_ops.allreduce import bench_runs, failures, load_floor
    floor = load_floor("artifacts/h1/20261201T105022Z/allreduce/allreduce-unit.json")

``runs`` builds the ``allreduce_bench`` role's runs on the host (``systemd-run`` command lines)
and reads their failures, ``floor`` reads a measured floor and sets it beside a trace's
collectives (the trace summarizer uses it), ``chart`` draws it, and ``cli`` is the
``vllm-allreduce-report`` command.
"""

from .errors import AllreduceInputError
from .floor import load_floor
from .runs import BASELINE, UNIT_RESULT, bench_runs, failures, result_name

__all__ = ["BASELINE", "UNIT_RESULT", "AllreduceInputError", "bench_runs", "failures", "load_floor", "result_name"]
