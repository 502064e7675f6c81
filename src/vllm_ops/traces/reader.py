"""Streaming reader for torch.profiler / Kineto Chrome traces (``.json`` or ``.json.gz``).

It keeps only what the summary needs, in compact arrays (about 28 bytes per GPU
activity; every CPU event, python stack frame and flow arrow is dropped as it streams
by), plus the GPU annotation spans whose names the caller asks for. Everything else in
the document is skipped while it is read. GPU activities have to be kept until the end
because Kineto writes the ``gpu_user_annotation`` spans *after* all kernels, so which
step a kernel belongs to is only known once the file has been read.

Two parsers share one result type:

* the *fast* path exploits the fixed layout torch's exporter writes (one event per few
  lines, ``"ph": "X", "cat": "kernel", "name": ...`` on the first line of an event). It
  checks the first event's layout, parses the interesting events with one regular
  expression over large decompressed chunks, and checks, chunk by chunk, that the
  number of ``"cat": "kernel"``, ``"cat": "gpu_...`` and ``"name": "cudaGraphLaunch``
  occurrences equals what it parsed; on any disagreement the general parser reads the
  file instead. It checks the document's outline (starts with ``{``, ends with ``}``)
  but not the syntax of events it skips.
* the *general* path parses any valid JSON with ijson (yajl2_c backend) and validates
  the whole document.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from array import array
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import ijson

from .errors import TraceInputError

GPU_ACTIVITY_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
TRACE_SUFFIXES = (".json", ".json.gz")
CHUNK = 4 << 20
_HEAD_KEEP = 1 << 20
_TAIL_KEEP = 1 << 20
_MAX_DISTINCT_NAMES = 200

_FAST_START = re.compile(rb'"traceEvents"\s*:\s*\[\n  \{\n    "')
_FAST_EVENT = re.compile(
    rb'\n    "ph": "X", "cat": "(kernel|gpu_memcpy|gpu_memset|gpu_user_annotation|user_annotation'
    rb'|cuda_runtime(?=", "name": "cudaGraphLaunch))", "name": "([^"\\]*(?:\\.[^"\\]*)*)", '
    rb'"pid": ([^,\n]*), "tid": [^,\n]*,\n    "ts": ([^,\n]*), "dur": ([^,\n]*),\n    "args": \{\n'
)
_CORRELATION = re.compile(rb'"correlation": (\d+)')
_DIGITS = re.compile(r"\d+")
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


class _LayoutMismatch(Exception):
    """The fast path met something outside torch's layout: use the general parser."""


@dataclass
class TraceData:
    """What one rank's file contributes to the summary."""

    path: str
    parser: str = ""
    rank: int | None = None
    world_size: int | None = None
    devices: dict[int, str] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    name_cats: list[str] = field(default_factory=list)
    ts: array = field(default_factory=lambda: array("d"))
    dur: array = field(default_factory=lambda: array("d"))
    name_id: array = field(default_factory=lambda: array("l"))
    corr: array = field(default_factory=lambda: array("q"))
    activity_pids: Counter = field(default_factory=Counter)  # device pid -> distinct activity names
    spans: dict[str, list[tuple[float, float, str]]] = field(default_factory=dict)
    gpu_annotation_names: Counter = field(default_factory=Counter)
    cpu_annotation_names: Counter = field(default_factory=Counter)
    graph_launch_corr: list[int] = field(default_factory=list)
    bad_events: int = 0

    @property
    def activities(self) -> int:
        return len(self.ts)


def rank_from_filename(path: str) -> int | None:
    """``...rank3.123.pt.trace.json.gz`` -> 3 (the last ``rank{N}`` in the file name)."""
    hits = _RANK_IN_NAME.findall(os.path.basename(path))
    return int(hits[-1]) if hits else None


def normalize_annotation(name: str) -> str:
    """Collapse digits so per-step names group: ``execute_context_0(0)_generation_5(5)``
    -> ``execute_context_N(N)_generation_N(N)``."""
    return _DIGITS.sub("N", name)[:160]


