"""vLLM's torch profiler on the host: start and stop a capture over HTTP, and find one complete trace per
rank as vLLM writes them. The profiling capture's modules (``vllm_profile_run``, ``vllm_trace_files``) and
the watch's automatic capture (installed beside it as ``vllm_ops_profiler``) share it.

Standard library only, Python 3.9: it runs on the hosts. The HTTP calls take an ``opener`` (a callable
that opens a request with a timeout, as urllib's does: the modules pass ``loopback.open_loopback``, which no
proxy intercepts; the watch, whose unit has no proxy settings, urllib's own).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import time
import urllib.error
import urllib.request
import zlib


class ProfilerError(Exception):
    """The profiler could not be started or stopped; the message says why."""


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
    """``(traces, tables)``: one complete trace per rank of ``prefix`` in ``directory`` once every rank's
    size held over a poll (``[{rank, path, file, bytes, sha256}]``, in rank order), and the ranks' profiler
    tables; TraceError naming the rank and the problem when a file is missing, ambiguous or damaged."""
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


def post(opener, url, body, timeout):
    """POST ``body`` as JSON (nothing for None): ``(status, answer bytes)``; ProfilerError when nothing answers."""
    data = json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    try:
        with opener(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        raise ProfilerError("%s: %s" % (url, getattr(exc, "reason", exc))) from exc


def start(opener, base_url, prefix, max_iterations=0, timeout=30):
    """``POST /start_profile`` with the capture's prefix (and its bound, when above 0)."""
    body = {"profile_prefix": prefix}
    if max_iterations > 0:
        body["max_iterations"] = max_iterations
    status, answer = post(opener, base_url + "/start_profile", body, timeout)
    if status == 404:
        raise ProfilerError("/start_profile answered 404: the server was not started with --profiler-config "
                            "(is the profiling variant running, or the service armed?)")
    if status == 409:
        raise ProfilerError("/start_profile answered 409: a profile is already running on this server")
    if status != 200:
        raise ProfilerError("/start_profile answered %s: %s" % (status, answer[:200]))


def stop(opener, base_url, timeout, clock=time.monotonic):
    """``POST /stop_profile``, which returns once every rank flushed its trace: the seconds it took."""
    started = clock()
    try:
        status, answer = post(opener, base_url + "/stop_profile", None, timeout)
    except ProfilerError as exc:
        raise ProfilerError("/stop_profile did not answer within %ss (%s): the ranks may still be writing "
                            "their traces" % (timeout, exc)) from exc
    if status != 200:
        raise ProfilerError("/stop_profile answered %s: %s" % (status, answer[:200]))
    return clock() - started
