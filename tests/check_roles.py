#!/usr/bin/env python3
"""Fail when the roles cross the lines the house style draws between them (STYLE.md, section 16).

- A role is entered only through a declared entry point: every ``include_role``/``import_role``
  with ``tasks_from`` names an entry point of the target's ``meta/argument_specs.yml``.
- A job role (one that includes the internal skeleton ``vllm_job`` with ``tasks_from: run``)
  declares the entry points the skeleton calls back (``checks``, ``work``, ``report``) and never
  includes another job role: what jobs share lives in the skeleton or in a piece role.
- A role's private names (``__<role>_*``, facts, registers and vars) appear only in that role's
  own files: no role, playbook or template reads another's.

Run by ``make lint``; exit status 1 with one line per problem.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SKELETON = "vllm_job"
CALLBACKS = ("checks", "work", "report")
INCLUDE_ACTIONS = {f"{prefix}{verb}_role" for prefix in ("", "ansible.builtin.", "ansible.legacy.")
                   for verb in ("include", "import")}
PRIVATE = re.compile(r"\b__([a-z][a-z0-9_]*)")
BLOCK_KEYS = ("block", "rescue", "always")


def _tasks(node) -> Iterator[dict]:
    """Every task of a tasks or play file, blocks and plays opened."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        if "hosts" in node or "import_playbook" in node or "ansible.builtin.import_playbook" in node:
            for key in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                yield from _tasks(node.get(key) or [])
            for role in node.get("roles") or []:
                yield {"__play_role": role if isinstance(role, str) else role.get("role") or role.get("name")}
            return
        yield node
        for key in BLOCK_KEYS:
            yield from _tasks(node.get(key) or [])


def _includes(path: Path) -> Iterator[tuple[str, str | None]]:
    """(role, tasks_from or None) of every role include in the file."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError:
        return
    for task in _tasks(data or []):
        if "__play_role" in task:
            yield task["__play_role"], None
            continue
        for action in INCLUDE_ACTIONS & set(task):
            args = task[action] or {}
            if isinstance(args, dict) and args.get("name"):
                tasks_from = args.get("tasks_from")
                yield str(args["name"]), (None if tasks_from is None else re.sub(r"\.ya?ml$", "", str(tasks_from)))


def entry_points(role_dir: Path) -> set[str]:
    spec = role_dir / "meta" / "argument_specs.yml"
    if not spec.exists():
        return set()
    return set((yaml.safe_load(spec.read_text(encoding="utf-8")) or {}).get("argument_specs") or {})


def _owner(name: str, roles: list[str]) -> str | None:
    """The role whose private name ``__name`` is: the longest role name it starts with."""
    owners = [r for r in roles if name.startswith(r + "_")]
    return max(owners, key=len) if owners else None


def check(root: Path) -> list[str]:
    roles_dir = root / "roles"
    roles = sorted(p.name for p in roles_dir.iterdir() if (p / "tasks").is_dir()) if roles_dir.is_dir() else []
    entries = {r: entry_points(roles_dir / r) for r in roles}
    files = sorted(p for p in roles_dir.glob("*/**/*.yml")) if roles_dir.is_dir() else []
    playbooks = sorted([*root.glob("*.yml"), *root.glob("playbooks/*.yml")])
    problems = []

    includes = {}  # file -> [(role, tasks_from)]
    for path in files + playbooks:
        includes[path] = list(_includes(path))
    jobs = {path.relative_to(roles_dir).parts[0] for path, found in includes.items()
            if path.is_relative_to(roles_dir) and (SKELETON, "run") in found}

    for path, found in includes.items():
        where = path.relative_to(root)
        caller = path.relative_to(roles_dir).parts[0] if path.is_relative_to(roles_dir) else None
        for role, tasks_from in found:
            if "{{" in role:  # the skeleton's call back into its job role, checked below
                continue
            if role not in entries:
                problems.append(f"{where}: includes role {role}, which is not in roles/")
                continue
            if tasks_from is not None and tasks_from not in entries[role]:
                problems.append(f"{where}: enters role {role} through tasks_from {tasks_from}, which its "
                                f"meta/argument_specs.yml does not declare as an entry point")
            if caller in jobs and role in jobs and role != caller:
                problems.append(f"{where}: job role {caller} includes job role {role}; what jobs share belongs in "
                                f"{SKELETON} or in a piece role")
    for job in sorted(jobs):
        missing = [c for c in CALLBACKS if c not in entries[job]]
        if missing:
            problems.append(f"roles/{job}: a job role on {SKELETON} must declare the entry points "
                            f"{', '.join(missing)} (meta/argument_specs.yml), which the skeleton calls back")

    # Templates name variables too: a role's own may use its private names, no other's.
    templates = sorted(roles_dir.glob("*/templates/**/*.j2")) if roles_dir.is_dir() else []
    for path in files + playbooks + templates:
        caller = path.relative_to(roles_dir).parts[0] if path.is_relative_to(roles_dir) else None
        text = path.read_text(encoding="utf-8")
        seen = set()
        for match in PRIVATE.finditer(text):
            owner = _owner(match.group(1), roles)
            if owner is not None and owner != caller and match.group(0) not in seen:
                seen.add(match.group(0))
                problems.append(f"{path.relative_to(root)}: uses {match.group(0)}, a private name of role {owner}")
    return problems


def main() -> int:
    problems = check(ROOT)
    for problem in problems:
        print(problem)
    if not problems:
        print("roles keep to their entry points and their own private names")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
