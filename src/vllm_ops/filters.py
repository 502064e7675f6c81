"""The one wrapper every Ansible filter of the collection goes through (``plugins/filter/*.py``).

Each filter is a function of this package; :func:`filter_map` names them for a plugin's
``FilterModule.filters`` and turns what one raises on bad input (a :class:`VllmOpsError`, or the
``TypeError``, ``ValueError``, ``KeyError`` or ``AttributeError`` of a value of the wrong shape) into
Ansible's ``AnsibleFilterError`` prefixed with the filter's name, so the task's message says which
filter refused what. Ansible is imported only then: nothing else of the package needs it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from .errors import VllmOpsError

__all__ = ["filter_map"]

BAD_INPUT = (VllmOpsError, TypeError, ValueError, KeyError, AttributeError)


def _wrap(name: str, func: Callable) -> Callable:
    @functools.wraps(func)
    def filter_(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except BAD_INPUT as exc:
            from ansible.errors import AnsibleFilterError

            raise AnsibleFilterError(f"{name}: {exc}") from exc

    filter_.__name__ = name
    return filter_


def filter_map(**filters: Callable) -> dict[str, Callable]:
    """``{name: filter}`` for ``FilterModule.filters``, each filter wrapped (the module's docstring)."""
    return {name: _wrap(name, func) for name, func in filters.items()}
