"""Streaming reader for torch.profiler / Kineto Chrome traces (``.json`` or ``.json.gz``).

Memory does not grow with the number of GPU activities, and each file is decompressed
once. Kineto writes the ``gpu_user_annotation`` spans (the steps) *after* all kernels,
so a kernel cannot be attributed to a step as it streams by; the reader therefore
*spills* the activities to disk:

1. the single streaming pass keeps the GPU annotation spans whose names the caller asks
   for, the CPU annotation spans (``user_annotation``) of the same names, which count
   steps on a rank without GPU kernels (vLLM's CPU backend records nothing else), the
   (capped) tables of annotation names seen and the correlation ids of
   ``cudaGraphLaunch`` calls, and writes every GPU activity as one fixed-size record
   (``ts``, ``dur``, activity name id, correlation id: 28 bytes, ``_SPILL``) through a
   buffered writer to a file in a private temporary directory; the activity names are
   interned (a table sized by the number of distinct names);
2. then the spill file is read back in chunks of ``_SPILL_READ`` bytes, in file order,
   and each activity is added into per-kind (decode, prefill, ...) counters by binary
   search over the sorted union of the spans: total duration and call count per
   distinct activity name. Only the calls whose name the caller's ``keep_calls`` selects
   (the all-reduce kernels, for the cross-rank skew correction) are kept one by one, and
   only those inside a step. The temporary directory is removed afterwards, on error too.

What stays in memory per rank is thus: the interned activity names, the spans of the
kinds asked for (one per step, GPU and CPU), the ``cudaGraphLaunch`` correlation ids (one per launch,
and a set of those whose kernels were seen), the kept calls (one tuple per all-reduce
call inside a step: they grow with the number of all-reduce calls, not of activities),
one decompressed chunk (4 MiB) plus the head and tail kept to find
``distributedInfo``, the spill writer's buffer and one read-back chunk. The spill file on
disk grows with the activities (28 bytes each). Every CPU event, python stack frame and
flow arrow is dropped as it streams by, and everything else in the document is skipped.

Two parsers share one result type:

* the *fast* path exploits the fixed layouts torch's exporter writes: up to torch 2.12
  one event per few lines (``"ph": "X", "cat": "kernel", "name": ...`` on the first line
  of an event); from torch 2.13 (vLLM 0.32) one key per line, in the same key order
  (``json.dump(indent=N)`` of a torch trace reads the same way). It picks the layout
  from the first event (indents; keys on one line or not), parses the interesting events
  with that layout's regular expression over large decompressed chunks, and checks, chunk
  by chunk, that the number of ``"cat": "kernel"``, ``"cat": "gpu_...`` and
  ``"name": "cudaGraphLaunch`` occurrences equals what it parsed; on any disagreement the general parser reads the
  file instead (from the start, with a fresh spill). It checks the document's outline
  (starts with ``{``, ends with ``}``) but not the syntax of events it skips.
* the *general* path parses any valid JSON with ijson (yajl2_c backend) and validates
  the whole document.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import struct
import tempfile
import zlib
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import ijson

from .errors import TraceInputError

GPU_ACTIVITY_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
TRACE_SUFFIXES = (".json", ".json.gz")
CHUNK = 4 << 20
_HEAD_KEEP = 1 << 20
_TAIL_KEEP = 1 << 20
_MAX_DISTINCT_NAMES = 200
# One spilled GPU activity: ts, dur (exact doubles), name id, correlation id (-1: none).
_SPILL = struct.Struct("<ddIq")
_SPILL_READ = _SPILL.size * 37449  # ~1 MiB read back at a time
_SPILL_BUFFER = 1 << 20

# Where the events start, with the indents of an event's brace and of its keys.
_FAST_START = re.compile(rb'"traceEvents"\s*:\s*\[[ \t]*(?:\n[ \t]*)*?\n( *)\{\n( *)"')
_FAST_CATS = rb"kernel|gpu_memcpy|gpu_memset|gpu_user_annotation|user_annotation"


@dataclass(frozen=True)
class _Layout:
    """One of the layouts the fast path parses: the regex for an event of interest, the
    text that opens an event (pieces are cut before it) and the text that closes its args."""

    event: re.Pattern
    opens: bytes
    args_end: bytes


def _compact_layout() -> _Layout:
    """torch <= 2.12: ``"ph": "X", "cat": ..., "name": ..., "pid": ..., "tid": ...`` on the
    first line of an event, ``ts`` and ``dur`` on the second, the args on one line."""
    return _Layout(re.compile(
        rb'\n    "ph": "X", "cat": "(' + _FAST_CATS +
        rb'|cuda_runtime(?=", "name": "cudaGraphLaunch))", "name": "([^"\\]*(?:\\.[^"\\]*)*)", '
        rb'"pid": ([^,\n]*), "tid": [^,\n]*,\n    "ts": ([^,\n]*), "dur": ([^,\n]*),\n    "args": \{\n'
        rb'(?:[^\n]*?"correlation": (\d+))?'  # torch writes the args on one line; else see _fast_correlation
    ), b"\n  {", b"\n    }")


def _key_per_line_layout(brace: bytes, key: bytes) -> _Layout:
    """One key per line, in torch's order (ph, cat, name, pid, tid, ts, dur, args): what
    torch 2.13 writes (``"dur": ...`` then ``,`` on a line of its own before ``"args"``;
    braces indented 2, keys 4), and also ``json.dump(indent=N)`` of a torch trace."""
    k = rb"\n" + key
    return _Layout(re.compile(
        k + rb'"ph": "X",' + k + rb'"cat": "(' + _FAST_CATS +
        rb'|cuda_runtime(?=",' + k + rb'"name": "cudaGraphLaunch))",' + k +
        rb'"name": "([^"\\]*(?:\\.[^"\\]*)*)",' + k + rb'"pid": ([^,\n]*),' + k + rb'"tid": [^,\n]*,' + k +
        rb'"ts": ([^,\n]*),' + k + rb'"dur": ([^,\n]*?)(?:' + k + rb')?,' + k + rb'"args": \{\n'
        rb'(?:[^}]*?"correlation": (\d+))?'  # within the args (up to their first '}')
    ), b"\n" + brace + b"{", k + b"}")


_CORRELATION = re.compile(rb'"correlation": (\d+)')
_DIGITS = re.compile(r"\d+")
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


class _LayoutMismatch(Exception):
    """The fast path met something outside torch's layout: use the general parser."""


