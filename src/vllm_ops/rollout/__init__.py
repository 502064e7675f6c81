"""Rollouts (a change of settings or version, a canary gated on performance, then the fleet) on the
controller.

``change`` checks a change and puts it in words, ``gate`` judges the canary's measurement (the
experiment's figures and noise rule), ``report`` the report.json layout over the hosts' records,
``render`` the Markdown, and ``cli`` the ``vllm-rollout-report`` command.
"""

from .change import change_errors, change_text, target
from .errors import RolloutInputError
from .gate import gate
from .report import SCHEMA, build_report, load_rollout

__all__ = ["SCHEMA", "RolloutInputError", "build_report", "change_errors", "change_text", "gate", "load_rollout",
           "target"]
