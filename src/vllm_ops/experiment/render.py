"""Render ``templates/experiment_report.md.j2`` from a report dict with plain Jinja2 (the template
needs no Ansible filter, so the controller's ``ansible.builtin.template`` and this give the same text)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from .errors import ExperimentInputError


def render_markdown(report: Mapping, template: str | os.PathLike) -> str:
    """The Markdown report: ``template`` rendered with ``report`` as ``report``."""
    try:
        import jinja2
    except ImportError:  # pragma: no cover - jinja2 comes with ansible-core on the controller
        raise ExperimentInputError("rendering the Markdown report needs jinja2 (pip install jinja2)") from None
    path = Path(template)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ExperimentInputError(f"template {path}: {exc.strerror or exc}") from None
    # trim_blocks as ansible.builtin.template has it by default, so both render the same text
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True,
                             autoescape=False)
    try:
        return env.from_string(text).render(report=report)
    except jinja2.TemplateError as exc:
        raise ExperimentInputError(f"template {path}: {exc}") from None
