#!/usr/bin/python
"""Find a campaign's trace files, one per rank, once they are complete; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_trace_files
short_description: Find one complete torch profiler trace per rank for a campaign
description:
  - Looks in O(directory) for C(<prefix>_*rank<N>.<ns>.pt.trace.json[.gz]) for each rank
    C(0..ranks-1), as vLLM names them.
  - Waits up to O(timeout_s) until every rank's file exists and its size is stable over two
    polls, then checks it is complete (a gzip stream read to its end, CRC included) and returns
    its size and SHA-256.
  - Fails naming the rank and the problem when a file is missing, ambiguous or damaged.
  - Also lists the C(<prefix>_*rank<N>.profiler_out.txt) tables the ranks wrote (vLLM names
    them after the trace, without the timestamp), which belong to the campaign.
  - Reads only; reports C(changed=false).
options:
  directory:
    description: The trace directory on the host.
    type: path
    required: true
  prefix:
    description: The campaign's profile prefix.
    type: str
    required: true
  ranks:
    description: How many ranks (the tensor-parallel size).
    type: int
    required: true
  timeout_s:
    description: Seconds to wait for all traces to be complete.
    type: float
    default: 600
  poll_interval_s:
    description: Seconds between size checks.
    type: float
    default: 2
author: vllm-ops maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Wait for every rank's trace of the capture, then read their sizes and digests
  vllm_ops.serving.vllm_trace_files:
    directory: /var/tmp/vllm-profiles
    prefix: campaign-20261205
    ranks: 8
    timeout_s: 600
  register: traces
"""

RETURN = r"""
traces:
  description: One entry per rank, in rank order.
  type: list
  elements: dict
  returned: success
  contains:
    rank: {description: The rank., type: int}
    path: {description: The file on the host., type: str}
    file: {description: Its name., type: str}
    bytes: {description: Its size., type: int}
    sha256: {description: Its SHA-256., type: str}
tables:
  description: The campaign's profiler_out tables in the directory, in rank order.
  type: list
  elements: str
  returned: success
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_ops.serving.plugins.module_utils.profiler import TraceError, find


def main():
    module = AnsibleModule(
        argument_spec=dict(
            directory=dict(type="path", required=True),
            prefix=dict(type="str", required=True),
            ranks=dict(type="int", required=True),
            timeout_s=dict(type="float", default=600),
            poll_interval_s=dict(type="float", default=2),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        traces, tables = find(p["directory"], p["prefix"], p["ranks"], p["timeout_s"], p["poll_interval_s"])
    except TraceError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, traces=traces, tables=tables)


if __name__ == "__main__":
    main()
