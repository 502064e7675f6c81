#!/usr/bin/python
"""Free space under the directory a job will write; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_job_free_space
short_description: Whether the file system a directory is (or will be) on has the room a job needs
description:
  - Measures the file system of O(path), or of its nearest existing parent when O(path) does not
    exist yet (a directory the job will create), so that a directory on a volume of its own is
    measured on that volume. Changes nothing; runs the same in check mode; never fails for lack of
    room, it says so (RV(short), RV(message)) and the caller refuses.
options:
  path:
    description: The directory the job will write.
    type: path
    required: true
  need_mib:
    description: The free MiB the job needs there.
    type: int
    default: 0
  what:
    description: What goes there, in words ("the traces").
    type: str
    default: what the job writes
  how:
    description: How O(need_mib) was reckoned, in words; said in the message.
    type: str
    default: ""
  where:
    description: The machine, in words ("the controller", the host's name); said in the message.
    type: str
    default: this host
  fix:
    description: What else the reader may do besides freeing room; said in the message.
    type: str
    default: ""
author: vllm-ops maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Refuse a job whose traces would not fit on the host
  vllm_ops.serving.vllm_job_free_space:
    path: /var/tmp/vllm-profiles
    need_mib: 2048
    what: the profiling traces
    where: "{{ inventory_hostname }}"
    fix: free space there or set vllm_profiling_trace_dir
  register: space
  failed_when: space.short
"""

RETURN = r"""
path:
  description: The directory asked about.
  type: str
  returned: always
measured:
  description: The directory measured, O(path) or its nearest existing parent.
  type: str
  returned: always
free_mib:
  description: MiB free there for an unprivileged writer (statvfs f_bavail).
  type: int
  returned: always
short:
  description: Whether fewer than O(need_mib) MiB are free.
  type: bool
  returned: always
message:
  description: When short, one sentence naming what needs the room, the directory measured, its free space and the need.
  type: str
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule


def nearest_existing(path):
    """``path`` if it exists, else its nearest existing parent."""
    path = os.path.abspath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def free_mib(path):
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize // (1 << 20)


def shortfall(path, measured, free, need_mib, what, how, where, fix):
    """The refusal, or "" when ``free`` MiB are enough."""
    if free >= need_mib:
        return ""
    return ("Not enough free space for %s: %s; %d MiB are free under %s on %s%s. Free room there%s."
            % (what, how or ("%d MiB are needed" % need_mib), free, measured, where,
               "" if measured == path else " (%s does not exist yet: its nearest existing parent was measured)" % path,
               (", or " + fix) if fix else ""))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            need_mib=dict(type="int", default=0),
            what=dict(type="str", default="what the job writes"),
            how=dict(type="str", default=""),
            where=dict(type="str", default="this host"),
            fix=dict(type="str", default=""),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = os.path.abspath(p["path"])
    measured = nearest_existing(path)
    try:
        free = free_mib(measured)
    except OSError as exc:
        module.fail_json(msg="cannot measure the free space under %s (for %s): %s" % (measured, path, exc))
    message = shortfall(path, measured, free, p["need_mib"], p["what"], p["how"], p["where"], p["fix"])
    module.exit_json(changed=False, path=path, measured=measured, free_mib=free, short=bool(message), message=message)


if __name__ == "__main__":
    main()
