"""The filter of the benchmark piece (role vllm_bench): the run records of one server's points.

A thin wrapper: the record's layout is the experiment's (vllm_ops.experiment.plan.runs), which
every job that benchmarks reads through vllm_ops.experiment's analysis.
Documentation: the sidecar YAML file beside this file.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from vllm_ops.experiment import ExperimentInputError
from vllm_ops.experiment.plan import runs


def vllm_bench_runs(*args, **kwargs):
    try:
        return runs(*args, **kwargs)
    except (ExperimentInputError, TypeError, ValueError, KeyError) as exc:
        raise AnsibleFilterError(f"vllm_bench_runs: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"vllm_bench_runs": vllm_bench_runs}
