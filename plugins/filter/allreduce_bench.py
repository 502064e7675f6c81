"""Ansible filters of the all-reduce benchmark role (documented in the sidecar YAML files).

Thin on purpose: the logic lives in ``vllm_ops.allreduce.runs`` where pytest reaches it.
"""

from __future__ import annotations

from ansible_collections.vllm_ops.serving.plugins.plugin_utils.controller import controller_filters


class FilterModule:
    """All-reduce benchmark filters."""

    def filters(self):
        return controller_filters(
            allreduce_bench_runs="vllm_ops.allreduce.runs:bench_runs",
            allreduce_bench_failures="vllm_ops.allreduce.runs:failures",
        )
