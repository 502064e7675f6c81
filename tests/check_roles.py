#!/usr/bin/env python3
"""Fail when the roles cross the lines the house style draws between them (STYLE.md, section 16).

- A role is called by its fully qualified name (``vllm_ops.serving.<role>``, the collection of
  ``galaxy.yml``) and entered only through a declared entry point: every ``include_role``/``import_role``
  with ``tasks_from`` names an entry point of the target's ``meta/argument_specs.yml``.
- A job is sequenced by its playbook, never by a role: a play that enters the internal skeleton
  ``vllm_job`` runs, in this order, its ``preflight``, the job role's ``checks``, ``begin``, ``open``,
  the job role's ``work``, ``failed`` (the rescue), ``end`` (the always), the job role's ``report``,
  ``failed`` and ``finish`` (the always); no role includes a job role, nor a role named by a template.
- Every operation has a root entry: each ``playbooks/<op>.yml`` is imported by ``<op>.yml`` at the
  repository root, the way ops staff run them (``ansible-playbook profile.yml``), and left out of the built
  collection (``galaxy.yml``'s ``build_ignore``), whose playbooks are ``vllm_ops.serving.<op>``.
- A role's private names (``__<role>_*``, facts, registers and vars) appear only in that role's
  own files: no role, playbook or template reads another's.
- Tests sit beside what they test: every Molecule scenario is named for an operation
  (``playbooks/<op>.yml``; ``<op>_multi`` for it on several hosts) or a role (``roles/<role>``), but the
  suites of :data:`SUITES`, each named for what it covers.

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
# The collection this checkout is (galaxy.yml): its roles are called by their fully qualified names.
COLLECTION = "vllm_ops.serving"
# A job's playbook, in order: (role, entry point), JOB standing for the job role.
JOB = "<job>"
SEQUENCE = ((SKELETON, "preflight"), (JOB, "checks"), (SKELETON, "begin"), (SKELETON, "open"), (JOB, "work"),
            (SKELETON, "failed"), (SKELETON, "end"), (JOB, "report"), (SKELETON, "failed"), (SKELETON, "finish"))
INCLUDE_ACTIONS = {f"{prefix}{verb}_role" for prefix in ("", "ansible.builtin.", "ansible.legacy.")
                   for verb in ("include", "import")}
PRIVATE = re.compile(r"\b__([a-z][a-z0-9_]*)")
BLOCK_KEYS = ("block", "rescue", "always")
# The Molecule scenarios named for neither an operation nor a role, and what each covers.
SUITES = {"default": "the vllm role's deploy, its watch and incidents (Molecule's default scenario)",
          "vllm_cpu": "the operations against vLLM's real CPU build (make test-real)",
          "resources": "no scenario: the sandbox, the stand-ins and the helpers every scenario shares"}


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


def _imports(path: Path) -> list[str]:
    """The playbooks a playbook file imports."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    except yaml.YAMLError:
        return []
    return [str(play.get(key)) for play in data if isinstance(play, dict)
            for key in ("import_playbook", "ansible.builtin.import_playbook") if play.get(key)]


def entry_points(role_dir: Path) -> set[str]:
    spec = role_dir / "meta" / "argument_specs.yml"
    if not spec.exists():
        return set()
    return set((yaml.safe_load(spec.read_text(encoding="utf-8")) or {}).get("argument_specs") or {})


def _owner(name: str, roles: list[str]) -> str | None:
    """The role whose private name ``__name`` is: the longest role name it starts with."""
    owners = [r for r in roles if name.startswith(r + "_")]
    return max(owners, key=len) if owners else None


def _steps(steps) -> str:
    return ", ".join(f"{role}:{tasks_from}" for role, tasks_from in steps) or "nothing"


