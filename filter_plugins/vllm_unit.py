"""Filters that render the vllm role's unit, environment and checks.

Thin wrappers: the logic and its tests live in the vllm_ops package.
Documentation: one sidecar YAML file per filter beside this file.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from vllm_ops import systemd, validate


def _wrap(name, func):
    def filter_(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (TypeError, ValueError, AttributeError) as exc:
            raise AnsibleFilterError(f"{name}: {exc}") from exc

    filter_.__name__ = name
    return filter_


def _variant_errors(variants, where="variants", base_environment=None, server=False):
    return validate.variant_errors(where, variants, base_environment, server)


class FilterModule:
    def filters(self):
        return {
            "vllm_cli_options": _wrap("vllm_cli_options", systemd.cli_options),
            "vllm_systemd_command": _wrap("vllm_systemd_command", systemd.exec_command),
            "vllm_systemd_env_quote": _wrap("vllm_systemd_env_quote", systemd.quote_env_value),
            "vllm_settings_errors": _wrap("vllm_settings_errors", validate.settings_errors),
            "vllm_variant_errors": _wrap("vllm_variant_errors", _variant_errors),
            "vllm_service_environment": _wrap("vllm_service_environment", systemd.service_environment),
            "vllm_unset_names": _wrap("vllm_unset_names", systemd.unset_names),
            "vllm_drift_words": _wrap("vllm_drift_words", systemd.drift_words),
        }
