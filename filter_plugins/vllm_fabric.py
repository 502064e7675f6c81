"""Filters over the GPUs' PCIe links as nvidia-smi reads them (documented in the sidecar YAML files).

Thin on purpose: the judgement lives in ``vllm_ops.fabric`` where pytest reaches it; this file only
names the filters (vllm_ops.filters turns their errors into AnsibleFilterError naming
each). No I/O.
"""

from __future__ import annotations

from vllm_ops import fabric
from vllm_ops.filters import filter_map


def _preflight(result, mode="warn", tensor_parallel_size=0, environment=None):
    return fabric.preflight(result, mode, tensor_parallel_size, environment)


def _capture_warnings(record, tensor_parallel_size, environment=None):
    return fabric.warnings({"fabric": record, "tensor_parallel_size": tensor_parallel_size,
                            "environment": environment or {}})


class FilterModule:
    """Fabric filters."""

    def filters(self):
        return filter_map(
            vllm_pcie_link_preflight=_preflight,
            vllm_fabric_warnings=_capture_warnings,
        )
