"""Filters over the GPUs' PCIe links as nvidia-smi reads them (documented in the sidecar YAML files).

Thin on purpose: the judgement lives in ``vllm_ops.fabric`` where pytest reaches it; this file only
names the filters (vllm_ops.filters turns their errors into AnsibleFilterError naming
each). No I/O.
"""

from __future__ import annotations

from ansible_collections.vllm_ops.serving.plugins.plugin_utils.controller import controller_filters


def _preflight(result, mode="warn", tensor_parallel_size=0, environment=None):
    from vllm_ops import fabric

    return fabric.preflight(result, mode, tensor_parallel_size, environment)


def _capture_warnings(record, tensor_parallel_size, environment=None):
    from vllm_ops import fabric

    return fabric.warnings({"fabric": record, "tensor_parallel_size": tensor_parallel_size,
                            "environment": environment or {}})


class FilterModule:
    """Fabric filters."""

    def filters(self):
        return controller_filters(
            vllm_pcie_link_preflight=_preflight,
            vllm_fabric_warnings=_capture_warnings,
        )
