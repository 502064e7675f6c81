#!/usr/bin/python
"""Mark a vLLM version directory as installed by the role; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_version_marker
short_description: Mark a vLLM version directory as one the role installed, and may remove
description:
  - Writes O(marker) in O(path), saying which version the directory holds and what installed it.
    M(vllm_ops.serving.vllm_versions) removes old version directories that hold the mark and never
    one without it.
  - Writes only when the text changed, atomically; the file's owner and mode are the task's.
    Supports check and diff mode; fails when O(path) is not a directory (outside check mode, where a
    version not installed yet has none).
  - Logic in module_utils/vllm_last_good_lib.py (marker_text).
options:
  path:
    description: The version directory (a virtual environment).
    type: path
    required: true
  version:
    description: The vLLM version it holds.
    type: str
    required: true
  installed_by:
    description: What installed it, in words.
    type: str
    default: vllm-ops vllm role
  marker:
    description: The mark's file name in O(path).
    type: str
    default: .vllm-ops-version
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.files
attributes:
  check_mode: {support: full}
  diff_mode: {support: full}
  platform: {platforms: posix}
author: vllm-ops maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Mark the version directory as installed by the role
  vllm_ops.serving.vllm_version_marker:
    path: /opt/vllm/0.33.0
    version: 0.33.0
    owner: root
    group: root
    mode: "0644"
"""

RETURN = r"""
marker:
  description: The mark's path.
  type: str
  returned: success
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_ops.serving.plugins.module_utils import file_content
from ansible_collections.vllm_ops.serving.plugins.module_utils.vllm_last_good_lib import MARKER, marker_text


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            version=dict(type="str", required=True),
            installed_by=dict(type="str", default="vllm-ops vllm role"),
            marker=dict(type="str", default=MARKER),
        ),
        add_file_common_args=True,
        supports_check_mode=True,
    )
    p = module.params
    marker = os.path.join(p["path"], p["marker"])
    if not os.path.isdir(p["path"]):
        if module.check_mode:
            module.exit_json(changed=True, marker=marker)
        module.fail_json(msg=f"{p['path']} is not a directory: install vLLM {p['version']} there first.")
    changed, diff = file_content.ensure(module, marker, marker_text(p["version"], p["installed_by"]))
    module.exit_json(changed=changed, diff=diff, marker=marker)


if __name__ == "__main__":
    main()
