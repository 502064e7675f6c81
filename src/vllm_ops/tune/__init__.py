"""The tune: from a verdict to a tested fix in one job, at the fewest model loads.

Public API::

    from vllm_ops.tune import build_plan, screen, analyze
    plan = build_plan(summary["verdict"]["next_tests"], unit_environment={...}, unit_args=[...], max_loads=2)

``plan`` turns the verdict's next experiments (or a plan file) into candidates, which of them the
all-reduce floor can pre-screen, and the plan's cost in loads and minutes; ``prescreen`` keeps the
candidates that beat the unit's own settings on the floor beyond its noise and orders what to
load; ``result`` judges what was loaded against the baseline with the experiment's noise band
and writes the result, the host_vars file and the history row; ``cli`` is ``vllm-tune-report``.
"""

from .errors import TuneInputError
from .plan import build_plan, last_load
from .prescreen import screen
from .result import analyze

__all__ = ["TuneInputError", "analyze", "build_plan", "last_load", "screen"]
