"""A collection's module run as Ansible runs one on a host: its file, its arguments in a file, its module_utils
imported by the collection's name (the checkout linked in as the collection by make collections)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def run(name: str, tmp_path: Path, check_mode: bool = False, diff: bool = False, **args) -> dict:
    """Module ``name``'s JSON answer for ``args``."""
    params = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)
    (tmp_path / "args.json").write_text(json.dumps({"ANSIBLE_MODULE_ARGS": params}))
    proc = subprocess.run([sys.executable, str(REPO / "plugins/modules" / f"{name}.py"), str(tmp_path / "args.json")],
                          capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO / ".collections")))
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)
