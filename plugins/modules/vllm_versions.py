#!/usr/bin/python
"""Remove the vLLM versions a host no longer keeps for rollback; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_versions
short_description: Remove the vLLM version directories a host no longer keeps for rollback
description:
  - Each version lives in its own directory under O(versions_dir). Of the versions the host ran
    healthy (the history of its last-known-good in O(store)), keeps the O(keep) it ran most
    recently and every directory of O(protect), and removes the others that hold O(marker)
    (written by the role when it installed that version). A version installed and not run yet is
    left alone; a directory without the mark is never removed.
  - Logic and tests in module_utils/vllm_last_good_lib.py (prune_plan).
options:
  versions_dir:
    description: The directory of the version directories.
    type: path
    required: true
  keep:
    description: How many of the most recently run versions to keep; 0 removes none.
    type: int
    default: 2
  marker:
    description: The file that marks a version directory as installed by the role.
    type: str
    default: .vllm-ops-version
  store:
    description: The last-known-good store whose history says which versions ran when.
    type: path
    required: true
  protect:
    description: Directories never removed (the version about to run or running).
    type: list
    elements: path
    default: []
author: vllm-ops maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Remove the vLLM versions the host no longer keeps
  vllm_versions:
    versions_dir: /opt/vllm
    keep: 2
    store: /var/lib/vllm-ops/last-good/vllm-kimi-k25-int4
    protect: [/opt/vllm/0.33.0]
"""

RETURN = r"""
removed:
  description: The version directories removed (or that would be, in check mode).
  type: list
  returned: always
kept:
  description: The version directories kept as the most recently run.
  type: list
  returned: always
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_ops.serving.plugins.module_utils.vllm_last_good_lib import (
    MARKER,
    LastGoodError,
    kept_versions,
    load,
    prune_plan,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            versions_dir=dict(type="path", required=True),
            keep=dict(type="int", default=2),
            marker=dict(type="str", default=MARKER),
            store=dict(type="path", required=True),
            protect=dict(type="list", elements="path", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        history = (load(p["store"]) or {}).get("history") or []
    except LastGoodError as exc:
        module.fail_json(msg=str(exc))
    root = p["versions_dir"]
    names = sorted(os.listdir(root)) if os.path.isdir(root) else []
    candidates = [os.path.join(root, n) for n in names
                  if os.path.isdir(os.path.join(root, n)) and os.path.isfile(os.path.join(root, n, p["marker"]))]
    removed = prune_plan(candidates, history, p["keep"], [os.path.normpath(x) for x in p["protect"]])
    if not module.check_mode:
        for path in removed:
            shutil.rmtree(path)
    module.exit_json(changed=bool(removed), removed=removed, kept=kept_versions(history, p["keep"]))


if __name__ == "__main__":
    main()
