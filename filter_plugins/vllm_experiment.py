"""Filters of the experiment role: sweeps, the fleet's assignment and the records it keeps.

Thin wrappers: the logic and its tests live in vllm_ops.experiment.
Documentation: one sidecar YAML file per filter beside this file.
"""

from __future__ import annotations

from vllm_ops.experiment import assign, expand
from vllm_ops.experiment.plan import outcomes, server_variant
from vllm_ops.filters import filter_map


def _assign(variants, hosts, host):
    return assign(list(variants), sorted(hosts), host)


class FilterModule:
    def filters(self):
        return filter_map(
            vllm_experiment_sweep=expand,
            vllm_experiment_assign=_assign,
            vllm_experiment_server_variant=server_variant,
            vllm_experiment_outcomes=outcomes,
        )
