"""The collection's filters on the controller's Python package, ``vllm_ops``.

Every filter of ``plugins/filter`` is a function of the package (its logic and tests live there), named
for Ansible through the package's one wrapper (``vllm_ops.filters.filter_map``: a bad input fails naming
the filter). The package is a requirement of the collection on the controller, installed beside it
(``make collection`` builds its wheel). It is imported when Ansible asks a plugin for its filters, not
when the plugin is loaded, so that without it each filter is still there and fails saying what to
install, instead of the plugin being skipped and a template failing on a filter it cannot find.
"""

from __future__ import annotations

import importlib
import sys

MISSING = ("the filter {name} runs the vllm_ops Python package on the controller, and {python} cannot import "
           "it ({error}): install the package into the Python that runs Ansible (pip install the wheel that "
           "make collection builds, or run from the checkout's .venv)")


def controller_filters(**targets):
    """``{name: filter}`` for ``FilterModule.filters``: each target is ``"module:function"`` of the package, or
    a function of the plugin (which imports the package itself when it runs)."""
    try:
        filter_map = importlib.import_module("vllm_ops.filters").filter_map
        functions = {name: _resolve(target) for name, target in targets.items()}
    except ImportError as exc:
        return {name: _missing(name, exc) for name in targets}
    return filter_map(**functions)


def _resolve(target):
    if callable(target):
        return target
    module, function = target.split(":")
    return getattr(importlib.import_module(module), function)


def _missing(name, error):
    def filter_(*args, **kwargs):
        from ansible.errors import AnsibleFilterError

        raise AnsibleFilterError(MISSING.format(name=name, python=sys.executable, error=error))

    filter_.__name__ = name
    return filter_
