"""Filters of the experiment role: sweeps, the fleet's assignment and the records it keeps.

Thin wrappers: the logic and its tests live in vllm_ops.experiment.
Documentation: one sidecar YAML file per filter beside this file.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from vllm_ops.experiment import ExperimentInputError, assign, expand
from vllm_ops.experiment.plan import outcomes, server_variant


def _wrap(name, func):
    def filter_(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (ExperimentInputError, TypeError, ValueError, KeyError) as exc:
            raise AnsibleFilterError(f"{name}: {exc}") from exc

    filter_.__name__ = name
    return filter_


def _assign(variants, hosts, host):
    return assign(list(variants), sorted(hosts), host)


class FilterModule:
    def filters(self):
        return {
            "vllm_experiment_sweep": _wrap("vllm_experiment_sweep", expand),
            "vllm_experiment_assign": _wrap("vllm_experiment_assign", _assign),
            "vllm_experiment_server_variant": _wrap("vllm_experiment_server_variant", server_variant),
            "vllm_experiment_outcomes": _wrap("vllm_experiment_outcomes", outcomes),
        }
