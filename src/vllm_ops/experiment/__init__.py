"""Experiments (baseline and variants benchmarked with ``vllm bench serve``) on the controller.

Public API::

    from vllm_ops.experiment import load_experiment, build_report
    report = build_report([load_experiment("artifacts/h1/experiments/20261201T142500Z")])
    print(report["headline"])

``inputs`` reads and checks the experiment directory, ``analysis`` defines every figure and the
noise rule, ``headline`` the one line, ``report`` the report.json layout, ``history`` the CSV,
``chart`` the PNGs, ``render`` the Markdown, ``sweep`` the grid expansion and fleet assignment,
and ``cli`` the ``vllm-experiment-report`` command.
"""

from .analysis import analyze_host, compare
from .errors import ExperimentInputError
from .headline import headline
from .history import COLUMN_DOCS, COLUMNS, append_experiment
from .inputs import BASELINE, METRICS, load_experiment
from .report import SCHEMA, build_report
from .sweep import assign, expand

__all__ = [
    "BASELINE", "COLUMNS", "COLUMN_DOCS", "METRICS", "SCHEMA", "ExperimentInputError", "analyze_host",
    "append_experiment", "assign", "build_report", "compare", "expand", "headline", "load_experiment",
]
