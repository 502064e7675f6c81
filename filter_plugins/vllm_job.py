"""Ansible filters of the job skeleton that every service-stopping job shares (documented in the
sidecar YAML files).

Thin on purpose: the logic lives in ``vllm_ops.job`` where pytest reaches it; this file only
turns the library's errors into AnsibleFilterError naming the filter. No I/O.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

try:
    from vllm_ops.job import JobInputError, downtime_text
except ImportError as exc:  # the controller's Python lacks the project's package
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


def _wrap(name, func):
    def filter_(*args, **kwargs):
        if _IMPORT_ERROR is not None:
            raise AnsibleFilterError(
                f"{name}: the vllm_ops package is not importable by the controller's Python "
                f"({_IMPORT_ERROR}); run ansible from the project's .venv"
            )
        try:
            return func(*args, **kwargs)
        except (JobInputError, TypeError) as exc:
            raise AnsibleFilterError(f"{name}: {exc}") from None

    filter_.__name__ = name
    filter_.__doc__ = func.__doc__
    return filter_


class FilterModule:
    """Job filters."""

    def filters(self):
        return {
            "vllm_job_downtime_text": _wrap("vllm_job_downtime_text", downtime_text),
        }
