#!/usr/bin/python
"""The checkpoint's disk floor, its page-cache residency, and the page cache warmed; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_disk
short_description: Measure how fast the host reads a model checkpoint, and warm the page cache with it
description:
  - Works on the checkpoint's weight files in O(path) (C(*.safetensors), else C(*.bin), else C(*.pt)); every figure
    is defined in C(module_utils/vllm_disk_lib.py).
  - C(state=measure) reads nothing but a bounded sample - at most O(sample_mib) in O(chunk_mib) ranges spread over
    the files, with C(O_DIRECT) (the disk itself, not the page cache), paced to O(max_rate_mib_s) on average,
    niced, for at most O(max_seconds) - and maps the files to ask C(mincore(2)) how much of them is in the page
    cache. Safe while the service serves; never changes anything, also in check mode.
  - C(state=check) says whether the checkpoint's bytes not yet in the page cache fit in the host's MemAvailable
    less O(reserve_mib), and fails with both figures when they do not. Reads nothing.
  - C(state=warm) does that check, then reads every file whole (paced to O(max_rate_mib_s), niced), so that the
    next start reads the checkpoint from memory. Changed when anything was read; in check mode it only checks.
options:
  path:
    description: The model directory.
    type: path
    required: true
  state:
    description: What to do.
    type: str
    choices: [measure, check, warm]
    default: measure
  sample_mib:
    description: MiB read at most to time the disk.
    type: int
    default: 1024
  chunk_mib:
    description: MiB per read (one range).
    type: int
    default: 16
  max_rate_mib_s:
    description: Average MiB/s the reads may take of the disk (0 - unpaced).
    type: int
    default: 200
  max_seconds:
    description: Seconds the measurement may take at most.
    type: float
    default: 30
  reserve_mib:
    description: MiB of MemAvailable the warm-up leaves to everything else.
    type: int
    default: 8192
author: vllm-ops maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Measure the checkpoint's disk while the service serves
  vllm_disk:
    path: /srv/models/kimi-k25-int4
  register: disk

- name: Warm the page cache before a planned restart
  vllm_disk:
    path: /srv/models/kimi-k25-int4
    state: warm
"""

RETURN = r"""
record:
  description:
    - What a job keeps (job.json's C(disk)) - C(path), C(files), C(checkpoint_bytes), the floor (C(gbps), C(bytes),
      C(seconds) inside the reads, C(wall_s), C(paced_s), C(chunks), C(chunk_bytes), C(holes_skipped), C(method),
      C(max_rate_bytes_s), C(why) when not measured), the residency (C(resident_bytes), C(resident_fraction)),
      C(available_bytes) (MemAvailable), C(priority) and C(measured_at).
  type: dict
  returned: state=measure
plan:
  description: The warm-up's figures - C(checkpoint_bytes), C(resident_bytes), C(needed_bytes), C(available_bytes),
    C(reserve_bytes), C(fits), C(read_s) (the longest the reading takes at its pace; null unpaced), C(message).
  type: dict
  returned: state=check or state=warm
warmed:
  description: What the warm-up read - C(bytes), C(seconds), C(gbps), C(paced_s); then C(resident_fraction).
  type: dict
  returned: state=warm, not in check mode
words:
  description: What was found (and read), in one line.
  type: str
  returned: success
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_ops.serving.plugins.module_utils.loads import disk_words, weight_files
from ansible_collections.vllm_ops.serving.plugins.module_utils.vllm_disk_lib import (
    DiskError,
    low_priority,
    measure_floor,
    meminfo,
    residency,
    warm,
    warm_plan,
)

MIB = 1 << 20


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["measure", "check", "warm"], default="measure"),
            sample_mib=dict(type="int", default=1024),
            chunk_mib=dict(type="int", default=16),
            max_rate_mib_s=dict(type="int", default=200),
            max_seconds=dict(type="float", default=30),
            reserve_mib=dict(type="int", default=8192),
        ),
        supports_check_mode=True,
    )
    p = module.params
    files = weight_files(p["path"])
    if not files:
        module.fail_json(msg="%s holds no weight files (*.safetensors, *.bin, *.pt): nothing to measure or warm; "
                             "check vllm_model_path" % p["path"])
    try:
        if p["state"] == "measure":
            priority = low_priority()
            floor = measure_floor(files, p["sample_mib"] * MIB, p["chunk_mib"] * MIB, p["max_rate_mib_s"] * MIB,
                                  p["max_seconds"])
            res = residency(files)
            record = dict(floor, path=p["path"], files=len(files), checkpoint_bytes=res["bytes"],
                          resident_bytes=res["resident_bytes"], resident_fraction=res["resident_fraction"],
                          available_bytes=meminfo().get("MemAvailable"), priority=priority,
                          measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            module.exit_json(changed=False, record=record, words=disk_words(record))
        plan = warm_plan(files, meminfo(), p["reserve_mib"] * MIB, p["max_rate_mib_s"] * MIB)
        if not plan["fits"]:
            module.fail_json(msg="The page cache cannot hold the checkpoint: %s. Warm it up on a host with more free "
                                 "memory, lower the reserve (vllm_disk_warm_reserve_mib) if the host can spare it, or "
                                 "restart without the warm-up." % plan["message"], plan=plan)
        if p["state"] == "check" or module.check_mode:
            module.exit_json(changed=p["state"] == "warm" and plan["needed_bytes"] > 0, plan=plan,
                             words="%s: it fits" % plan["message"])
        low_priority()
        warmed = warm(files, p["max_rate_mib_s"] * MIB) if plan["needed_bytes"] > 0 else {
            "bytes": 0, "seconds": 0.0, "paced_s": 0.0, "gbps": None}
        warmed["resident_fraction"] = residency(files)["resident_fraction"]
        module.exit_json(changed=warmed["bytes"] > 0, plan=plan, warmed=warmed,
                         words="%s: read %.1f GiB in %.1f s; %.0f%% of the checkpoint now in the page cache" % (
                             plan["message"], warmed["bytes"] / 2**30, warmed["seconds"],
                             100 * (warmed["resident_fraction"] or 0)))
    except DiskError as exc:
        module.fail_json(msg=str(exc))


if __name__ == "__main__":
    main()