def check(root: Path) -> list[str]:
    roles_dir = root / "roles"
    roles = sorted(p.name for p in roles_dir.iterdir() if (p / "tasks").is_dir()) if roles_dir.is_dir() else []
    entries = {r: entry_points(roles_dir / r) for r in roles}
    files = sorted(p for p in roles_dir.glob("*/**/*.yml")) if roles_dir.is_dir() else []
    playbooks = sorted([*root.glob("*.yml"), *root.glob("playbooks/*.yml")])
    problems = []

    includes = {}  # file -> [(role without the collection's prefix, tasks_from)]
    for path in files + playbooks:
        includes[path] = []
        for role, tasks_from in _includes(path):
            if role.startswith(f"{COLLECTION}."):
                role = role[len(COLLECTION) + 1:]
            elif "{{" not in role:
                problems.append(f"{path.relative_to(root)}: includes role {role} by a short name; call it "
                                f"{COLLECTION}.{role}, as from an installed collection")
            includes[path].append((role, tasks_from))
    # A job role: one whose checks a playbook runs beside the skeleton.
    jobs = {}  # job role -> its playbooks
    for path, found in includes.items():
        if path.is_relative_to(roles_dir) or (SKELETON, "begin") not in found:
            continue
        job_roles = sorted({role for role, tasks_from in found if tasks_from == "checks" and role != SKELETON})
        if len(job_roles) != 1:
            problems.append(f"{path.relative_to(root)}: a job playbook runs one job role's checks, not {job_roles}")
            continue
        job = job_roles[0]
        jobs.setdefault(job, []).append(path)
        steps = tuple((JOB if role == job else role, tasks_from) for role, tasks_from in found
                      if role in (job, SKELETON))
        if steps != SEQUENCE:
            problems.append(f"{path.relative_to(root)}: runs the job as {_steps(steps)}; a job playbook runs "
                            f"{_steps(SEQUENCE)} (roles/{SKELETON}/meta/argument_specs.yml)")

    for path, found in includes.items():
        where = path.relative_to(root)
        caller = path.relative_to(roles_dir).parts[0] if path.is_relative_to(roles_dir) else None
        for role, tasks_from in found:
            if "{{" in role:
                problems.append(f"{where}: includes a role named by a template ({role}); name the role, so that "
                                "every edge between roles can be read")
                continue
            if role not in entries:
                problems.append(f"{where}: includes role {role}, which is not in roles/")
                continue
            if tasks_from is not None and tasks_from not in entries[role]:
                problems.append(f"{where}: enters role {role} through tasks_from {tasks_from}, which its "
                                f"meta/argument_specs.yml does not declare as an entry point")
            if caller is not None and role in jobs and role != caller:
                problems.append(f"{where}: role {caller} includes job role {role}; a job is sequenced by its playbook, "
                                f"and what jobs share belongs in {SKELETON} or in a piece role")

    # Every operation, one way in from the root, and that way only in the checkout.
    galaxy = root / "galaxy.yml"
    ignored = set((yaml.safe_load(galaxy.read_text(encoding="utf-8")) or {}).get("build_ignore") or []
                  if galaxy.is_file() else [])
    for path in sorted(root.glob("playbooks/*.yml")):
        entry = root / path.name
        imported = _imports(entry) if entry.is_file() else []
        if f"playbooks/{path.name}" not in imported:
            problems.append(f"playbooks/{path.name}: no root entry {path.name} imports it; every operation has one, "
                            f"the way ops staff run them")
        elif galaxy.is_file() and path.name not in ignored:
            problems.append(f"{path.name}: the root entry is not in galaxy.yml's build_ignore; the built collection "
                            f"would carry it beside playbooks/{path.name}")

    # Tests beside what they test: a scenario per operation or per role.
    operations = {p.stem for p in root.glob("playbooks/*.yml")}
    named = operations | {f"{op}_multi" for op in operations} | set(roles) | set(SUITES)
    for scenario in sorted(p.name for p in (root / "molecule").glob("*") if p.is_dir()):
        if scenario not in named:
            problems.append(f"molecule/{scenario}: a scenario is named for the operation (playbooks/<op>.yml) or the "
                            "role (roles/<role>) whose tests it holds")

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
