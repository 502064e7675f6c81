"""The one way the project renders a report: plain Jinja2, from Python, with no Ansible filter.

The report templates ship inside the package (``vllm_ops/templates/``, :data:`TEMPLATES`), so a
command needs no path to find them; a command's ``--template`` overrides the shipped one. The
settings are those of ``ansible.builtin.template`` (``trim_blocks``, the final newline kept), so
a template reads the same wherever it was written, and undefined variables are errors
(``StrictUndefined``): a template that asks for a figure nobody computed fails instead of
printing nothing. The figures come computed; a template does no arithmetic.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from .errors import VllmOpsError

__all__ = ["TEMPLATES", "render", "template_path"]

TEMPLATES = resources.files("vllm_ops") / "templates"


def template_path(name: str) -> Path:
    """The shipped template called ``name`` (``campaign_report.md.j2``, ``experiment_report.md.j2``)."""
    return Path(str(TEMPLATES / name))


def render(template: str | os.PathLike | None, default: str, variables: Mapping, *,
           error: type[Exception] = VllmOpsError) -> str:
    """``template`` (a path; None: the shipped ``default``) rendered with ``variables``. A template
    that cannot be read or rendered raises ``error`` naming its path."""
    import jinja2

    path = template_path(default) if template is None else Path(template)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"template {path}: {exc.strerror or exc}") from None
    # trim_blocks and the final newline as ansible.builtin.template has them by default
    # A template imports the shared macros (templates/_loads.md.j2) from beside itself, else from the package.
    loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(str(path.parent)), jinja2.FileSystemLoader(str(TEMPLATES))])
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True,
                             autoescape=False, loader=loader)
    try:
        return env.from_string(text).render(**variables)
    except jinja2.TemplateError as exc:
        raise error(f"template {path}: {exc}") from None
