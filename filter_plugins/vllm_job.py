"""Ansible filters of the job skeleton that every service-stopping job shares (documented in the
sidecar YAML files).

Thin on purpose: the logic lives in ``vllm_ops.job`` where pytest reaches it; this file only
names the filters (vllm_ops.filters turns their errors into AnsibleFilterError naming
each). No I/O.
"""

from __future__ import annotations

from vllm_ops.filters import filter_map
from vllm_ops.job import downtime_text


class FilterModule:
    """Job filters."""

    def filters(self):
        return filter_map(
            vllm_job_downtime_text=downtime_text,
        )
