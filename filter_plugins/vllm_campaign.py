"""Ansible filters for the profiling campaign's report (documented in the sidecar YAML files).

Thin on purpose: the logic lives in ``vllm_ops.campaign`` where pytest reaches it; this file
only turns the library's errors into AnsibleFilterError naming the filter. No I/O: the chart
and the history line are written by the ``vllm-campaign-report`` command.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

try:
    from vllm_ops.campaign import headline, latency_stats
    from vllm_ops.errors import VllmOpsError
    from vllm_ops.job import downtime_text, duration
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
        except (VllmOpsError, TypeError) as exc:
            raise AnsibleFilterError(f"{name}: {exc}") from None

    filter_.__name__ = name
    filter_.__doc__ = func.__doc__
    return filter_


def _headline(summary, host, report_path=None, downtime=None):
    return headline(host, summary, report_path, downtime)


class FilterModule:
    """Profiling campaign filters."""

    def filters(self):
        return {
            "vllm_campaign_headline": _wrap("vllm_campaign_headline", _headline),
            "vllm_campaign_latency_stats": _wrap("vllm_campaign_latency_stats", latency_stats),
            "vllm_campaign_duration": _wrap("vllm_campaign_duration", duration),
            "vllm_campaign_downtime_text": _wrap("vllm_campaign_downtime_text", downtime_text),
        }
