#!/usr/bin/python
"""Ansible module: release the NVIDIA per-GPU device nodes a stopped service left held."""

DOCUMENTATION = r"""
---
module: gpu_release
short_description: Free NVIDIA GPUs held by a service's leftover processes, safely
description:
  - Lists the processes holding each per-GPU device node (C(/dev/nvidiaN)) with C(fuser),
    with PID, user, command and systemd unit read from C(/proc).
  - Holders that belong to the service (matching O(owned_patterns) on their process name or
    command line, or living in one of O(owned_units)) get SIGTERM, then SIGKILL if still there
    after O(term_timeout_s); the module then waits until they are gone. Zombies count as gone.
  - Holders that do not belong to the service are never signalled unless O(force_foreign) is
    true; the module releases what it owns and then fails, naming each such PID, its command,
    its user and the device it holds.
  - Finally it queries C(nvidia-smi), for at most O(settle_timeout_s), until no released PID is
    listed as a compute app and every GPU of the listed devices that no foreign holder occupies
    is at or under O(memory_threshold_mib), and fails with the per-GPU figures if not. Without
    C(nvidia-smi) it warns and relies on C(fuser) alone.
  - Never signals itself, its ancestors or PID 1, and never accepts the shared control nodes
    (C(/dev/nvidiactl), C(/dev/nvidia-uvm*), C(/dev/nvidia-modeset)).
  - Needs root to see and signal other users' processes. Uses C(fuser) from psmisc; on a
    host without it, warns and reads C(/proc/PID/fd) and C(/proc/PID/maps) as fuser does.
version_added: "0.1.0"
author:
  - vllm-ops maintainers (!UNKNOWN)
options:
  devices:
    description:
      - Per-GPU device nodes to release. C(nvidiaN) is the GPU whose C(nvidia-smi)
        C(minor_number) is N (the index N when nvidia-smi does not answer that field); its
        memory is checked. Paths with other names are released but not memory-checked.
      - Empty means every C(/dev/nvidiaN) on the host.
    type: list
    elements: path
    default: []
  owned_patterns:
    description:
      - Python regular expressions searched in each holder's process name (C(/proc/PID/comm))
        and command line. A match makes the holder the service's.
    type: list
    elements: str
    default: ['^VLLM::', 'vllm serve', 'vllm\.entrypoints']
  owned_units:
    description:
      - systemd units whose processes (by C(/proc/PID/cgroup)) are the service's.
        A name without a C(.service) or C(.scope) suffix gets C(.service).
    type: list
    elements: str
    default: []
  ignored_patterns:
    description:
      - Regular expressions (process name or command line) for GPU daemons that hold the
        device nodes without holding GPU memory. They are listed, never signalled and do not
        fail the run; the memory check still catches them if they hold memory.
    type: list
    elements: str
    default: ['^nvidia-persiste', '^nv-hostengine', '^nvidia-smi$', '^dcgm']
  term_timeout_s:
    description: Seconds to wait after SIGTERM before sending SIGKILL.
    type: int
    default: 30
  kill_timeout_s:
    description: Seconds to wait after SIGKILL for the processes to disappear before failing.
    type: int
    default: 30
  force_foreign:
    description:
      - Also SIGTERM, then SIGKILL, holders that do not belong to the service. The result lists
        them in RV(forced_foreign) and a warning says so.
    type: bool
    default: false
  memory_threshold_mib:
    description: Memory used per GPU, in MiB, at or under which a GPU counts as free.
    type: int
    default: 1024
  settle_timeout_s:
    description: Seconds to wait for the driver to bring every GPU under the threshold.
    type: int
    default: 60
  nvidia_smi:
    description: Name (searched on C(PATH)) or path of C(nvidia-smi).
    type: str
    default: nvidia-smi
attributes:
  check_mode:
    description: Can run in check mode and return the changed status prediction without modifying the target.
    support: full
    details: Lists what would be signalled in RV(would_signal); signals nothing.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
    support: none
notes:
  - C(changed) is true only when a process was signalled (or would be, in check mode).
  - GPUs still held by a process left alive, where nothing was released, are not waited for.
"""

EXAMPLES = r"""
- name: Release every GPU of the host from the vLLM service's leftovers
  gpu_release:
    owned_units: [vllm-kimi-k25-int4.service]

- name: Release two GPUs, also killing what is not the service's
  gpu_release:
    devices: [/dev/nvidia0, /dev/nvidia1]
    force_foreign: true
"""