@dataclass
class KindTotals:
    """The activities that start inside the spans of one kind (e.g. decode), added up.

    ``total_us`` and ``calls`` are indexed by activity name id (``TraceData.names``);
    ``kept`` holds ``(ts, dur, name id)`` of each activity in a span whose name
    ``keep_calls`` selected, in file order. ``starts``/``ends`` are the union of the
    spans (an activity inside overlapping spans counts once); ``overlaps`` counts the
    spans that overlap the one before.
    """

    spans: list[tuple[float, float, str]] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    overlaps: int = 0
    total_us: list[float] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    kept: list[tuple[float, float, int]] = field(default_factory=list)

    def close_spans(self) -> None:
        """Sort the spans and build their union (once the file is read)."""
        self.spans.sort()
        for s, d, _ in self.spans:
            if self.ends and s < self.ends[-1]:
                self.overlaps += 1
                self.ends[-1] = max(self.ends[-1], s + d)
            else:
                self.starts.append(s)
                self.ends.append(s + d)


@dataclass
class TraceData:
    """What one rank's file contributes to the summary (sized by distinct names and
    spans, not by GPU activities)."""

    path: str
    parser: str = ""
    rank: int | None = None
    world_size: int | None = None
    devices: dict[int, str] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    name_cats: list[str] = field(default_factory=list)
    activities: int = 0  # GPU activities: kernels, memory copies and sets
    kernels: int = 0  # of which kernels (``cat: kernel``); none in a CPU-only trace
    activity_pids: Counter = field(default_factory=Counter)  # device pid -> distinct activity names
    kinds: dict[str, KindTotals] = field(default_factory=dict)
    # CPU annotation (user_annotation) spans per kind, as (ts, dur, name) in file order:
    # the steps of a rank whose trace has no GPU annotations (a CPU-only run).
    cpu_spans: dict[str, list[tuple[float, float, str]]] = field(default_factory=dict)
    gpu_annotation_names: Counter = field(default_factory=Counter)
    cpu_annotation_names: Counter = field(default_factory=Counter)
    graph_launch_corr: list[int] = field(default_factory=list)
    graph_launches_seen: set = field(default_factory=set)  # launch correlation ids some activity carries
    bad_events: int = 0

    @property
    def spans(self) -> dict[str, list[tuple[float, float, str]]]:
        return {kind: t.spans for kind, t in self.kinds.items()}

    @property
    def graph_launches_without_activity(self) -> int:
        return sum(1 for c in self.graph_launch_corr if c not in self.graph_launches_seen)


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
               parser: str = "auto", keep_calls: Callable[[str, str], bool] | None = None) -> TraceData:
    """Read one trace file (one pass and a spill file, see the module's docstring).

    ``span_patterns`` maps a span kind (e.g. ``"decode"``) to a compiled regex; a
    ``gpu_user_annotation`` span is a span of every kind whose regex matches its name
    (``re.search``). ``keep_calls(name, cat)`` selects the activity names whose calls
    inside spans are kept one by one (``KindTotals.kept``). ``parser`` is ``"auto"``
    (fast path, general fallback), ``"fast"`` (fail rather than fall back; for tests)
    or ``"general"``.
    """
    span_patterns = dict(span_patterns or {})
    if parser not in ("auto", "fast", "general"):
        raise TraceInputError(f"unknown parser {parser!r} (auto, fast or general)")
    if parser != "general":
        try:
            return _read(path, span_patterns, keep_calls, "fast", _fast_scan)
        except _LayoutMismatch as exc:
            if parser == "fast":
                raise TraceInputError(f"{path}: not in torch's exporter layout ({exc})") from None
    return _read(path, span_patterns, keep_calls, "general", _general_scan)


