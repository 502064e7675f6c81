"""Filters that render the vllm role's unit, environment and checks.

Thin wrappers: the logic and its tests live in the vllm_ops package.
Documentation: one sidecar YAML file per filter beside this file.
"""

from __future__ import annotations

from ansible_collections.vllm_ops.serving.plugins.plugin_utils.controller import controller_filters


def _variant_errors(variants, where="variants", base_environment=None, server=False):
    from vllm_ops import validate

    return validate.variant_errors(where, variants, base_environment, server)


class FilterModule:
    def filters(self):
        return controller_filters(
            vllm_cli_options="vllm_ops.systemd:cli_options",
            vllm_systemd_command="vllm_ops.systemd:exec_command",
            vllm_systemd_env_quote="vllm_ops.systemd:quote_env_value",
            vllm_settings_errors="vllm_ops.validate:settings_errors",
            vllm_variant_errors=_variant_errors,
            vllm_service_environment="vllm_ops.systemd:service_environment",
            vllm_unset_names="vllm_ops.systemd:unset_names",
            vllm_drift_words="vllm_ops.systemd:drift_words",
        )
