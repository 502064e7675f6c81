"""Filters over the GPUs' PCIe links as nvidia-smi reads them (documented in the sidecar YAML files).

Thin on purpose: the judgement lives in ``vllm_ops.fabric`` where pytest reaches it; this file only
turns the library's errors into AnsibleFilterError naming the filter. No I/O.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

try:
    from vllm_ops import fabric
except ImportError as exc:  # the controller's Python lacks the project's package
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


def _preflight(result, mode="warn", tensor_parallel_size=0, environment=None):
    return fabric.preflight(result, mode, tensor_parallel_size, environment)


def _capture_warnings(record, tensor_parallel_size, environment=None):
    return fabric.warnings({"fabric": record, "tensor_parallel_size": tensor_parallel_size,
                            "environment": environment or {}})


def _wrap(name, func):
    def filter_(*args, **kwargs):
        if _IMPORT_ERROR is not None:
            raise AnsibleFilterError(
                f"{name}: the vllm_ops package is not importable by the controller's Python "
                f"({_IMPORT_ERROR}); run ansible from the project's .venv"
            )
        try:
            return func(*args, **kwargs)
        except (TypeError, ValueError, KeyError) as exc:
            raise AnsibleFilterError(f"{name}: {exc}") from None

    filter_.__name__ = name
    filter_.__doc__ = func.__doc__
    return filter_


class FilterModule:
    """Fabric filters."""

    def filters(self):
        return {
            "vllm_pcie_link_preflight": _wrap("vllm_pcie_link_preflight", _preflight),
            "vllm_fabric_warnings": _wrap("vllm_fabric_warnings", _capture_warnings),
        }
