"""Ansible filters of the job skeleton that every service-stopping job shares (documented in the
sidecar YAML files).

Thin on purpose: the logic lives in ``vllm_ops.job`` where pytest reaches it; this file only
names the filters (vllm_ops.filters turns their errors into AnsibleFilterError naming
each). No I/O.
"""

from __future__ import annotations

from ansible_collections.vllm_ops.serving.plugins.plugin_utils.controller import controller_filters


class FilterModule:
    """Job filters."""

    def filters(self):
        return controller_filters(
            vllm_job_downtime_text="vllm_ops.job:downtime_text",
        )