RETURN = r"""
devices:
  description: Per device node, its GPU index, whether it exists, the holders found and the
    PIDs signalled (SIGTERM), killed (SIGKILL) or, in check mode, that would be signalled.
    A holder has pid, ppid, user, uid, comm, cmdline, unit, state, kind (owned, foreign,
    ignored, protected) and the reason for that kind.
  returned: always
  type: dict
  sample: {"/dev/nvidia0": {"index": 0, "exists": true, "holders": [{"pid": 4242,
    "ppid": 4100, "user": "vllm", "uid": 998, "comm": "VLLM::Worker_TP", "cmdline":
    "VLLM::Worker_TP0", "unit": null, "state": "S", "kind": "owned",
    "reason": "matches owned pattern '^VLLM::'"}], "signalled": [4242], "killed": [],
    "would_signal": []}}
signalled:
  description: PIDs sent SIGTERM.
  returned: always
  type: list
  elements: int
killed:
  description: PIDs still there after O(term_timeout_s), sent SIGKILL.
  returned: always
  type: list
  elements: int
would_signal:
  description: In check mode, the PIDs a real run would signal.
  returned: always
  type: list
  elements: int
forced_foreign:
  description: Foreign PIDs signalled because O(force_foreign) is true.
  returned: always
  type: list
  elements: int
foreign:
  description: Holders left alive that are not the service's (the module's ancestors
    included), each with the devices it holds. Non-empty means the module failed.
  returned: always
  type: list
  elements: dict
ignored:
  description: Holders matching O(ignored_patterns), with the devices each holds.
  returned: always
  type: list
  elements: dict
memory_threshold_mib:
  description: The threshold the memory check used.
  returned: always
  type: int
memory_before:
  description: Memory used per GPU before anything was signalled; null without nvidia-smi.
  returned: always
  type: list
  elements: dict
  sample: [{"index": 0, "used_mib": 99224}]
memory_after:
  description: Memory used per GPU after the release and the wait; null without nvidia-smi
    and in check mode.
  returned: always
  type: list
  elements: dict
  sample: [{"index": 0, "used_mib": 0}]
compute_apps_after:
  description: nvidia-smi's compute apps after the release (pid, process_name, used_mib).
  returned: always
  type: list
  elements: dict
nvidia_smi:
  description: Path of the nvidia-smi used, or null when none was found.
  returned: always
  type: str
holder_finder:
  description: Path of the fuser used to find holders, or C(/proc) when there was none.
  returned: always
  type: str
  sample: /usr/bin/fuser
elapsed_s:
  description: Seconds the module took.
  returned: always
  type: float
  sample: 31.42
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_ops.serving.plugins.module_utils.gpu_release_lib import ReleaseError, release


def main():
    module = AnsibleModule(
        argument_spec=dict(
            devices=dict(type="list", elements="path", default=[]),
            owned_patterns=dict(type="list", elements="str",
                                default=["^VLLM::", "vllm serve", r"vllm\.entrypoints"]),
            owned_units=dict(type="list", elements="str", default=[]),
            ignored_patterns=dict(type="list", elements="str",
                                  default=["^nvidia-persiste", "^nv-hostengine", "^nvidia-smi$",
                                           "^dcgm"]),
            term_timeout_s=dict(type="int", default=30),
            kill_timeout_s=dict(type="int", default=30),
            force_foreign=dict(type="bool", default=False),
            memory_threshold_mib=dict(type="int", default=1024),
            settle_timeout_s=dict(type="int", default=60),
            nvidia_smi=dict(type="str", default="nvidia-smi"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    for name in ("term_timeout_s", "kill_timeout_s", "settle_timeout_s", "memory_threshold_mib"):
        if params[name] < 0:
            module.fail_json(msg="%s must not be negative, got %d" % (name, params[name]))
    fuser = module.get_bin_path("fuser", opt_dirs=["/sbin", "/usr/sbin"]) or "fuser"
    try:
        result, error = release(
            devices=params["devices"],
            owned_patterns=params["owned_patterns"],
            owned_units=params["owned_units"],
            ignored_patterns=params["ignored_patterns"],
            term_timeout_s=params["term_timeout_s"],
            kill_timeout_s=params["kill_timeout_s"],
            force_foreign=params["force_foreign"],
            memory_threshold_mib=params["memory_threshold_mib"],
            settle_timeout_s=params["settle_timeout_s"],
            nvidia_smi=params["nvidia_smi"],
            fuser=fuser,
            check_mode=module.check_mode,
        )
    except ReleaseError as exc:
        module.fail_json(msg="GPU release failed: %s" % exc, changed=False)
    for warning in result.pop("warnings"):
        module.warn(warning)
    if error:
        # Keep the figures: what was released before the failure is in the result too.
        result["msg"] = error
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
