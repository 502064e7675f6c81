"""Ansible's linear strategy run through Mitogen (ansible.cfg ``strategy``).

Mitogen keeps one Python interpreter per host for the whole run and sends it each module's code
once, instead of building a module payload and starting a new interpreter for every task. A job's
playbook (two to three hundred tasks) then runs in about two thirds of the time (measured in
docs/testing.md). Mitogen ships the strategy inside its package, ``ansible_mitogen``, pinned in
requirements.lock; this file only names it where ``strategy_plugins`` looks, so that ansible.cfg
needs no path into the virtual environment. ``ANSIBLE_STRATEGY=linear`` runs without it.
"""

from ansible_mitogen.plugins.strategy.mitogen_linear import StrategyModule

__all__ = ["StrategyModule"]
