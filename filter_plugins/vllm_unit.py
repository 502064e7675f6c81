"""Filters that render the vllm role's unit, environment and checks.

Thin wrappers: the logic and its tests live in the vllm_ops package.
Documentation: one sidecar YAML file per filter beside this file.
"""

from __future__ import annotations

from vllm_ops import systemd, validate
from vllm_ops.filters import filter_map


def _variant_errors(variants, where="variants", base_environment=None, server=False):
    return validate.variant_errors(where, variants, base_environment, server)


class FilterModule:
    def filters(self):
        return filter_map(
            vllm_cli_options=systemd.cli_options,
            vllm_systemd_command=systemd.exec_command,
            vllm_systemd_env_quote=systemd.quote_env_value,
            vllm_settings_errors=validate.settings_errors,
            vllm_variant_errors=_variant_errors,
            vllm_service_environment=systemd.service_environment,
            vllm_unset_names=systemd.unset_names,
            vllm_drift_words=systemd.drift_words,
        )
