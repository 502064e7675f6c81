"""Ansible filters of the all-reduce benchmark role (documented in the sidecar YAML files).

Thin on purpose: the logic lives in ``vllm_ops.allreduce.runs`` where pytest reaches it.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from vllm_ops.allreduce import runs


def _wrap(name, func):
    def filter_(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (KeyError, TypeError, ValueError) as exc:
            raise AnsibleFilterError(f"{name}: {exc!r}") from exc

    filter_.__name__ = name
    filter_.__doc__ = func.__doc__
    return filter_


class FilterModule:
    """All-reduce benchmark filters."""

    def filters(self):
        return {
            "allreduce_bench_runs": _wrap("allreduce_bench_runs", runs.bench_runs),
            "allreduce_bench_failures": _wrap("allreduce_bench_failures", runs.failures),
        }