def _read(path, span_patterns, keep_calls, parser, scan) -> TraceData:
    b = _Builder(path, span_patterns, parser, keep_calls)
    with _Stream(path) as stream:
        # _Stream turns its own OSErrors into TraceInputError: what is left is the spill's.
        try:
            with tempfile.TemporaryDirectory(prefix="vllm-trace-") as tmp:
                spill_path = os.path.join(tmp, "activities.bin")
                with open(spill_path, "wb", buffering=_SPILL_BUFFER) as spill:
                    b.spill = spill
                    scan(stream, b)
                    b.spill = None
                with open(spill_path, "rb") as spill:
                    b.attribute(spill)
        except OSError as exc:
            raise TraceInputError(f"{path}: cannot spill GPU activities to a temporary file "
                                  f"({tempfile.gettempdir()}): {exc.strerror or exc}") from None
        except struct.error:
            raise TraceInputError(f"{path}: a GPU activity's correlation id is beyond 64 bits") from None
        return b.finish(stream)


class _Builder:
    """Collects events into a TraceData, whichever parser found them."""

    def __init__(self, path: str, span_patterns: Mapping[str, re.Pattern], parser: str,
                 keep_calls: Callable[[str, str], bool] | None):
        self.data = TraceData(path=path, parser=parser, kinds={k: KindTotals() for k in span_patterns},
                              cpu_spans={k: [] for k in span_patterns})
        self.span_patterns = list(span_patterns.items())
        self.keep_calls = keep_calls
        self.keep: list[bool] = []  # by name id: keep_calls(name, cat)
        self.spill = None  # the spill file's writer, while the file is scanned
        self._intern: dict = {}

    def gpu_span(self, name: str, ts: float, dur: float) -> None:
        d = self.data
        _count_capped(d.gpu_annotation_names, normalize_annotation(name))
        for kind, regex in self.span_patterns:
            if regex.search(name):
                d.kinds[kind].spans.append((ts, dur, name))

    def name_id(self, key, cat: str, name: str, pid) -> int:
        """The id of a new activity name (the caller looked ``key`` up in ``_intern``)."""
        d = self.data
        nid = self._intern[key] = len(d.names)
        d.names.append(name)
        d.name_cats.append(cat)
        d.activity_pids[pid] += 1
        self.keep.append(bool(self.keep_calls and self.keep_calls(name, cat)))
        for t in d.kinds.values():
            t.total_us.append(0.0)
            t.calls.append(0)
        return nid

    def attribute(self, spill) -> None:
        """Add the spilled activities, in file order, into the kinds whose spans hold
        their start; note the cudaGraphLaunch calls whose kernels were seen."""
        d = self.data
        for t in d.kinds.values():
            t.close_spans()
        live = [(t.starts, t.ends, t.total_us, t.calls, t.kept) for t in d.kinds.values() if t.spans]
        wanted, seen = set(d.graph_launch_corr), d.graph_launches_seen
        keep = self.keep
        if not live and not wanted:
            return
        iter_unpack, read = _SPILL.iter_unpack, spill.read
        while True:
            buf = read(_SPILL_READ)
            if not buf:
                break
            for ts, dur, nid, corr in iter_unpack(buf):
                for starts, ends, total_us, calls, kept in live:
                    j = bisect_right(starts, ts) - 1
                    if j >= 0 and ts < ends[j]:
                        total_us[nid] += dur
                        calls[nid] += 1
                        if keep[nid]:
                            kept.append((ts, dur, nid))
                if corr in wanted:
                    seen.add(corr)

    def cpu_span(self, name: str, ts: float, dur: float) -> None:
        d = self.data
        _count_capped(d.cpu_annotation_names, normalize_annotation(name))
        for kind, regex in self.span_patterns:
            if regex.search(name):
                d.cpu_spans[kind].append((ts, dur, name))

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


