"""Filters of the rollout role: the change laid over a host's settings, checked, and in words.

Thin wrappers: the logic and its tests live in vllm_ops.rollout.change.
Documentation: one sidecar YAML file per filter beside this file.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from vllm_ops.rollout.change import change_errors, change_text, target


def _wrap(name, func):
    def filter_(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (TypeError, ValueError, AttributeError) as exc:
            raise AnsibleFilterError(f"{name}: {exc}") from exc

    filter_.__name__ = name
    return filter_


class FilterModule:
    def filters(self):
        return {
            "vllm_rollout_target": _wrap("vllm_rollout_target", target),
            "vllm_rollout_change_errors": _wrap("vllm_rollout_change_errors", change_errors),
            "vllm_rollout_change_text": _wrap("vllm_rollout_change_text", change_text),
        }
