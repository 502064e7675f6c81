#!/usr/bin/python
"""Take or give back the host's job lock; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_job_lock
short_description: The host's lock, so that two jobs that stop the service or need its GPUs never overlap
description:
  - O(state=acquired) creates the lock file atomically with the job's kind, id and owner. If another
    job holds it, fails at once naming that job, its controller and its start time.
  - A lock is stale, and is replaced (the result says so), when it expired (O(ttl_s) after its
    start), when the host rebooted since it was taken, or when the caller saw its owner die
    (O(dead_owner_pid) equals the lock's recorded controller PID).
  - A lock file left under an old name (O(legacy_paths), such as the campaign lock of releases
    before the job lock) counts as the lock by the same rules; a stale one is removed.
  - O(state=released) removes the lock if this job holds it, and leaves another's alone.
  - O(state=inspect) changes nothing and returns the holder's owner (the first lock file found), so
    that the controller can ask whether that owner's process is still alive.
options:
  path:
    description: The lock file.
    type: path
    required: true
  state:
    description: Whether this job should hold the lock.
    type: str
    choices: [acquired, released, inspect]
    default: acquired
  job_id:
    description: This job's identifier.
    type: str
    required: true
  kind:
    description: What the job is (campaign, experiment, all-reduce floor), named to whoever finds the lock held.
    type: str
    default: job
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
  legacy_paths:
    description: Lock files of earlier releases, honoured as the lock until they are stale.
    type: list
    elements: path
    default: []
author: vllm-ops maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Take the host's job lock for a campaign of at most two hours
  vllm_ops.serving.vllm_job_lock:
    path: /var/lib/vllm-ops/job.lock
    job_id: "20261205T101500Z-profile"
    kind: profile
    ttl_s: 7200
    owner:
      controller: "{{ lookup('ansible.builtin.pipe', 'hostname') }}"

- name: Release it at the end of the job
  vllm_ops.serving.vllm_job_lock:
    path: /var/lib/vllm-ops/job.lock
    job_id: "20261205T101500Z-profile"
    state: released
"""

RETURN = r"""
lock:
  description: The lock's content after the call.
  type: dict
  returned: always
replaced:
  description: The stale lock that was replaced, if any, its path and why.
  type: dict
  returned: when a stale lock was replaced
owner:
  description: The owner recorded in the lock found (controller, controller_pid, user); empty when none.
  type: dict
  returned: with O(state=inspect)
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


def holder_id(lock):
    """The job id a lock records; locks of earlier releases say campaign_id."""
    return lock.get("job_id", lock.get("campaign_id"))


def holder_kind(lock):
    return lock.get("kind") or "campaign"


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


def held_message(path, lock):
    owner = lock.get("owner") or {}
    return ("Another job holds %s: %s %s, started %s from %s (PID %s, user %s); it expires at %s. "
            "Wait for it, or remove the lock if you know that run is dead."
            % (path, holder_kind(lock), holder_id(lock), lock.get("started_at"), owner.get("controller", "?"),
               owner.get("controller_pid", "?"), owner.get("user", "?"), lock.get("expires_at")))


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
            state=dict(type="str", choices=["acquired", "released", "inspect"], default="acquired"),
            job_id=dict(type="str", required=True),
            kind=dict(type="str", default="job"),
            owner=dict(type="dict", default={}),
            ttl_s=dict(type="int", default=14400),
            dead_owner_pid=dict(type="int"),
            legacy_paths=dict(type="list", elements="path", default=[]),
        ),
        supports_check_mode=True,
    )
    path, job = module.params["path"], module.params["job_id"]
    current = read_lock(path)
    # The lock as it stands: the current file, else one left under an old name.
    found = [(path, current)] if current is not None else []
    found += [(p, read_lock(p)) for p in module.params["legacy_paths"] if p != path]
    found = [(p, lock) for p, lock in found if lock is not None]

    if module.params["state"] == "inspect":
        lock = found[0][1] if found else {}
        module.exit_json(changed=False, lock=lock, owner=lock.get("owner") or {})

    if module.params["state"] == "released":
        if current is None or holder_id(current) != job:
            module.exit_json(changed=False, lock=current or {})
        if not module.check_mode:
            os.unlink(path)
        module.exit_json(changed=True, lock={})

    now = time.time()
    if current is not None and holder_id(current) == job:
        module.exit_json(changed=False, lock=current)
    replaced = []
    for where, lock in found:
        reason = stale_reason(lock, now, boot_id(), module.params["dead_owner_pid"])
        if reason is None:
            module.fail_json(msg=held_message(where, lock), lock=lock)
        replaced.append({"path": where, "lock": lock, "reason": reason})
    content = {
        "job_id": job,
        "kind": module.params["kind"],
        "owner": module.params["owner"],
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "expires_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + module.params["ttl_s"])),
        "expires_epoch": now + module.params["ttl_s"],
        "boot_id": boot_id(),
    }
    result = dict(changed=True, lock=content)
    if replaced:
        result["replaced"] = replaced[0]
    if module.check_mode:
        module.exit_json(**result)
    os.makedirs(os.path.dirname(path) or ".", mode=0o755, exist_ok=True)
    for stale in replaced:
        os.unlink(stale["path"])
    if not write_new(path, content):
        module.fail_json(msg="Another job took %s at the same moment: %s" % (path, read_lock(path)))
    for stale in replaced:
        held = "" if stale["lock"].get("unreadable") else ": %s %s, started %s" % (
            holder_kind(stale["lock"]), holder_id(stale["lock"]), stale["lock"].get("started_at"))
        module.warn("Replaced a stale job lock (%s)%s%s." % (
            stale["reason"], held, "" if stale["path"] == path else ", left under its old name %s" % stale["path"]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