def _fast_layout(buf: bytes, m: re.Match) -> _Layout:
    """The layout of the events, from the indents of the first one and from whether the
    first complete event has its keys on one line (torch <= 2.12) or one per line."""
    brace, key = m.group(1), m.group(2)
    x = buf.find(b'"ph": "X"', m.start())
    if x >= 0:
        per_line = buf.startswith(b",\n", x + 9)
    else:  # no complete event in the head: look at the first event's first line
        eol = buf.find(b"\n", m.end())
        per_line = b', "' not in buf[m.end():eol if eol >= 0 else len(buf)]
    if not per_line and brace == b"  " and key == b"    ":
        return _compact_layout()
    if not per_line:
        raise _LayoutMismatch(f"an event's keys on one line with indents {len(brace)}/{len(key)}")
    return _key_per_line_layout(brace, key)


def _fast_pieces(stream: _Stream):
    """The layout and the decompressed text of the traceEvents array, in pieces cut
    between events."""
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
    layout = _fast_layout(buf, m)
    opens = layout.opens
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
            cut = buf.rfind(opens)
            if cut <= 0:
                continue
            piece, buf = buf[:cut], buf[cut:]
        yield layout, piece
        if data_end:
            break
    if stream.total == 0:
        raise TraceInputError(f"{stream.path}: empty file (nothing after decompression)")
    if not stream.tail.rstrip().endswith(b"}"):
        raise _LayoutMismatch("the document does not end with '}'")


def _fast_scan(stream: _Stream, b: _Builder) -> None:
    for layout, piece in _fast_pieces(stream):
        _fast_piece(piece, b, layout)


