#!/usr/bin/python
"""Refuse environment variables that someone else's unit files would override; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_env_overrides
short_description: Find the asked variables that a unit's foreign files would set otherwise
description:
  - Reads the unit's files as systemd applies them (C(systemctl show -p FragmentPath -p DropInPaths),
    and the drop-ins in the unit's directories not loaded yet), with each C(EnvironmentFile=) they
    name, and, for each variable of O(environment) and O(unset), finds what systemd would give the
    server by its rules (an C(EnvironmentFile=) wins over
    C(Environment=), the later over the earlier, an empty assignment clears, C(UnsetEnvironment=) last).
  - Fails, before anything is changed, naming each variable whose setting comes from a file not in
    O(own_files) and differs from what is asked, with the file (a change to it could not take effect).
  - Reads only; runs in check mode too. A unit not installed yet has no foreign files.
  - Logic and tests in module_utils/vllm_readback_lib.py (overrides).
options:
  unit:
    description: The systemd unit.
    type: str
    required: true
  environment:
    description: The variables asked, name to value.
    type: dict
    default: {}
  unset:
    description: Names asked to be unset.
    type: list
    elements: str
    default: []
  own_files:
    description: The role's own unit files and environment files.
    type: list
    elements: path
    default: []
author: vllm-ops maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Refuse variables someone else's drop-in would override
  vllm_env_overrides:
    unit: vllm-kimi-k25-int4.service
    environment: {NCCL_PROTO: LL128}
    own_files: [/etc/systemd/system/vllm-kimi-k25-int4.service, /etc/vllm/vllm-kimi-k25-int4.env]
"""

RETURN = r"""
overrides:
  description: Each overridden variable, {what, name, asked, runs (what the foreign file sets), source}.
  type: list
  returned: always
files:
  description: The unit's files read, in systemd's order.
  type: list
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_ops.serving.plugins.module_utils.vllm_readback_lib import (
    describe,
    overrides,
    unit_files_of,
    unit_settings,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", required=True),
            environment=dict(type="dict", default={}),
            unset=dict(type="list", elements="str", default=[]),
            own_files=dict(type="list", elements="path", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    files = unit_files_of(module.run_command, p["unit"])
    found = overrides(p["environment"], p["unset"], unit_settings(files), p["own_files"])
    if found:
        names = ", ".join(d["name"] for d in found)
        words = "; ".join(describe(d, "the server would get") for d in found)
        module.fail_json(
            msg="%s cannot take effect: someone else's unit file sets it otherwise, and systemd gives the server "
                "that - %s. Nothing was changed. Remove or change that file (systemctl cat %s shows every file of "
                "the unit), or ask for what it sets, then run the play again." % (names, words, p["unit"]),
            overrides=found, files=files)
    module.exit_json(changed=False, overrides=[], files=files)


if __name__ == "__main__":
    main()
