"""The filters of the benchmark piece (role vllm_bench): the load a job sends and the run records of
one server's points.

A thin wrapper: the load is vllm_ops.experiment.load's, the record's layout the experiment's
(vllm_ops.experiment.plan.runs), which every job that benchmarks reads through vllm_ops.experiment's
analysis. Documentation: the sidecar YAML files beside this file.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from vllm_ops.experiment import ExperimentInputError
from vllm_ops.experiment.load import recorded, resolve
from vllm_ops.experiment.plan import runs


def _wrap(name, func):
    def filter_(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (ExperimentInputError, TypeError, ValueError, KeyError) as exc:
            raise AnsibleFilterError(f"{name}: {exc}") from exc

    filter_.__name__ = name
    filter_.__doc__ = func.__doc__
    return filter_


class FilterModule:
    def filters(self):
        return {
            "vllm_bench_runs": _wrap("vllm_bench_runs", runs),
            "vllm_bench_load": _wrap("vllm_bench_load", resolve),
            "vllm_bench_load_record": _wrap("vllm_bench_load_record", recorded),
        }
