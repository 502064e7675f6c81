"""Render ``rollout_report.md.j2`` (shipped in ``vllm_ops/templates/``) from a report dict, the project's
one way (:mod:`vllm_ops.render`: plain Jinja2, no Ansible filter)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..render import render
from .errors import RolloutInputError

TEMPLATE = "rollout_report.md.j2"


def render_markdown(report: Mapping, template: str | os.PathLike | None = None) -> str:
    """The Markdown report: ``template`` (None: the shipped one) rendered with ``report`` as ``report``."""
    return render(template, TEMPLATE, {"report": report}, error=RolloutInputError)
