"""The filters of the benchmark piece (role vllm_bench): the load a job sends and the run records of
one server's points.

A thin wrapper: the load is vllm_ops.experiment.load's, the record's layout the experiment's
(vllm_ops.experiment.plan.runs), which every job that benchmarks reads through vllm_ops.experiment's
analysis. Documentation: the sidecar YAML files beside this file.
"""

from __future__ import annotations

from ansible_collections.vllm_ops.serving.plugins.plugin_utils.controller import controller_filters


class FilterModule:
    def filters(self):
        return controller_filters(
            vllm_bench_runs="vllm_ops.experiment.plan:runs",
            vllm_bench_load="vllm_ops.experiment.load:resolve",
            vllm_bench_load_record="vllm_ops.experiment.load:recorded",
        )
