"""Ansible filters of the all-reduce benchmark role (documented in the sidecar YAML files).

Thin on purpose: the logic lives in ``vllm_ops.allreduce.runs`` where pytest reaches it.
"""

from __future__ import annotations

from vllm_ops.allreduce import runs
from vllm_ops.filters import filter_map


class FilterModule:
    """All-reduce benchmark filters."""

    def filters(self):
        return filter_map(
            allreduce_bench_runs=runs.bench_runs,
            allreduce_bench_failures=runs.failures,
        )
