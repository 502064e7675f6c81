"""Helpers that write small hand-made traces, in torch's exporter layout or others."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
# The real traces the repo carries (provenance and licences in its README.md); never edited.
SHARED_TRACES = REPO / "tests" / "data" / "traces"


def kernel(name, ts, dur, corr=None, cat="kernel", pid=0, tid=7):
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
          "args": {"External id": 1, "device": pid, "stream": tid}}
    if corr is not None:
        ev["args"]["correlation"] = corr
    return ev


def span(name, ts, dur, cat="gpu_user_annotation"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"External id": 2}}


def runtime(name, ts, dur, corr):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": dur,
            "args": {"External id": 3, "cbid": 211, "correlation": corr}}


def cpu_op(name, ts, dur):
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": dur,
            "args": {"External id": 4}}


def _torch_event(ev: dict) -> str:
    """One event as torch's exporter writes it (ph/cat/name/pid/tid, then ts/dur, then args)."""
    if ev.get("ph") != "X" or "cat" not in ev:
        return "  " + json.dumps(ev)
    d = json.dumps
    text = (f'  {{\n    "ph": "X", "cat": {d(ev["cat"])}, "name": {d(ev["name"])}, '
            f'"pid": {d(ev["pid"])}, "tid": {d(ev["tid"])},\n'
            f'    "ts": {ev["ts"]}, "dur": {ev["dur"]}')
    if "args" in ev:
        inner = ",".join(f"      {d(k)}: {d(v)}" for k, v in ev["args"].items())
        text += f',\n    "args": {{\n{inner}\n    }}'
    return text + "\n  }"


def _pretty_event(ev: dict) -> str:
    """One event as torch 2.13's exporter writes it (vLLM 0.32; see the real trace in data/):
    one key per line, and a complete event puts the comma before ``"args"`` on its own line."""
    d = json.dumps
    keys = [f"    {d(k)}: {d(v)}" for k, v in ev.items() if k != "args"]
    text = "  {\n" + ",\n".join(keys)
    if "args" in ev:
        inner = ", ".join(f"{d(k)}: {d(v)}" for k, v in ev["args"].items())
        text += ("\n    ," if ev.get("ph") == "X" else ",") + f'\n    "args": {{\n      {inner}\n    }}'
    return text + "\n  }"


def render(doc: dict, layout: str = "torch") -> str:
    """The document in one of the layouts: ``torch`` (torch <= 2.12's exporter), ``pretty``
    (torch 2.13's, one key per line), ``indent`` (json.dump, indent 4) or ``minified``."""
    if layout == "pretty":
        head = {k: v for k, v in doc.items() if k != "traceEvents" and k != "traceName"}
        parts = [" {"] + [f"    {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
        parts.append('    "traceEvents": [\n    ')
        parts.append(",\n".join(_pretty_event(e) for e in doc["traceEvents"]))
        parts.append(f'  ],"traceName": {json.dumps(doc.get("traceName", "/tmp/trace.json"))} }}')
        return "\n".join(parts)
    if layout == "minified":
        return json.dumps(doc, separators=(",", ":"))
    if layout == "indent":
        return json.dumps(doc, indent=4)
    assert layout == "torch"
    head = {k: v for k, v in doc.items() if k != "traceEvents" and k != "traceName"}
    parts = ["{"]
    parts += [f'  {json.dumps(k)}: {json.dumps(v)},' for k, v in head.items()]
    parts.append('  "traceEvents": [')
    parts.append(",\n".join(_torch_event(e) for e in doc["traceEvents"]))
    parts.append("  ],")
    parts.append(f'  "traceName": {json.dumps(doc.get("traceName", "/tmp/trace.json"))}')
    parts.append("}")
    return "\n".join(parts)


@pytest.fixture
def write_trace(tmp_path):
    """write_trace(name, events, rank=0, world_size=1, layout="torch", gz=True) -> path."""

    def write(name, events, rank=0, world_size=1, layout="torch", gz=True, info=True, directory=None):
        doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU"}]}
        if info:
            doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world_size}
        doc["traceEvents"] = list(events)
        text = render(doc, layout).encode()
        path = Path(directory or tmp_path) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(text) if gz else text)
        return str(path)

    return write


@pytest.fixture
def real_traces():
    """tests/data/traces: h200_tp2_decode/ and public/, real traces carried by the repo."""
    return SHARED_TRACES


@pytest.fixture
def ev():
    """Event builders: ev.kernel, ev.span, ev.runtime, ev.cpu_op."""
    from types import SimpleNamespace

    return SimpleNamespace(kernel=kernel, span=span, runtime=runtime, cpu_op=cpu_op, render=render)
