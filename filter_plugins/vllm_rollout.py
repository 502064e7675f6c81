"""Filters of the rollout role: the change laid over a host's settings, checked, and in words.

Thin wrappers: the logic and its tests live in vllm_ops.rollout.change.
Documentation: one sidecar YAML file per filter beside this file.
"""

from __future__ import annotations

from vllm_ops.filters import filter_map
from vllm_ops.rollout.change import change_errors, change_text, target


class FilterModule:
    def filters(self):
        return filter_map(
            vllm_rollout_target=target,
            vllm_rollout_change_errors=change_errors,
            vllm_rollout_change_text=change_text,
        )
