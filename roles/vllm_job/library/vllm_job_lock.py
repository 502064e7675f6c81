#!/usr/bin/python
"""Take or give back the host's campaign lock; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_campaign_lock
short_description: A lock file on the host so two profiling campaigns never overlap
description:
  - O(state=acquired) creates the lock file atomically with the owner's details. If another
    campaign holds it, fails at once naming that campaign, its controller and its start time.
  - A lock is stale, and is replaced (the result says so), when it expired (O(ttl_s) after its
    start), when the host rebooted since it was taken, or when the caller saw its owner die
    (O(dead_owner_pid) equals the lock's recorded controller PID).
  - O(state=released) removes the lock if this campaign holds it, and leaves another's alone.
options:
  path:
    description: The lock file.
    type: path
    required: true
  state:
    description: Whether this campaign should hold the lock.
    type: str
    choices: [acquired, released]
    default: acquired
  campaign_id:
    description: This campaign's identifier.
    type: str
    required: true
  owner:
    description: Who takes the lock (controller host, controller PID, user); stored in the file.
    type: dict
    default: {}
  ttl_s:
    description: Seconds after which a lock is considered abandoned.
    type: int
    default: 14400
  dead_owner_pid:
    description: A controller PID the caller knows to be dead; a lock recording it is stale.
    type: int
author: vllm-ops
"""

RETURN = r"""
lock:
  description: The lock's content after the call.
  type: dict
  returned: always
replaced:
  description: The stale lock that was replaced, if any, and why.
  type: dict
  returned: when a stale lock was replaced
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule


def boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def read_lock(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"unreadable": True}


def stale_reason(lock, now, current_boot, dead_owner_pid):
    """Why an existing lock may be replaced, or None while it is live."""
    if lock.get("unreadable"):
        return "the lock file is not valid JSON"
    if lock.get("boot_id") and current_boot and lock["boot_id"] != current_boot:
        return "the host rebooted since it was taken"
    if float(lock.get("expires_epoch", 0)) <= now:
        return "it expired at %s" % lock.get("expires_at", "?")
    owner_pid = (lock.get("owner") or {}).get("controller_pid")
    if dead_owner_pid is not None and owner_pid == dead_owner_pid:
        return "its controller process %s is gone" % owner_pid
    return None


def write_new(path, content):
    """Create the lock atomically; False if someone else created it first."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as handle:
        json.dump(content, handle, sort_keys=True)
    return True


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["acquired", "released"], default="acquired"),
            campaign_id=dict(type="str", required=True),
            owner=dict(type="dict", default={}),
            ttl_s=dict(type="int", default=14400),
            dead_owner_pid=dict(type="int"),
        ),
        supports_check_mode=True,
    )
    path, campaign = module.params["path"], module.params["campaign_id"]
    current = read_lock(path)

    if module.params["state"] == "released":
        if current is None or current.get("campaign_id") != campaign:
            module.exit_json(changed=False, lock=current or {})
        if not module.check_mode:
            os.unlink(path)
        module.exit_json(changed=True, lock={})

    now = time.time()
    if current is not None and current.get("campaign_id") == campaign:
        module.exit_json(changed=False, lock=current)
    replaced = None
    if current is not None:
        reason = stale_reason(current, now, boot_id(), module.params["dead_owner_pid"])
        if reason is None:
            owner = current.get("owner") or {}
            module.fail_json(
                msg="Another profiling campaign holds %s: campaign %s, started %s from %s (PID %s, user %s); "
                    "it expires at %s. Wait for it, or remove the lock if you know that run is dead."
                    % (path, current.get("campaign_id"), current.get("started_at"), owner.get("controller", "?"),
                       owner.get("controller_pid", "?"), owner.get("user", "?"), current.get("expires_at")),
                lock=current)
        replaced = {"lock": current, "reason": reason}
    content = {
        "campaign_id": campaign,
        "owner": module.params["owner"],
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "expires_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + module.params["ttl_s"])),
        "expires_epoch": now + module.params["ttl_s"],
        "boot_id": boot_id(),
    }
    if module.check_mode:
        module.exit_json(changed=True, lock=content, replaced=replaced)
    os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
    if replaced is not None:
        os.unlink(path)
    if not write_new(path, content):
        module.fail_json(msg="Another profiling campaign took %s at the same moment: %s" % (path, read_lock(path)))
    result = dict(changed=True, lock=content)
    if replaced is not None:
        result["replaced"] = replaced
        module.warn("Replaced a stale campaign lock (%s): campaign %s, started %s."
                    % (replaced["reason"], replaced["lock"].get("campaign_id"), replaced["lock"].get("started_at")))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
