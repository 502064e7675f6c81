"""Filters of the experiment role: sweeps, the fleet's assignment and the records it keeps.

Thin wrappers: the logic and its tests live in vllm_ops.experiment.
Documentation: one sidecar YAML file per filter beside this file.
"""

from __future__ import annotations

from ansible_collections.vllm_ops.serving.plugins.plugin_utils.controller import controller_filters


def _assign(variants, hosts, host):
    from vllm_ops.experiment import assign

    return assign(list(variants), sorted(hosts), host)


class FilterModule:
    def filters(self):
        return controller_filters(
            vllm_experiment_sweep="vllm_ops.experiment:expand",
            vllm_experiment_assign=_assign,
            vllm_experiment_server_variant="vllm_ops.experiment.plan:server_variant",
            vllm_experiment_outcomes="vllm_ops.experiment.plan:outcomes",
        )
