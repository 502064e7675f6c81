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
  - With O(record_load), the load's record once it ended (healthy, or failed) - its phases read from vLLM's own
    lines in the unit's journal (the collection's C(plugins/module_utils/loads.py), which defines
    every figure and which the controller's reports read with too), timed from the unit's start.
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
  record_load:
    description: Return the load's record (RV(load)) when the wait ends; the role asks for it after a start.
    type: bool
    default: false
  last_window:
    description: This window is the wait's last (the action plugin says so); with O(record_load) the load is
      recorded at its end even when the server is not healthy yet (the wait then fails on its timeout).
    type: bool
    default: false
  model_path:
    description: The model directory; its weight files' sizes are the load's bytes. Empty - vLLM's own figure.
    type: str
    default: ""
author: vllm-ops maintainers (!UNKNOWN)
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
load:
  description:
    - The load's record (with O(record_load), once the wait ended, on failure too) - C(ready), C(total_s) (the
      unit's start to C(Application startup complete.)), C(failed_in), C(phases) (each C({name, seconds,
      stated_s, status, includes, why}), in load order - start, weights, post_load, compile, kv_cache,
      cuda_graphs, engine_init, api_start), C(weights) (C(bytes), C(seconds), C(gbps), C(shards), C(loader)),
      C(compile) (C(cache) hit, miss or disabled), C(kv_cache), C(cuda_graphs), C(stated) (the durations vLLM
      states), C(vllm_version), C(load_format), and C(unit), C(invocation_id), C(started_at), C(healthy_s) (the
      start to the first 200 this wait saw). A phase vLLM logged no line for is not measured, never estimated.
  type: dict
  returned: when O(record_load)
load_words:
  description: The load in one line, e.g. C(ready in 31.6 min - start 40.0 s, weights 29.0 min (540.0 GB at 0.31 GB/s)).
  type: str
  returned: when O(record_load)
journal_tail:
  description: The unit's last journal lines (on failure).
  type: list
  elements: str
  returned: on failure
"""

import time
import urllib.error

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_ops.serving.plugins.module_utils.loads import (
    journal_entries,
    load_record,
    load_words,
    progress,
)
from ansible_collections.vllm_ops.serving.plugins.module_utils.loopback import open_loopback

PROPERTIES = ("ActiveState", "SubState", "Result", "NRestarts", "InvocationID", "MainPID", "ExecMainStatus",
              "ExecMainStartTimestampMonotonic")
# The journal of one start, read whole for its load record: a load logs a few hundred lines.
LOAD_JOURNAL_LINES = 20000


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
    """Summarize the load from journal lines (oldest first): ``(loaded, total, text)``."""
    return progress(lines)


def probe(url, timeout):
    """HTTP status of GET url; -1 when nothing answers (refused, reset, timeout)."""
    try:
        with open_loopback(url, timeout=timeout) as response:  # a loopback URL from the role
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
            record_load=dict(type="bool", default=False),
            last_window=dict(type="bool", default=False),
            model_path=dict(type="str", default=""),
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

    def journal(lines, invocation=None, output="cat"):
        cmd = [journalctl, "--no-pager", "-o", output, "-n", str(lines), "-u", unit]
        if invocation:
            cmd.append("_SYSTEMD_INVOCATION_ID=%s" % invocation)
        rc, out, _ = module.run_command(cmd)
        if output == "json":
            return journal_entries(out) if rc == 0 else []
        return out.splitlines() if rc == 0 else []

    def recorded(props, healthy_at=None):
        """The load's record and its words, when asked for."""
        if not module.params["record_load"]:
            return {}
        entries = journal(LOAD_JOURNAL_LINES, invocation, output="json")
        record = load_record(entries, props, module.params["model_path"], unit, invocation, healthy_at)
        return {"load": record, "load_words": load_words(record)}

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
                **recorded(props)
            )
        if time.monotonic() - started + module.params["poll_interval_s"] > module.params["window_s"]:
            break
        time.sleep(module.params["poll_interval_s"])

    healthy_at = time.monotonic() if status == 200 else None
    loaded, total, words = shard_progress(journal(400, invocation))
    module.exit_json(
        changed=False,
        healthy=status == 200,
        status=status,
        invocation_id=invocation,
        unit_state=props,
        shards_loaded=loaded,
        shards_total=total,
        progress=words,
        window_elapsed_s=round(time.monotonic() - started, 1),
        **(recorded(props, healthy_at) if status == 200 or module.params["last_window"] else {})
    )


if __name__ == "__main__":
    main()
