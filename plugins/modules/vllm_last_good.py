#!/usr/bin/python
"""Keep, inspect or put back the host's last-known-good of the vLLM service; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_last_good
short_description: The host's last-known-good of the vLLM service, saved after a healthy start
description:
  - O(state=saved) keeps what O(files) and every file of O(dirs) hold now (content, mode, owner, or
    their absence) and O(record) (the vLLM version and executable) in O(store); unchanged when the
    store already holds exactly that. A save killed half-way leaves the previous last-known-good whole.
  - O(state=restored) puts the saved files back (rewrites those that differ, removes those the
    last-known-good did not have); fails, saying so, when the store holds none.
  - O(state=inspect) changes nothing and says whether a last-known-good exists and how the paths
    differ from it now.
  - Logic and tests in module_utils/vllm_last_good_lib.py; the store's layout is described there.
options:
  store:
    description: The store's directory on the host (root-only).
    type: path
    required: true
  state:
    description: What to do.
    type: str
    choices: [saved, restored, inspect]
    default: inspect
  files:
    description: The managed files, each saved present or absent.
    type: list
    elements: path
    default: []
  dirs:
    description: Directories whose every regular file is managed (the unit's drop-in directory).
    type: list
    elements: path
    default: []
  record:
    description: What the saved configuration runs - version, served_version, executable, venv_dir, unit.
    type: dict
    default: {}
author: vllm-ops maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Keep this configuration as the host's last-known-good
  vllm_last_good:
    store: /var/lib/vllm-ops/last-good/vllm-kimi-k25-int4
    state: saved
    files: [/etc/systemd/system/vllm-kimi-k25-int4.service, /etc/vllm/vllm-kimi-k25-int4.env]
    dirs: [/etc/systemd/system/vllm-kimi-k25-int4.service.d]
    record: {version: 0.32.0, executable: /opt/vllm/0.32.0/bin/vllm}
"""

RETURN = r"""
exists:
  description: Whether the store holds a last-known-good (after the call).
  type: bool
  returned: always
record:
  description: The last-known-good's record (version, served_version, executable, venv_dir, unit); empty without one.
  type: dict
  returned: always
saved_at:
  description: When the last-known-good's content last changed (ISO 8601 UTC), or null.
  type: str
  returned: always
matches:
  description: Whether the managed paths hold exactly the last-known-good now (before a restore).
  type: bool
  returned: always
differs:
  description: The managed paths that differ from the last-known-good (before a restore), sorted.
  type: list
  returned: always
history:
  description: The versions the host ran healthy, oldest first (version, executable, venv_dir, first and last saved).
  type: list
  returned: always
description:
  description: The last-known-good in one line (version, executable, since when), or null.
  type: str
  returned: always
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_ops.serving.plugins.module_utils.vllm_last_good_lib import (
    LastGoodError,
    describe,
    differences,
    load,
    restore,
    save,
    snapshot,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            store=dict(type="path", required=True),
            state=dict(type="str", choices=["saved", "restored", "inspect"], default="inspect"),
            files=dict(type="list", elements="path", default=[]),
            dirs=dict(type="list", elements="path", default=[]),
            record=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        manifest = load(p["store"])
        dirs = p["dirs"] or (manifest or {}).get("dirs") or []
        differs = differences(manifest, snapshot(p["files"], dirs)) if manifest else []
        changed = False
        if p["state"] == "saved":
            now_iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            changed, manifest = save(p["store"], p["files"], p["dirs"], p["record"], now_iso, module.check_mode)
        elif p["state"] == "restored":
            if manifest is None:
                module.fail_json(msg="no last-known-good in %s: nothing to put back (the host never came up healthy "
                                     "with this release's vllm role); deploy with deploy.yml" % p["store"])
            changed = bool(restore(p["store"], manifest, module.check_mode))
    except (LastGoodError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(
        changed=changed, exists=manifest is not None, record=(manifest or {}).get("record") or {},
        saved_at=(manifest or {}).get("saved_at"), matches=manifest is not None and not differs, differs=differs,
        history=(manifest or {}).get("history") or [], description=describe(manifest) if manifest else None,
    )


if __name__ == "__main__":
    main()