def find_trace_files(paths: list[str] | str) -> list[str]:
    """Expand directories into their trace files (sorted); keep files as given."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise TraceInputError("no trace paths given")
    files: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            found = sorted(
                os.path.join(p, f) for f in os.listdir(p)
                if f.endswith(TRACE_SUFFIXES) and os.path.isfile(os.path.join(p, f))
            )
            if not found:
                raise TraceInputError(f"{p}: directory holds no trace files (*.json, *.json.gz)")
            files.extend(found)
        elif os.path.exists(p):
            files.append(p)
        else:
            raise TraceInputError(f"{p}: no such file or directory")
    return files


class _Stream:
    """Decompressed bytes of a trace file in chunks, remembering its head and tail."""

    def __init__(self, path: str):
        self.path = path
        self.head = b""
        self._recent: list[bytes] = []
        self._recent_len = 0
        self.total = 0
        try:
            with open(path, "rb") as probe:
                magic = probe.read(2)
        except OSError as exc:
            raise TraceInputError(f"{path}: cannot read: {exc.strerror or exc}") from None
        if not magic:
            raise TraceInputError(f"{path}: empty file")
        self.gzipped = magic == b"\x1f\x8b"

    def __enter__(self):
        try:
            self._fh = gzip.open(self.path, "rb") if self.gzipped else open(self.path, "rb")
        except OSError as exc:
            raise TraceInputError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        return self

    def __exit__(self, *exc):
        self._fh.close()

    def read(self, size: int | None = None) -> bytes:
        if size == 0:  # ijson probes with read(0) for the type of data
            return b""
        try:
            data = self._fh.read(size if size and size > 0 else CHUNK)
        except EOFError:
            raise TraceInputError(
                f"{self.path}: truncated gzip (the compressed data ends before the end-of-stream marker)"
            ) from None
        except gzip.BadGzipFile as exc:
            raise TraceInputError(f"{self.path}: corrupt gzip: {exc}") from None
        except zlib.error as exc:
            raise TraceInputError(f"{self.path}: corrupt gzip data: {exc}") from None
        except OSError as exc:
            raise TraceInputError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        if data:
            if len(self.head) < _HEAD_KEEP:
                self.head += data[: _HEAD_KEEP - len(self.head)]
            self._recent.append(data)
            self._recent_len += len(data)
            while self._recent_len - len(self._recent[0]) >= _TAIL_KEEP:
                self._recent_len -= len(self._recent.pop(0))
            self.total += len(data)
        return data

    @property
    def tail(self) -> bytes:
        """The last ``_TAIL_KEEP`` bytes (or more) read so far."""
        return b"".join(self._recent)


def read_trace(path: str, span_patterns: Mapping[str, re.Pattern] | None = None,
               parser: str = "auto") -> TraceData:
    """Read one trace file.

    ``span_patterns`` maps a span kind (e.g. ``"decode"``) to a compiled regex; a
    ``gpu_user_annotation`` span is kept under every kind whose regex matches its name
    (``re.search``). ``parser`` is ``"auto"`` (fast path, general fallback),
    ``"fast"`` (fail rather than fall back; for tests) or ``"general"``.
    """
    span_patterns = dict(span_patterns or {})
    if parser not in ("auto", "fast", "general"):
        raise TraceInputError(f"unknown parser {parser!r} (auto, fast or general)")
    if parser != "general":
        try:
            return _read_fast(path, span_patterns)
        except _LayoutMismatch as exc:
            if parser == "fast":
                raise TraceInputError(f"{path}: not in torch's exporter layout ({exc})") from None
    return _read_general(path, span_patterns)


class _Builder:
    """Collects events into a TraceData, whichever parser found them."""

    def __init__(self, path: str, span_patterns: Mapping[str, re.Pattern], parser: str):
        self.data = TraceData(path=path, parser=parser, spans={k: [] for k in span_patterns})
        self.span_patterns = list(span_patterns.items())
        self._intern: dict = {}

    def activity(self, key, cat: str, name: str, ts: float, dur: float, corr: int, pid) -> None:
        """Used by the general parser; the fast path inlines the same steps."""
        d = self.data
        nid = self._intern.get(key)
        if nid is None:
            nid = len(d.names)
            self._intern[key] = nid
            d.names.append(name)
            d.name_cats.append(cat)
            d.activity_pids[str(pid).encode()] += 1
        d.ts.append(ts)
        d.dur.append(dur)
        d.name_id.append(nid)
        d.corr.append(corr)

    def gpu_span(self, name: str, ts: float, dur: float) -> None:
        d = self.data
        _count_capped(d.gpu_annotation_names, normalize_annotation(name))
        for kind, regex in self.span_patterns:
            if regex.search(name):
                d.spans[kind].append((ts, dur, name))

    def cpu_span(self, name: str) -> None:
        _count_capped(self.data.cpu_annotation_names, normalize_annotation(name))

    def finish(self, stream: _Stream) -> TraceData:
        d = self.data
        info = _top_level_value(stream, "distributedInfo")
        if isinstance(info, dict):
            rank, world = info.get("rank"), info.get("world_size")
            d.rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
            d.world_size = world if isinstance(world, int) and not isinstance(world, bool) else None
        props = _top_level_value(stream, "deviceProperties")
        if isinstance(props, list):
            for p in props:
                if isinstance(p, dict) and isinstance(p.get("id"), int) and isinstance(p.get("name"), str):
                    d.devices[p["id"]] = p["name"]
        return d


def _count_capped(counter: Counter, key: str) -> None:
    if key in counter or len(counter) < _MAX_DISTINCT_NAMES:
        counter[key] += 1


def _decode_json_string(raw: bytes) -> str:
    if b"\\" not in raw:
        return raw.decode("utf-8", "replace")
    return json.loads(b'"' + raw + b'"')


def _read_fast(path: str, span_patterns) -> TraceData:
    b = _Builder(path, span_patterns, "fast")
    with _Stream(path) as stream:
        buf = stream.read()
        m = _FAST_START.search(buf)
        while m is None and len(buf) < _HEAD_KEEP:
            more = stream.read()
            if not more:
                break
            buf += more
            m = _FAST_START.search(buf)
        if not buf.lstrip().startswith(b"{") or m is None:
            raise _LayoutMismatch("no torch-style traceEvents array at the start")
        pos = m.start()
        data_end = False
        while True:
            more = b"" if data_end else stream.read()
            if not more:
                data_end = True
                piece, buf = buf[pos:], b""
            else:
                buf = buf[pos:] + more
                pos = 0
                cut = buf.rfind(b"\n  {")
                if cut <= 0:
                    continue
                piece, buf = buf[:cut], buf[cut:]
            _fast_piece(piece, b)
            if data_end:
                break
        if stream.total == 0:
            raise TraceInputError(f"{path}: empty file (nothing after decompression)")
        if not stream.tail.rstrip().endswith(b"}"):
            raise _LayoutMismatch("the document does not end with '}'")
        return b.finish(stream)


def _fast_piece(piece: bytes, b: _Builder) -> None:
    """Parse the events of interest in one piece with a single regex pass, then check
    that every occurrence of their categories in the piece was parsed (one layout per
    file is assumed; the first event's layout was checked before)."""
    d = b.data
    intern = b._intern
    names, name_cats = d.names, d.name_cats
    ts_append, dur_append = d.ts.append, d.dur.append
    nid_append, corr_append = d.name_id.append, d.corr.append
    corr_search = _CORRELATION.search
    kernels = gpu = launches = 0
    for m in _FAST_EVENT.finditer(piece):
        cat, name, pid, ts, dur = m.groups()
        try:
            tsf, durf = float(ts), float(dur)
        except ValueError:
            raise _LayoutMismatch("non-numeric ts/dur") from None
        end = m.end()
        if cat == b"kernel" or cat == b"gpu_memcpy" or cat == b"gpu_memset":
            if cat == b"kernel":
                kernels += 1
            else:
                gpu += 1
            nid = intern.get((cat, name))
            if nid is None:
                nid = intern[(cat, name)] = len(names)
                names.append(_decode_json_string(name))
                name_cats.append(cat.decode())
                d.activity_pids[pid] += 1
            c = corr_search(piece, end, _args_end(piece, end))
            ts_append(tsf)
            dur_append(durf)
            nid_append(nid)
            corr_append(int(c.group(1)) if c else -1)
        elif cat == b"gpu_user_annotation":
            gpu += 1
            b.gpu_span(_decode_json_string(name), tsf, durf)
        elif cat == b"user_annotation":
            b.cpu_span(_decode_json_string(name))
        else:  # cudaGraphLaunch
            launches += 1
            c = corr_search(piece, end, _args_end(piece, end))
            if c:
                d.graph_launch_corr.append(int(c.group(1)))
    if (kernels != piece.count(b'"cat": "kernel"') or gpu != piece.count(b'"cat": "gpu_')
            or launches != piece.count(b'"name": "cudaGraphLaunch')):
        raise _LayoutMismatch("an event of interest is laid out differently")


def _args_end(piece: bytes, start: int) -> int:
    end = piece.find(b"\n    }", start)
    return len(piece) if end < 0 else end


def _read_general(path: str, span_patterns) -> TraceData:
    b = _Builder(path, span_patterns, "general")
    with _Stream(path) as stream:
        n = 0
        try:
            for ev in ijson.items(stream, "traceEvents.item", use_float=True, buf_size=1 << 20):
                n += 1
                if not isinstance(ev, dict):
                    b.data.bad_events += 1
                    continue
                cat = ev.get("cat")
                if cat in GPU_ACTIVITY_CATS or cat == "gpu_user_annotation" or cat == "user_annotation":
                    if ev.get("ph") != "X":
                        continue
                    name, ts, dur = ev.get("name"), ev.get("ts"), ev.get("dur")
                    if not isinstance(name, str) or not _is_num(ts) or not _is_num(dur):
                        b.data.bad_events += 1
                        continue
                    if cat == "gpu_user_annotation":
                        b.gpu_span(name, float(ts), float(dur))
                    elif cat == "user_annotation":
                        b.cpu_span(name)
                    else:
                        corr = _correlation(ev)
                        b.activity((cat, name), cat, name, float(ts), float(dur), corr, ev.get("pid"))
                elif cat == "cuda_runtime" and str(ev.get("name", "")).startswith("cudaGraphLaunch"):
                    corr = _correlation(ev)
                    if corr >= 0:
                        b.data.graph_launch_corr.append(corr)
        except ijson.common.IncompleteJSONError as exc:
            if stream.total == 0:
                raise TraceInputError(f"{path}: empty file (nothing after decompression)") from None
            msg = " ".join(str(exc).split())
            kind = "truncated JSON" if "incomplete" in msg.lower() or "premature" in msg.lower() else "invalid JSON"
            raise TraceInputError(f"{path}: {kind}: {msg[:200]}") from None
        except ijson.common.JSONError as exc:
            raise TraceInputError(f"{path}: invalid JSON: {' '.join(str(exc).split())[:200]}") from None
        if n == 0 and b'"traceEvents"' not in stream.head and b'"traceEvents"' not in stream.tail:
            raise TraceInputError(f"{path}: no traceEvents array: not a torch.profiler/Chrome trace")
        return b.finish(stream)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _correlation(ev: dict) -> int:
    args = ev.get("args")
    if isinstance(args, dict):
        c = args.get("correlation")
        if isinstance(c, int) and not isinstance(c, bool):
            return c
        if isinstance(c, float) and c.is_integer():
            return int(c)
    return -1


def _top_level_value(stream: _Stream, key: str):
    """Find a small top-level value (``distributedInfo``, ``deviceProperties``) in the
    part of the document before ``traceEvents`` or, failing that, after its end."""
    needle = b'"' + key.encode() + b'"'
    head = stream.head
    te = head.find(b'"traceEvents"')
    hit = _decode_after(head if te < 0 else head[:te], needle, head)
    if hit is not None:
        return hit
    tail = stream.tail
    at = tail.rfind(needle)
    return None if at < 0 else _decode_after(tail[at:], needle, tail[at:])


def _decode_after(region: bytes, needle: bytes, text: bytes):
    at = region.find(needle)
    if at < 0:
        return None
    colon = text.find(b":", at + len(needle))
    if colon < 0:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(text[colon + 1:].decode("utf-8", "replace").lstrip())
    except ValueError:
        return None
    return value