def _fast_piece(piece: bytes, b: _Builder, layout: _Layout) -> None:
    """Parse the events of interest in one piece with a single regex pass, spill its GPU
    activities, then check that every occurrence of their categories in the piece was
    parsed (one layout per file is assumed; the first event's layout was checked before)."""
    d = b.data
    intern, name_id = b._intern, b.name_id
    pack = _SPILL.pack
    records = []
    record = records.append
    launch = d.graph_launch_corr.append
    kernels = gpu = launches = 0
    args_end = layout.args_end
    for m in layout.event.finditer(piece):
        cat, name, pid, ts, dur, corr = m.groups()
        try:
            tsf, durf = float(ts), float(dur)
        except ValueError:
            raise _LayoutMismatch("non-numeric ts/dur") from None
        if cat == b"kernel" or cat == b"gpu_memcpy" or cat == b"gpu_memset":
            if cat == b"kernel":
                kernels += 1
            else:
                gpu += 1
            nid = intern.get((cat, name))
            if nid is None:
                nid = name_id((cat, name), cat.decode(), _decode_json_string(name), pid)
            record(pack(tsf, durf, nid, int(corr) if corr else _fast_correlation(piece, m.end(), args_end)))
        elif cat == b"gpu_user_annotation":
            gpu += 1
            b.gpu_span(_decode_json_string(name), tsf, durf)
        elif cat == b"user_annotation":
            b.cpu_span(_decode_json_string(name), tsf, durf)
        else:  # cudaGraphLaunch
            launches += 1
            c = int(corr) if corr else _fast_correlation(piece, m.end(), args_end)
            if c >= 0:
                launch(c)
    if (kernels != piece.count(b'"cat": "kernel"') or gpu != piece.count(b'"cat": "gpu_')
            or launches != piece.count(b'"name": "cudaGraphLaunch')):
        raise _LayoutMismatch("an event of interest is laid out differently")
    d.activities += len(records)
    d.kernels += kernels
    b.spill.write(b"".join(records))


def _fast_correlation(piece: bytes, start: int, args_end: bytes) -> int:
    """The ``"correlation"`` in the args of the event whose args start at ``start``, or -1
    (where the layout's regex did not find it at the start of the args)."""
    end = piece.find(args_end, start)
    m = _CORRELATION.search(piece, start, len(piece) if end < 0 else end)
    return int(m.group(1)) if m else -1


def _general_events(stream: _Stream):
    """Every item of traceEvents (any JSON layout), with bad input as TraceInputError."""
    path = stream.path
    n = 0
    try:
        for ev in ijson.items(stream, "traceEvents.item", use_float=True, buf_size=1 << 20):
            n += 1
            yield ev
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


def _x_event(ev: dict):
    """(name, ts, dur) of a complete event, or None where one of them is missing."""
    name, ts, dur = ev.get("name"), ev.get("ts"), ev.get("dur")
    if not isinstance(name, str) or not _is_num(ts) or not _is_num(dur):
        return None
    return name, float(ts), float(dur)


def _general_scan(stream: _Stream, b: _Builder) -> None:
    d = b.data
    pack, write = _SPILL.pack, b.spill.write
    for ev in _general_events(stream):
        if not isinstance(ev, dict):
            d.bad_events += 1
            continue
        cat = ev.get("cat")
        if cat in GPU_ACTIVITY_CATS or cat == "gpu_user_annotation" or cat == "user_annotation":
            if ev.get("ph") != "X":
                continue
            x = _x_event(ev)
            if x is None:
                d.bad_events += 1
                continue
            if cat == "user_annotation":
                b.cpu_span(*x)
            elif cat == "gpu_user_annotation":
                b.gpu_span(*x)
            else:
                name, ts, dur = x
                key = (cat, name)
                nid = b._intern.get(key)
                if nid is None:
                    nid = b.name_id(key, cat, name, str(ev.get("pid")).encode())
                d.activities += 1
                if cat == "kernel":
                    d.kernels += 1
                write(pack(ts, dur, nid, _correlation(ev)))
        elif cat == "cuda_runtime" and str(ev.get("name", "")).startswith("cudaGraphLaunch"):
            corr = _correlation(ev)
            if corr >= 0:
                d.graph_launch_corr.append(corr)


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
