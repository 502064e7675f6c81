#!/usr/bin/env python3
"""Fail when a role's defaults/main.yml and meta/argument_specs.yml disagree.

A spec `default:` is documentation only; the value that counts is in
defaults/main.yml. Both must name the same variables with the same values:
every default is an option of some entry point, and every option of any entry
point is either required or has its value in defaults/main.yml.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def check(role: Path) -> list[str]:
    defaults_file = role / "defaults/main.yml"
    defaults = (yaml.safe_load(defaults_file.read_text()) or {}) if defaults_file.exists() else {}
    specs = yaml.safe_load((role / "meta/argument_specs.yml").read_text())["argument_specs"]
    options = {}
    for entry in specs.values():
        options.update((entry or {}).get("options") or {})
    problems = []
    for name in sorted(set(defaults) - set(options)):
        problems.append(f"{role.name}: {name} is in defaults/main.yml but not in meta/argument_specs.yml")
    for name, spec in sorted(options.items()):
        if name not in defaults:
            if not spec.get("required"):
                problems.append(f"{role.name}: {name} is in the argument spec but has no value in defaults/main.yml")
            continue
        if "default" in spec and spec["default"] != defaults[name]:
            problems.append(
                f"{role.name}: {name} defaults to {defaults[name]!r} but the spec documents {spec['default']!r}"
            )
        if not spec.get("description"):
            problems.append(f"{role.name}: {name} has no description in the argument spec")
    return problems


def main() -> int:
    roles = [role for role in sorted((ROOT / "roles").iterdir()) if (role / "meta/argument_specs.yml").exists()]
    problems = [p for role in roles for p in check(role)]
    for problem in problems:
        print(problem)
    if not problems:
        print("argument specs match defaults")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
