"""Filters of the rollout role: the change laid over a host's settings, checked, and in words.

Thin wrappers: the logic and its tests live in vllm_ops.rollout.change.
Documentation: one sidecar YAML file per filter beside this file.
"""

from __future__ import annotations

from ansible_collections.vllm_ops.serving.plugins.plugin_utils.controller import controller_filters


class FilterModule:
    def filters(self):
        return controller_filters(
            vllm_rollout_target="vllm_ops.rollout.change:target",
            vllm_rollout_change_errors="vllm_ops.rollout.change:change_errors",
            vllm_rollout_change_text="vllm_ops.rollout.change:change_text",
        )
