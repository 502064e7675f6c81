#!/usr/bin/python
"""Poll a vLLM unit's /health for one window; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_wait_healthy
short_description: Wait for a vLLM systemd unit to answer /health, failing fast on a crash
description:
  - Polls the unit's state (C(systemctl show)) and its C(/health) URL for up to O(window_s) seconds.
  - Returns as soon as C(/health) answers 200 while the unit is active.
  - Fails at once, with the last journal lines, when the unit failed, stopped, is waiting to be
    restarted or was restarted since O(invocation_id), or when C(/health) answers 503 (vLLM's
    engine died; the server then exits 0).
  - Otherwise returns C(healthy=false) with the weight-loading progress read from the journal.
  - The role's action plugin of the same name calls this module window after window, printing
    progress between windows, until O(timeout_s) runs out.
options:
  unit:
    description: The systemd unit, e.g. C(vllm-kimi-k25-int4.service).
    type: str
    required: true
  url:
    description: The health URL as seen from the host.
    type: str
    required: true
  window_s:
    description: Seconds this call may poll (the action plugin passes the progress interval).
    type: float
    default: 60
  poll_interval_s:
    description: Seconds between polls.
    type: float
    default: 5
  invocation_id:
    description: The unit's InvocationID when the wait began; a different one means it restarted.
      Empty takes the current one.
    type: str
    default: ""
  request_timeout_s:
    description: Seconds one HTTP request may take.
    type: float
    default: 5
  timeout_s:
    description: Total seconds to wait (action plugin only).
    type: int
  progress_interval_s:
    description: Seconds between progress lines (action plugin only).
    type: int
author: vllm-ops
"""

EXAMPLES = r"""
- name: Wait for /health and an active unit
  vllm_wait_healthy:
    unit: vllm-kimi-k25-int4.service
    url: http://127.0.0.1:8000/health
    timeout_s: 2400
"""

RETURN = r"""
healthy:
  description: Whether /health answered 200 while the unit was active.
  type: bool
  returned: always
status:
  description: The last HTTP status of /health, -1 when the connection was refused.
  type: int
  returned: always
invocation_id:
  description: The InvocationID the wait is tied to.
  type: str
  returned: always
shards_loaded:
  description: Safetensors shards loaded so far (from the journal), or null.
  type: int
  returned: always
shards_total:
  description: Shards in the checkpoint, or null before the first progress line.
  type: int
  returned: always
progress:
  description: One line for an operator, e.g. C(24/64 shards loaded (38%)).
  type: str
  returned: always
journal_tail:
  description: The unit's last journal lines (on failure).
  type: list
  elements: str
  returned: on failure
"""

import re
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule

SHARD_LINE = re.compile(r"Loading safetensors checkpoint shards:\s+(\d+)% Completed \|\s*(\d+)/(\d+)")
PROPERTIES = ("ActiveState", "SubState", "Result", "NRestarts", "InvocationID", "MainPID", "ExecMainStatus")


def parse_properties(text):
    """Parse `systemctl show -p A -p B` output into a dict."""
    props = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key] = value
    return props


def unit_problem(props, invocation_id):
    """Why the wait must stop now, or None while the unit may still come up."""
    active = props.get("ActiveState", "")
    sub = props.get("SubState", "")
    if invocation_id and props.get("InvocationID") and props.get("InvocationID") != invocation_id:
        return "was restarted during the wait (NRestarts=%s): the server exited and systemd started it again" % (
            props.get("NRestarts", "?"))
    if active == "failed":
        return "failed (Result=%s, exit status %s)" % (props.get("Result", "?"), props.get("ExecMainStatus", "?"))
    if active == "activating" and sub == "auto-restart":
        return "exited (status %s) and is waiting to be restarted" % props.get("ExecMainStatus", "?")
    if active in ("inactive", "deactivating"):
        return "is %s (%s): nothing is starting it" % (active, sub)
    return None


def shard_progress(lines):
    """Summarize the load from journal lines (oldest first)."""
    loaded = total = None
    phase = None
    for line in lines:
        for part in line.split("\r"):
            match = SHARD_LINE.search(part)
            if match:
                loaded, total = int(match.group(2)), int(match.group(3))
                phase = None
        if "Application startup complete." in line:
            phase = "application startup complete"
        elif "Model loading took" in line or "init engine" in line:
            phase = "weights loaded; initialising the engine (KV cache, warm-up)"
    if phase:
        text = phase if loaded is None else "%d/%d shards loaded; %s" % (loaded, total, phase)
    elif loaded is None:
        text = "no shard progress logged yet"
    else:
        text = "%d/%d shards loaded (%d%%)" % (loaded, total, 100 * loaded // max(total, 1))
    return loaded, total, text


def probe(url, timeout):
    """HTTP status of GET url; -1 when nothing answers (refused, reset, timeout)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # a loopback URL from the role
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return -1


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", required=True),
            url=dict(type="str", required=True),
            window_s=dict(type="float", default=60),
            poll_interval_s=dict(type="float", default=5),
            invocation_id=dict(type="str", default=""),
            request_timeout_s=dict(type="float", default=5),
            timeout_s=dict(type="int"),
            progress_interval_s=dict(type="int"),
        ),
        supports_check_mode=True,
    )
    unit = module.params["unit"]
    systemctl = module.get_bin_path("systemctl", required=True)
    journalctl = module.get_bin_path("journalctl", required=True)

    def state():
        cmd = [systemctl, "show", unit] + ["--property=%s" % p for p in PROPERTIES]
        rc, out, err = module.run_command(cmd)
        if rc != 0:
            module.fail_json(msg="systemctl show %s failed: %s" % (unit, err.strip()))
        return parse_properties(out)

    def journal(lines, invocation=None):
        cmd = [journalctl, "--no-pager", "-o", "cat", "-n", str(lines), "-u", unit]
        if invocation:
            cmd.append("_SYSTEMD_INVOCATION_ID=%s" % invocation)
        rc, out, _ = module.run_command(cmd)
        return out.splitlines() if rc == 0 else []

    started = time.monotonic()
    props = state()
    invocation = module.params["invocation_id"] or props.get("InvocationID", "")
    status = -1
    while True:
        props = state()
        problem = unit_problem(props, invocation)
        if problem is None:
            status = probe(module.params["url"], module.params["request_timeout_s"])
            if status == 200 and props.get("ActiveState") == "active":
                break
            if status == 503:
                problem = "answered 503 on /health: its engine died (vLLM then exits with status 0)"
        if problem:
            tail = journal(40)
            module.fail_json(
                msg="%s %s. Last journal lines:\n%s" % (unit, problem, "\n".join(tail[-20:])),
                healthy=False, status=status, invocation_id=invocation, unit_state=props, journal_tail=tail,
            )
        if time.monotonic() - started + module.params["poll_interval_s"] > module.params["window_s"]:
            break
        time.sleep(module.params["poll_interval_s"])

    loaded, total, progress = shard_progress(journal(400, invocation))
    module.exit_json(
        changed=False,
        healthy=status == 200,
        status=status,
        invocation_id=invocation,
        unit_state=props,
        shards_loaded=loaded,
        shards_total=total,
        progress=progress,
        window_elapsed_s=round(time.monotonic() - started, 1),
    )


if __name__ == "__main__":
    main()
