#!/usr/bin/python
"""Write the watch's configuration (watch.json) from its settings; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_watch_config
short_description: Write the configuration of the vLLM service's watch, checked
description:
  - Writes O(path), the configuration C(vllm_ops_watch.py --config) reads, from O(settings). The
    settings' names, types and defaults are the fields of C(WatchConfig) in
    module_utils/watch_config.py, which the watch itself reads the file with; a setting not given
    takes its default there.
  - Fails, writing nothing, on a setting the watch does not know or a value of the wrong type, and
    names each.
  - Writes only when the text changed (RV(config) is what the watch will read), atomically; the
    file's owner and mode are the task's. Supports check and diff mode.
options:
  path:
    description: The configuration file.
    type: path
    required: true
  settings:
    description:
      - The watch's settings by name, the fields of C(WatchConfig) (C(unit), C(url), C(interval_s),
        C(stall_s) and the rest). A whole number is taken where a number is asked for; nothing else is
        converted.
    type: dict
    required: true
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
- name: Write the watch's configuration
  vllm_ops.serving.vllm_watch_config:
    path: /usr/local/lib/vllm-ops/watch/watch.json
    settings:
      unit: vllm-kimi-k25-int4.service
      url: http://127.0.0.1:8000
      stall_s: 0
    owner: root
    group: root
    mode: "0644"
"""

RETURN = r"""
config:
  description: Every setting the watch will read, the defaults included.
  type: dict
  returned: success
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_ops.serving.plugins.module_utils import file_content
from ansible_collections.vllm_ops.serving.plugins.module_utils.watch_config import WatchConfigError, check, dumps


def main():
    module = AnsibleModule(
        argument_spec=dict(path=dict(type="path", required=True), settings=dict(type="dict", required=True)),
        add_file_common_args=True,
        supports_check_mode=True,
    )
    try:
        config = check(module.params["settings"])
    except WatchConfigError as exc:
        module.fail_json(msg=f"The watch's settings: {exc}.")
    text = dumps(config)
    changed, diff = file_content.ensure(module, module.params["path"], text)
    module.exit_json(changed=changed, diff=diff, config=module.from_json(text))


if __name__ == "__main__":
    main()
