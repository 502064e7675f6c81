#!/usr/bin/python
"""Read back what a started vLLM server runs and compare it with what was asked; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_readback
short_description: Read back a started vLLM server's arguments, environment and release
description:
  - Reads the unit's main process (C(systemctl show -p MainPID)) - its command line
    (C(/proc/PID/cmdline)), the environment systemd gave it (C(/proc/PID/environ)) and its release
    (the vLLM distribution of the executable it runs, else the server's own C(/version)) - and
    compares each with what was asked.
  - A difference fails the task naming it and, where the unit's files say, the file that made it (a
    drop-in whose C(Environment=) or C(EnvironmentFile=) sets the variable, or whose C(ExecStart=)
    replaces the command), marked as someone else's when it is not in O(own_files).
  - Reads only; never changes anything; runs in check mode too (then with nothing started it
    reports the unit as not running and fails nothing).
  - Logic and tests in module_utils/vllm_readback_lib.py.
options:
  unit:
    description: The systemd unit.
    type: str
    required: true
  argv:
    description: The command asked (the executable first); empty compares only O(executable).
    type: list
    elements: str
    default: []
  environment:
    description: The variables asked, name to value; a null value asks the variable to be unset.
    type: dict
    default: {}
  unset:
    description: Names asked to be unset (a variant's UnsetEnvironment=).
    type: list
    elements: str
    default: []
  version:
    description: The vLLM release asked; empty compares none (a host that does not install vLLM).
    type: str
    default: ""
  executable:
    description: The vLLM executable asked, to find the process's program when an interpreter runs it.
    type: str
    default: ""
  url:
    description: The server's C(/version) URL, read when no distribution provides vLLM; empty reads none.
    type: str
    default: ""
  own_files:
    description: The role's own unit files and environment files; any other is named as someone else's.
    type: list
    elements: path
    default: []
author: vllm-ops maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read back what the started server runs
  vllm_readback:
    unit: vllm-kimi-k25-int4.service
    argv: [/opt/vllm/0.32.0/bin/vllm, serve, /srv/models/kimi-k25-int4, --port, "8000"]
    environment: {NCCL_PROTO: LL128}
    version: 0.32.0
    url: http://127.0.0.1:8000/version
    own_files: [/etc/systemd/system/vllm-kimi-k25-int4.service, /etc/vllm/vllm-kimi-k25-int4.env]
"""

RETURN = r"""
readback:
  description: >-
    What runs: pid, argv (from the executable on), executable (its real path), release ({name,
    version, path} of its distribution, or null), served_version (C(/version), or null),
    environment (the asked names as the process has them, null where unset), matches (bool),
    differences (each {what, name, asked, runs, source} - what is arguments, environment or
    release) and words (one line).
  type: dict
  returned: always
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_ops.serving.plugins.module_utils.loopback import open_loopback
from ansible_collections.vllm_ops.serving.plugins.module_utils.vllm_readback_lib import (
    attribute,
    compare_argv,
    compare_environment,
    compare_executable,
    compare_release,
    describe,
    distribution_of,
    environ_dict,
    main_pid,
    message,
    read_proc,
    running_script,
    unit_files_of,
    unit_settings,
)
from ansible_collections.vllm_ops.serving.plugins.module_utils.vllm_serve_help_lib import release_python, site_packages


def served_version(url):
    if not url:
        return None
    try:
        with open_loopback(url, timeout=10) as answer:
            return json.loads(answer.read().decode("utf-8", "replace")).get("version")
    except (OSError, ValueError, AttributeError):
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", required=True),
            argv=dict(type="list", elements="str", default=[]),
            environment=dict(type="dict", default={}),
            unset=dict(type="list", elements="str", default=[]),
            version=dict(type="str", default=""),
            executable=dict(type="str", default=""),
            url=dict(type="str", default=""),
            own_files=dict(type="list", elements="path", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    pid = main_pid(module.run_command, p["unit"])
    if pid is None:
        readback = dict(pid=None, matches=None, differences=[], words="%s is not running" % p["unit"])
        if module.check_mode:
            module.exit_json(changed=False, readback=readback)
        module.fail_json(msg="%s has no main process to read back: it stopped after it got healthy" % p["unit"],
                         readback=readback)
    try:
        cmdline = read_proc(pid, "cmdline")
        running_env = environ_dict(read_proc(pid, "environ"))
    except OSError as exc:
        module.fail_json(msg="cannot read main PID %s of %s: %s" % (pid, p["unit"], exc), readback=dict(pid=pid))
    executable = p["executable"] or (p["argv"][0] if p["argv"] else "")
    script = running_script(cmdline, executable)
    real = os.path.realpath(script) if script else ""
    distribution = distribution_of(site_packages(release_python(real))) if real else None
    served = served_version(p["url"])
    differences = ((compare_argv(p["argv"], cmdline) if p["argv"] else compare_executable(executable, cmdline))
                   + compare_environment(p["environment"], p["unset"], running_env)
                   + compare_release(p["version"], distribution, served))
    attribute(differences, unit_settings(unit_files_of(module.run_command, p["unit"])), p["own_files"])
    start = cmdline.index(executable) if executable in cmdline else 0
    names = sorted(set(p["environment"]) | set(p["unset"]))
    release = (distribution or {}).get("version") or served
    readback = dict(
        pid=pid, argv=cmdline[start:], executable=real, release=distribution, served_version=served,
        environment={name: running_env.get(name) for name in names}, matches=not differences,
        differences=differences,
        words="; ".join(describe(d) for d in differences) if differences else
        "runs what was asked: vLLM %s (%s), %d arguments, %d variables checked" % (
            release or "of unknown release", real or script, len(cmdline) - start, len(names)))
    if differences:
        module.fail_json(msg=message(p["unit"], pid, differences), readback=readback)
    module.exit_json(changed=False, readback=readback)


if __name__ == "__main__":
    main()
