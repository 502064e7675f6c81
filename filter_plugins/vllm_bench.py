"""The filters of the benchmark piece (role vllm_bench): the load a job sends and the run records of
one server's points.

A thin wrapper: the load is vllm_ops.experiment.load's, the record's layout the experiment's
(vllm_ops.experiment.plan.runs), which every job that benchmarks reads through vllm_ops.experiment's
analysis. Documentation: the sidecar YAML files beside this file.
"""

from __future__ import annotations

from vllm_ops.experiment.load import recorded, resolve
from vllm_ops.experiment.plan import runs
from vllm_ops.filters import filter_map


class FilterModule:
    def filters(self):
        return filter_map(
            vllm_bench_runs=runs,
            vllm_bench_load=resolve,
            vllm_bench_load_record=recorded,
        )
