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

import gzip
import hashlib
import os
import re
import time
import zlib

from ansible.module_utils.basic import AnsibleModule


class TraceError(Exception):
    pass


TRACE_SUFFIX = r"\.\d+\.pt\.trace\.json(\.gz)?"
TABLE_SUFFIX = r"\.profiler_out\.txt"


def rank_files(directory, prefix, ranks, suffix=TRACE_SUFFIX):
    """{rank: [file names]} for the campaign's traces (or, with TABLE_SUFFIX, its tables)."""
    pattern = re.compile(r"^%s_(.*_)?rank(\d+)%s$" % (re.escape(prefix), suffix))
    found = {rank: [] for rank in range(ranks)}
    for name in sorted(os.listdir(directory)):
        match = pattern.match(name)
        if match and int(match.group(2)) in found:
            found[int(match.group(2))].append(name)
    return found


def check_complete(path):
    """Read the whole file (through gzip when compressed); return its SHA-256."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as raw:
            if path.endswith(".gz"):
                stream = gzip.GzipFile(fileobj=_Tee(raw, digest))
                while stream.read(1 << 20):
                    pass
                while raw.read(1 << 20):  # trailing bytes still count for the checksum
                    pass
            else:
                for block in iter(lambda: raw.read(1 << 20), b""):
                    digest.update(block)
    except (EOFError, OSError, zlib.error) as exc:
        raise TraceError("%s is damaged: %s" % (path, exc)) from exc
    return digest.hexdigest()


class _Tee:
    """A read-only file that feeds what is read into a hash."""

    def __init__(self, raw, digest):
        self.raw, self.digest = raw, digest

    def read(self, size=-1):
        block = self.raw.read(size)
        self.digest.update(block)
        return block


def find(directory, prefix, ranks, timeout_s, poll_s, clock=time.monotonic, sleep=time.sleep):
    if not os.path.isdir(directory):
        raise TraceError("trace directory %s does not exist" % directory)
    deadline = clock() + timeout_s
    sizes = {}
    while True:
        found = rank_files(directory, prefix, ranks)
        ambiguous = {r: names for r, names in found.items() if len(names) > 1}
        if ambiguous:
            raise TraceError("several traces for one rank with prefix %s: %s" % (prefix, ambiguous))
        missing = [r for r, names in found.items() if not names]
        current = {r: os.path.getsize(os.path.join(directory, names[0])) for r, names in found.items() if names}
        if not missing and current == sizes:
            break
        if clock() >= deadline:
            if missing:
                raise TraceError(
                    "no trace for rank(s) %s with prefix %s in %s after %ss; present: %s" % (
                        ", ".join(map(str, missing)), prefix, directory, timeout_s,
                        ", ".join(sorted(os.listdir(directory))) or "nothing"))
            raise TraceError("traces in %s were still growing after %ss" % (directory, timeout_s))
        sizes = current
        sleep(poll_s)
    traces = []
    for rank in range(ranks):
        path = os.path.join(directory, found[rank][0])
        try:
            sha = check_complete(path)
        except TraceError as exc:
            raise TraceError("rank %d: %s" % (rank, exc)) from exc
        traces.append({"rank": rank, "path": path, "file": found[rank][0], "bytes": os.path.getsize(path),
                       "sha256": sha})
    tables = [os.path.join(directory, name)
              for names in rank_files(directory, prefix, ranks, TABLE_SUFFIX).values() for name in names]
    return traces, tables


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
