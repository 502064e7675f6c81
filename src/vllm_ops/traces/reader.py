"""Streaming reader for torch.profiler / Kineto Chrome traces (``.json`` or ``.json.gz``).

Each file is decompressed once (with ISA-L's igzip, about three times faster than zlib) and
parsed in one streaming pass. Kineto writes the step annotations (``gpu_user_annotation``)
*after* all kernels, so a kernel cannot be attributed to a step as it streams by; the pass
therefore keeps only what the analysis needs, in compact form:

* every GPU activity (``kernel``, ``gpu_memcpy``, ``gpu_memset``) as one fixed-size record
  (``ts``, ``dur``, activity name id, correlation id: 28 bytes, ``_SPILL``), spilled through
  a buffered writer to an unlinked temporary file (:class:`.spill.Table`); the activity names are
  interned (a table sized by the number of distinct names);
* every kernel launch or copy/set call on the host (``cuda_runtime``/``cuda_driver`` events
  whose names :data:`LAUNCH_NAME` describes: ``cudaLaunchKernel``, ``cuLaunchKernelEx``,
  ``cudaGraphLaunch``, ``hipLaunchKernel``, ``hipGraphLaunch``, ``cudaMemcpyAsync``, ...)
  as ``(ts, correlation)`` (16 bytes, ``_LAUNCH``), spilled the
  same way; graph launches are also listed apart. These attribute a kernel to the CPU
  annotation whose span holds its launch (traces without GPU annotations: ROCm, some CUDA
  set-ups), and give each kernel its launch time. Which API they belong to (``cuda``/``cu``:
  CUDA, ``hip``: HIP) is counted (:attr:`TraceData.launch_apis`);
* the host calls that waited for the GPU, as ``(ts, dur)`` (:attr:`TraceData.host_waits`):
  synchronizing calls (:data:`WAIT_NAME`: ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
  ``hipEventSynchronize``, ...), copies that are not ``Async`` (``cudaMemcpy``: the host waits for
  the copy), and launch calls that took at least :data:`BLOCKED_CALL_US` (a launch returns in
  microseconds unless the launch queue is full, so the host waits for the GPU to drain it; a host
  descheduled during a launch reads the same). A trace has few: they are kept in memory;
* the step annotations, CPU and GPU, that the caller's ``matcher`` recognizes (see
  :mod:`.annotations`), with their ``External id`` (which pairs a GPU span with its CPU
  span), and capped tables of every annotation name seen;
* for the activities whose name ``keep_calls`` selects (the all-reduce kernels), the
  collective's arguments NCCL records: element count, dtype and process group;
* the top-level ``distributedInfo``, ``deviceProperties``, ``baseTimeNanoseconds`` (the offset
  that makes a ``ts`` wall-clock time, so that ranks' files can be told to be of one run) and
  ``vllm_version`` (vLLM stamps its version into the traces it writes).

GPU activities and step annotations with a negative duration cannot be one capture's: both
parsers drop them and count them (:attr:`TraceData.negative_durations`).

The two spills are :class:`.spill.Table` s (unlinked temporary files: nothing is left behind,
however the process ends) that stay on disk: :attr:`TraceData.act_table` and
:attr:`TraceData.launch_table`, which :mod:`.timeline` reads back a bounded chunk at a time
(``spill.CHUNK_ROWS`` records). What a rank costs in memory while it is read is thus one
decompressed chunk (1 MiB) and the spill writers' buffers, the head and tail kept to find
``distributedInfo``, and the small tables: annotation spans and names (sized by steps and
distinct names), graph launches (one per graph replay) and the kept collective calls'
arguments (12 bytes per all-reduce call: its row and the index of its argument triple, kept
once each). Every CPU operator, Python stack frame and flow arrow is dropped as it streams by,
and no other GPU activity or launch call is held in memory at all. :meth:`TraceData.close`
gives the spills' space back (so does garbage collection); :attr:`TraceData.acts` and
:attr:`TraceData.launches` load a whole spill, for tests and small traces only.

Two parsers share one result type:

* the *fast* path exploits the fixed layouts torch's exporter writes: up to torch 2.12
  one event per few lines (``"ph": "X", "cat": "kernel", "name": ...`` on the first line
  of an event); from torch 2.13 (vLLM 0.32) one key per line, in the same key order
  (``json.dump(indent=N)`` of a torch trace reads the same way). It picks the layout
  from the first event (indents; keys on one line or not), parses the interesting events
  with that layout's regular expression over large decompressed chunks, and checks, chunk
  by chunk, that the number of ``"cat": "kernel"`` and ``"cat": "gpu_...`` occurrences
  equals what it parsed; on any disagreement the general parser reads the file instead
  (from the start, with fresh spills). It checks the document's outline (starts with
  ``{``, ends with ``}``) but not the syntax of events it skips.
* the *general* path parses any valid JSON with ijson (yajl2_c backend) and validates
  the whole document. It reads both forms of the Chrome trace format: the object with a
  ``traceEvents`` array, and a bare array of events (the "JSON Array Format").

What is no trace is refused with what was found (:class:`TraceInputError`): an empty capture (no
event at all, or only metadata events: the profiler wrote nothing, a known vLLM issue when the
profiler is started and stopped more than once in one server process), and a ``traceEvents``
that is not an array. A document with neither ``traceEvents`` nor a top-level array is no
Chrome trace at all (:class:`.errors.NotATraceError`, which a directory's reading skips).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import struct
import tempfile
import zlib
from array import array
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import ijson
import numpy as np
from isal import igzip, isal_zlib

from .annotations import StepMatcher, StepName
from .errors import NotATraceError, TraceInputError
from .spill import Table, zip_chunks

GPU_ACTIVITY_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
TRACE_SUFFIXES = (".json", ".json.gz")
RANK_TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")
OWN_OUTPUT = "the file this summary is written to"  # why a directory's file is skipped, said in no warning
# vLLM's API server writes its own CPU-only trace, <host>_<pid>.async_llm.<ns>.pt.trace.json.gz.
FRONTEND_TRACE = re.compile(r"\.async_llm\.")
# 1 MiB of text at a time: its regex pass holds every event of the chunk as Python objects (about
# 7x the text at its peak), so the chunk sets the reader's peak; 4 MiB cost 20 MB more and no less CPU.
CHUNK = 1 << 20
_HEAD_KEEP = 1 << 20
_TAIL_KEEP = 1 << 20
_MAX_DISTINCT_NAMES = 200
# One spilled GPU activity: ts, dur (exact doubles), name id, correlation id (-1: none).
_SPILL = struct.Struct("<ddIq")
ACT_DTYPE = np.dtype([("ts", "<f8"), ("dur", "<f8"), ("nid", "<u4"), ("corr", "<i8")])
# One spilled launch call on the host: ts, correlation id.
_LAUNCH = struct.Struct("<dq")
LAUNCH_DTYPE = np.dtype([("ts", "<f8"), ("corr", "<i8")])
_SPILL_BUFFER = 1 << 20
# Host calls that put work on a GPU stream: names of the CUDA runtime (cuda*), driver (cu*) or
# HIP (hip*) API that go on with Launch, GraphLaunch, ExtLaunch, ModuleLaunch, ExtModuleLaunch,
# Memcpy or Memset (cudaLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch, hipExtModuleLaunchKernel,
# cudaMemcpyAsync, hipMemcpyHtoDAsync, ...). Each alternative starts with a literal, so the fast
# path does not backtrack on the other runtime calls.
LAUNCH_NAME = rb"(?:cuda|cu|hip)(?:Launch|GraphLaunch|ExtLaunch|ModuleLaunch|ExtModuleLaunch|Memcpy|Memset)\w*"
# Host calls that wait for the GPU by their nature: the synchronizing calls of the three APIs.
WAIT_NAME = rb"(?:cuda|cu|hip)(?:Stream|Device|Event|Ctx)Synchronize\w*"
# A launch call at least this long (µs) waited for the GPU (a full launch queue): see the docstring.
BLOCKED_CALL_US = 1000.0
_HOST_CALL_NAME = rb"(?:" + LAUNCH_NAME + rb"|" + WAIT_NAME + rb")"
_GRAPH_LAUNCH = re.compile(r"^(?:cuda|cu|hip)GraphLaunch")
_LAUNCH_NAME = re.compile(LAUNCH_NAME.decode())
_WAIT_NAME = re.compile(WAIT_NAME.decode())

# Where the events start, with the indents of an event's brace and of its keys.
_FAST_START = re.compile(rb'"traceEvents"\s*:\s*\[[ \t]*(?:\n[ \t]*)*?\n( *)\{\n( *)"')
_FAST_CATS = rb"kernel|gpu_memcpy|gpu_memset|gpu_user_annotation|user_annotation"


@dataclass(frozen=True)
class _Layout:
    """One of the layouts the fast path parses: the regex for an event of interest and the
    text that opens an event (pieces are cut before it)."""

    event: re.Pattern
    opens: bytes


def _compact_layout() -> _Layout:
    """torch <= 2.12: ``"ph": "X", "cat": ..., "name": ..., "pid": ..., "tid": ...`` on the
    first line of an event, ``ts`` and ``dur`` on the second, the args on one line."""
    return _Layout(re.compile(
        rb'\n    "ph": "X", "cat": "(' + _FAST_CATS +
        rb'|cuda_(?:runtime|driver)(?=", "name": "' + _HOST_CALL_NAME + rb'"))", "name": "([^"\\]*(?:\\.[^"\\]*)*)", '
        rb'"pid": ([^,\n]*), "tid": [^,\n]*,\n    "ts": ([^,\n]*), "dur": ([^,\n]*),\n    "args": \{\n'
        rb'(?=([^}]*))'  # the args (up to their first '}'; one line in torch 2.x, several in 1.x)
        rb'[ \t]*(?:"External id": (\d+))?'
        rb'(?:,[^\n]*"correlation": (\d+))?'
    ), b"\n  {")


def _key_per_line_layout(brace: bytes, key: bytes) -> _Layout:
    """One key per line, in torch's order (ph, cat, name, pid, tid, ts, dur, args): what
    torch 2.13 writes (``"dur": ...`` then ``,`` on a line of its own before ``"args"``;
    braces indented 2, keys 4), and also ``json.dump(indent=N)`` of a torch trace."""
    k = rb"\n" + key
    return _Layout(re.compile(
        k + rb'"ph": "X",' + k + rb'"cat": "(' + _FAST_CATS +
        rb'|cuda_(?:runtime|driver)(?=",' + k + rb'"name": "' + _HOST_CALL_NAME + rb'"))",' + k +
        rb'"name": "([^"\\]*(?:\\.[^"\\]*)*)",' + k + rb'"pid": ([^,\n]*),' + k + rb'"tid": [^,\n]*,' + k +
        rb'"ts": ([^,\n]*),' + k + rb'"dur": ([^,\n]*?)(?:' + k + rb')?,' + k + rb'"args": \{\n'
        rb'(?=([^}]*))'  # the args (up to their first '}'), for what the groups below miss
        rb'[ \t]*(?:"External id": (\d+))?'
        rb'(?:,[^}]*"correlation": (\d+))?'
    ), b"\n" + brace + b"{")


_CORRELATION = re.compile(rb'"correlation": (\d+)')
_EXTERNAL_ID = re.compile(rb'"External id": (\d+)')
_NELEMS = re.compile(rb'"In msg nelems": (\d+)')
_DTYPE = re.compile(rb'"dtype": "([^"]*)"')
_GROUP = re.compile(rb'"Process Group Name": "([^"]*)"')
_DIGITS = re.compile(r"\d+")
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


class _LayoutMismatch(Exception):
    """The fast path met something outside torch's layout: use the general parser."""


@dataclass(frozen=True)
class Span:
    """One step annotation: where it is, its name, what the name says, and its External id
    (which the CPU ``user_annotation`` and its GPU projection share; -1: none)."""

    ts: float
    dur: float
    name: str
    step: StepName
    ext: int = -1


@dataclass
class TraceData:
    """What one rank's file contributes to the summary: small tables, the step spans, and
    the GPU activities and host launch calls as tables on disk (``ACT_DTYPE``,
    ``LAUNCH_DTYPE``, in file order; :mod:`.spill`). Close it (or use it as a context
    manager) to give the tables' disk space back."""

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
    gpu_spans: list[Span] = field(default_factory=list)  # step annotations on the GPU, file order
    cpu_spans: list[Span] = field(default_factory=list)  # step annotations on the CPU, file order
    gpu_annotation_names: Counter = field(default_factory=Counter)
    cpu_annotation_names: Counter = field(default_factory=Counter)
    graph_launches: list[tuple[float, int]] = field(default_factory=list)  # (ts, correlation)
    host_waits: list[tuple[float, float]] = field(default_factory=list)  # (ts, dur): host calls that waited
    launch_apis: Counter = field(default_factory=Counter)  # "CUDA" / "HIP" -> launch calls
    vllm_version: str | None = None  # the trace's top-level vllm_version (vLLM stamps it)
    base_time_ns: int | None = None  # top-level baseTimeNanoseconds: ts + base / 1000 is wall-clock µs
    nccl_version: str | None = None  # distributedInfo.nccl_version
    # The kept collective calls: activity rows (file order) and, for each, its index into
    # collective_kinds, the distinct (element count, dtype, process group) triples: 12 bytes a call.
    collective_rows: array = field(default_factory=lambda: array("q"))
    collective_ids: array = field(default_factory=lambda: array("i"))
    collective_kinds: list[tuple[int | None, str | None, str | None]] = field(default_factory=list)
    process_groups: dict[str, int] = field(default_factory=dict)  # distributedInfo.pg_config: name -> size
    act_table: Table | None = None  # the GPU activities, ACT_DTYPE, file order
    launch_table: Table | None = None  # the host launch calls, LAUNCH_DTYPE, file order
    bad_events: int = 0
    negative_durations: int = 0  # GPU activities and step annotations with dur < 0: dropped

    def close(self) -> None:
        for t in (self.act_table, self.launch_table):
            if t is not None:
                t.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def acts(self) -> np.ndarray:
        """Every GPU activity, loaded whole (tests and small traces; the summary streams)."""
        return self.act_table.load() if self.act_table is not None else np.zeros(0, ACT_DTYPE)

    @property
    def launches(self) -> np.ndarray:
        """Every launch call, loaded whole (tests and small traces; the summary streams)."""
        return self.launch_table.load() if self.launch_table is not None else np.zeros(0, LAUNCH_DTYPE)

    @property
    def collective_args(self) -> dict[int, tuple[int | None, str | None, str | None]]:
        """Activity row -> (element count, dtype, process group) of each kept collective call."""
        kinds = self.collective_kinds
        return {row: kinds[k] for row, k in zip(self.collective_rows, self.collective_ids, strict=True)}

    def collective_args_at(self, rows: np.ndarray) -> list[tuple[int | None, str | None, str | None]]:
        """The arguments of the calls at activity ``rows``, (None, None, None) where none were kept."""
        kept = np.frombuffer(self.collective_rows, np.int64) if self.collective_rows else np.zeros(0, np.int64)
        rows = np.asarray(rows, np.int64)
        at = np.minimum(np.searchsorted(kept, rows), max(len(kept) - 1, 0))
        hit = (kept[at] == rows) if len(kept) else np.zeros(len(rows), bool)
        kinds, ids, none = self.collective_kinds, self.collective_ids, (None, None, None)
        return [kinds[ids[a]] if h else none for a, h in zip(at.tolist(), hit.tolist(), strict=True)]

    @property
    def graph_launch_corr(self) -> list[int]:
        return [c for _, c in self.graph_launches]

    @property
    def graph_launches_without_activity(self) -> int:
        """Graph launches whose correlation no recorded GPU activity carries: their kernels
        are missing from the trace."""
        if not self.graph_launches or self.act_table is None:
            return len(self.graph_launches)
        corr = np.array(self.graph_launch_corr, np.int64)
        seen = np.zeros(len(corr), bool)
        for _, acts in zip_chunks(self.act_table):
            seen |= np.isin(corr, acts["corr"])
        return int((~seen).sum())


def rank_from_filename(path: str) -> int | None:
    """``...rank3.123.pt.trace.json.gz`` -> 3 (the last ``rank{N}`` in the file name)."""
    hits = _RANK_IN_NAME.findall(os.path.basename(path))
    return int(hits[-1]) if hits else None


def normalize_annotation(name: str) -> str:
    """Collapse digits so per-step names group: ``execute_context_0(0)_generation_5(5)``
    -> ``execute_context_N(N)_generation_N(N)``."""
    return _DIGITS.sub("N", name)[:160]


def find_trace_files(paths: list[str] | str) -> list[str]:
    """The files :func:`find_rank_traces` reads (directories expanded), in order."""
    return find_rank_traces(paths)[0]


def find_rank_traces(paths: list[str] | str, exclude: frozenset = frozenset()) -> tuple[list[str], list[dict], set]:
    """Expand directories into the rank traces they hold; keep files as given.

    A directory holds rank traces: where it has files named ``*.pt.trace.json[.gz]`` (what
    torch.profiler writes), those and the ``*.json[.gz]`` files with ``rank{N}`` in the name are
    its traces, sorted; vLLM's front-end trace (:data:`FRONTEND_TRACE`, the API server's own CPU
    trace, written beside the ranks') is skipped, and so is any other file there (a previous
    summary, notes). Where it has none of those, every ``*.json``/``*.json.gz`` file in it is a
    trace. ``exclude`` holds ``(st_dev, st_ino)`` of files never to read (the summary being
    written): a directory skips them, a path given by name that is one of them is an error.

    Returns ``(files, skipped, to_prove)``: the files to read, ``[{file, why}]`` for the files
    a directory held that are not read, and the files read from a directory of rank traces
    that have no rank in their name: each must prove to be one with its ``distributedInfo``
    (:mod:`.summary` skips it otherwise)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not paths:
        raise TraceInputError("no trace paths given")
    files: list[str] = []
    skipped: list[dict] = []
    to_prove: set[str] = set()
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            found = sorted(
                os.path.join(p, f) for f in os.listdir(p)
                if f.endswith(TRACE_SUFFIXES) and os.path.isfile(os.path.join(p, f))
            )
            mine = [f for f in found if file_id(f) in exclude]
            skipped += [{"file": f, "why": OWN_OUTPUT} for f in mine]
            found = [f for f in found if f not in mine]
            if not found:
                raise TraceInputError(f"{p}: directory holds no trace files (*.json, *.json.gz)")
            ranked = [f for f in found if f.endswith(RANK_TRACE_SUFFIXES) or rank_from_filename(f) is not None]
            if not any(f.endswith(RANK_TRACE_SUFFIXES) for f in found):
                ranked = []  # no torch.profiler file names here: every JSON file is a trace
            here = []
            for f in found if ranked else []:
                if FRONTEND_TRACE.search(os.path.basename(f)):
                    skipped.append({"file": f, "why": "vLLM's front-end (API server) trace: CPU only, no rank"})
                elif f not in ranked:
                    skipped.append({"file": f, "why": "not a rank trace (*.pt.trace.json[.gz], or rank{N} in the "
                                                      "name), in a directory of rank traces"})
                else:
                    here.append(f)
                    if rank_from_filename(f) is None:
                        to_prove.add(f)
            if ranked and not here:
                raise TraceInputError(f"{p}: directory holds no rank traces (only "
                                      f"{', '.join(os.path.basename(x['file']) for x in skipped[-3:])})")
            files.extend(here if ranked else found)
        elif os.path.exists(p):
            if file_id(p) in exclude:
                raise TraceInputError(f"{p}: is the file this summary is being written to")
            files.append(p)
        else:
            raise TraceInputError(f"{p}: no such file or directory")
    return files, skipped, to_prove


def file_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class _Stream:
    """Decompressed bytes of a trace file in chunks, remembering its head and tail."""

    def __init__(self, path: str):
        self.path = path
        self.head = b""
        self._recent: list[bytes] = []
        self._recent_len = 0
        self.total = 0
        self._pending: list[bytes] = []  # read ahead by first_byte, returned by read first
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
            self._fh = igzip.open(self.path, "rb") if self.gzipped else open(self.path, "rb")
        except OSError as exc:
            raise TraceInputError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        return self

    def __exit__(self, *exc):
        self._fh.close()

    def first_byte(self) -> bytes:
        """The document's first non-blank byte (b"" for none), read ahead and kept for ``read``."""
        while True:
            data = self.read()
            if not data:
                return b""
            self._pending.append(data)
            text = data.lstrip()
            if text:
                return text[:1]

    def read(self, size: int | None = None) -> bytes:
        if size == 0:  # ijson probes with read(0) for the type of data
            return b""
        if self._pending:
            return self._pending.pop(0)
        try:
            data = self._fh.read(size if size and size > 0 else CHUNK)
        except EOFError:
            raise TraceInputError(
                f"{self.path}: truncated gzip (the compressed data ends before the end-of-stream marker)"
            ) from None
        except gzip.BadGzipFile as exc:
            raise TraceInputError(f"{self.path}: corrupt gzip: {exc}") from None
        except (zlib.error, isal_zlib.error) as exc:
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


def read_trace(path: str, matcher: StepMatcher | None = None, parser: str = "auto",
               keep_calls: Callable[[str, str], bool] | None = None) -> TraceData:
    """Read one trace file (one pass and two spill files, see the module's docstring).

    ``matcher`` decides which annotation names are steps (default: :class:`StepMatcher`
    with vLLM's families). ``keep_calls(name, cat)`` selects the activity names whose
    collective arguments are kept (``TraceData.collective_args``). ``parser`` is ``"auto"``
    (fast path, general fallback), ``"fast"`` (fail rather than fall back; for tests) or
    ``"general"``.
    """
    matcher = matcher or StepMatcher()
    if parser not in ("auto", "fast", "general"):
        raise TraceInputError(f"unknown parser {parser!r} (auto, fast or general)")
    if parser != "general":
        try:
            return _read(path, matcher, keep_calls, "fast", _fast_scan)
        except _LayoutMismatch as exc:
            if parser == "fast":
                raise TraceInputError(f"{path}: not in torch's exporter layout ({exc})") from None
    return _read(path, matcher, keep_calls, "general", _general_scan)


def _read(path, matcher, keep_calls, parser, scan) -> TraceData:
    b = _Builder(path, matcher, parser, keep_calls)
    tables: list[Table] = []
    try:
        with _Stream(path) as stream:
            # _Stream turns its own OSErrors into TraceInputError: what is left is the spill's.
            try:
                acts = Table(ACT_DTYPE)
                tables.append(acts)
                launches = Table(LAUNCH_DTYPE)
                tables.append(launches)
                with acts.writer(_SPILL_BUFFER) as spill, launches.writer(_SPILL_BUFFER) as launch_spill:
                    b.spill, b.launch_spill = spill, launch_spill
                    scan(stream, b)
                    b.spill = b.launch_spill = None
                acts.sync_rows()
                launches.sync_rows()
            except OSError as exc:
                raise TraceInputError(f"{path}: cannot spill GPU activities to a temporary file "
                                      f"({tempfile.gettempdir()}): {exc.strerror or exc}") from None
            except struct.error:
                raise TraceInputError(f"{path}: a correlation id is beyond 64 bits") from None
            b.data.act_table, b.data.launch_table = acts, launches
            return b.finish(stream)
    except BaseException:
        for t in tables:
            t.close()
        raise


class _Builder:
    """Collects events into a TraceData, whichever parser found them."""

    def __init__(self, path: str, matcher: StepMatcher, parser: str,
                 keep_calls: Callable[[str, str], bool] | None):
        self.data = TraceData(path=path, parser=parser)
        self.matcher = matcher
        self.keep_calls = keep_calls
        self.keep: list[bool] = []  # by name id: keep_calls(name, cat)
        self.spill = None  # the spill files' writers, while the file is scanned
        self.launch_spill = None
        self._intern: dict = {}
        self._span_names: dict = {}  # annotation name -> (normalized, StepName or None)
        self.coll_intern: dict = {}  # distinct collective-argument triple -> its index in collective_kinds

    def span(self, gpu: bool, name: str | bytes, ts: float, dur: float, ext: int) -> None:
        """A CPU or GPU annotation; ``name`` as the JSON text has it (bytes) or decoded."""
        d = self.data
        known = self._span_names.get(name)
        if known is None:
            text = _decode_json_string(name) if isinstance(name, bytes) else name
            if len(self._span_names) >= 4096:  # detailed step names differ step by step
                self._span_names.clear()
            known = self._span_names[name] = (text, normalize_annotation(text), self.matcher(text))
        _count_capped(d.gpu_annotation_names if gpu else d.cpu_annotation_names, known[1])
        if known[2] is not None:
            (d.gpu_spans if gpu else d.cpu_spans).append(Span(ts, dur, known[0], known[2], ext))

    def name_id(self, key, cat: str, name: str, pid) -> int:
        """The id of a new activity name (the caller looked ``key`` up in ``_intern``)."""
        d = self.data
        nid = self._intern[key] = len(d.names)
        d.names.append(name)
        d.name_cats.append(cat)
        d.activity_pids[pid] += 1
        self.keep.append(bool(self.keep_calls and self.keep_calls(name, cat)))
        return nid

    def collective(self, row: int, args: tuple[int | None, str | None, str | None]) -> None:
        """Keep the arguments of the collective call at activity ``row``."""
        d = self.data
        k = self.coll_intern.get(args)
        if k is None:
            k = self.coll_intern[args] = len(d.collective_kinds)
            d.collective_kinds.append(args)
        d.collective_rows.append(row)
        d.collective_ids.append(k)

    def finish(self, stream: _Stream) -> TraceData:
        d = self.data
        info = _top_level_value(stream, "distributedInfo")
        if isinstance(info, dict):
            rank, world = info.get("rank"), info.get("world_size")
            d.rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
            d.world_size = world if isinstance(world, int) and not isinstance(world, bool) else None
            nccl = info.get("nccl_version")
            d.nccl_version = nccl if isinstance(nccl, str) else None
            for pg in info.get("pg_config") or []:
                if isinstance(pg, dict) and isinstance(pg.get("pg_size"), int):
                    d.process_groups[str(pg.get("pg_name"))] = pg["pg_size"]
        base = _top_level_value(stream, "baseTimeNanoseconds")
        d.base_time_ns = base if isinstance(base, int) and not isinstance(base, bool) else None
        version = _top_level_value(stream, "vllm_version")
        d.vllm_version = version if isinstance(version, str) else None
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
    d = b.data
    if not (d.activities or d.kernels or d.gpu_annotation_names or d.cpu_annotation_names or d.launch_apis
            or d.host_waits):
        raise _LayoutMismatch("nothing the summary reads: the general parser says what the file holds")


_ACTIVITY, _SPAN_GPU, _SPAN_CPU, _LAUNCH_CALL = 0, 1, 2, 3
_KIND = {b"kernel": _ACTIVITY, b"gpu_memcpy": _ACTIVITY, b"gpu_memset": _ACTIVITY,
         b"gpu_user_annotation": _SPAN_GPU, b"user_annotation": _SPAN_CPU,
         b"cuda_runtime": _LAUNCH_CALL, b"cuda_driver": _LAUNCH_CALL}
_GRAPH_NAMES = (b"cudaGraphLaunch", b"cuGraphLaunch", b"hipGraphLaunch")
_API = {b"c": "CUDA", b"h": "HIP"}


def _waited(name: str | bytes, dur: float) -> bool:
    """Whether a launch, copy or set call waited for the GPU (see the module docstring)."""
    if dur >= BLOCKED_CALL_US:
        return True
    if isinstance(name, bytes):
        return b"Memcpy" in name and b"Async" not in name
    return "Memcpy" in name and "Async" not in name


def _fast_piece(piece: bytes, b: _Builder, layout: _Layout) -> None:
    """Parse the events of interest in one piece with a single regex pass, spill its GPU
    activities and launch calls, then check that every occurrence of the GPU categories in
    the piece was parsed (one layout per file is assumed; the first event's layout was
    checked before)."""
    d = b.data
    intern, name_id, keep = b._intern, b.name_id, b.keep
    pack, pack_launch = _SPILL.pack, _LAUNCH.pack
    records, launches = [], []
    record, launch = records.append, launches.append
    graph = d.graph_launches.append
    kernels = gpu = 0
    negative = negative_kernels = 0
    waits, apis = d.host_waits, d.launch_apis
    row = d.activities
    kind_of = _KIND
    span_names, gpu_names, cpu_names = b._span_names, d.gpu_annotation_names, d.cpu_annotation_names
    try:
        for cat, name, pid, ts, dur, args, ext, corr in layout.event.findall(piece):
            kind = kind_of[cat]
            if kind == _LAUNCH_CALL:
                t, du = float(ts), float(dur)
                if b"Synchronize" in name:
                    waits.append((t, du))
                    continue
                apis[_API.get(name[:1], "CUDA")] += 1
                if _waited(name, du):
                    waits.append((t, du))
                c = int(corr) if corr else _arg(args, _CORRELATION)
                if c >= 0:
                    launch(pack_launch(t, c))
                    if name.startswith(_GRAPH_NAMES):
                        graph((t, c))
            elif kind == _ACTIVITY:
                if cat == b"kernel":
                    kernels += 1
                else:
                    gpu += 1
                du = float(dur)
                if du < 0:
                    negative += 1
                    negative_kernels += cat == b"kernel"
                    continue
                nid = intern.get((cat, name))
                if nid is None:
                    nid = name_id((cat, name), cat.decode(), _decode_json_string(name), pid)
                record(pack(float(ts), du, nid, int(corr) if corr else _arg(args, _CORRELATION)))
                if keep[nid]:
                    b.collective(row + len(records) - 1, _collective(args))
            else:
                is_gpu = kind == _SPAN_GPU
                gpu += is_gpu
                du = float(dur)
                if du < 0:
                    negative += 1
                    continue
                known = span_names.get(name)
                if known is not None and known[2] is None:  # seen before, not a step: count it only
                    counter = gpu_names if is_gpu else cpu_names
                    if known[1] in counter or len(counter) < _MAX_DISTINCT_NAMES:
                        counter[known[1]] += 1
                    continue
                b.span(is_gpu, name, float(ts), du, int(ext) if ext else _arg(args, _EXTERNAL_ID))
    except ValueError:
        raise _LayoutMismatch("non-numeric ts/dur") from None
    if kernels != piece.count(b'"cat": "kernel"') or gpu != piece.count(b'"cat": "gpu_'):
        raise _LayoutMismatch("an event of interest is laid out differently")
    d.activities += len(records)
    d.kernels += kernels - negative_kernels
    d.negative_durations += negative
    b.spill.write(b"".join(records))
    b.launch_spill.write(b"".join(launches))


def _arg(args: bytes, regex: re.Pattern) -> int:
    """An integer argument (``regex``'s group) of an event's args text, or -1 (where the layout's
    regex did not find it at the start of the args)."""
    m = regex.search(args)
    return int(m.group(1)) if m else -1


def _collective(args: bytes) -> tuple[int | None, str | None, str | None]:
    """(element count, dtype, process group) from a collective kernel's args text, None where absent."""
    nelems, dtype, group = (r.search(args) for r in (_NELEMS, _DTYPE, _GROUP))
    return (int(nelems.group(1)) if nelems else None, _decode_json_string(dtype.group(1)) if dtype else None,
            _decode_json_string(group.group(1)) if group else None)


# What the general parser found of the document's outline (see _general_events).
_EMPTY_CAPTURE = ("the profiler wrote no events{what}: a known vLLM issue when the profiler is started and stopped "
                  "more than once in one server process; restart the server (or its profiling variant) and capture "
                  "again")


def _general_events(stream: _Stream, counts: dict | None = None):
    """Every item of traceEvents, or of a bare top-level array of events (any JSON layout), with
    bad input as TraceInputError; ``counts["events"]`` and ``["metadata"]`` (``ph: M``) are kept."""
    path = stream.path
    counts = counts if counts is not None else {}
    counts.update(events=0, metadata=0)
    n = 0
    first = stream.first_byte()
    prefix = "item" if first == b"[" else "traceEvents.item"
    try:
        for ev in ijson.items(stream, prefix, use_float=True, buf_size=1 << 20):
            n += 1
            if isinstance(ev, dict) and ev.get("ph") == "M":
                counts["metadata"] += 1
            yield ev
    except ijson.common.IncompleteJSONError as exc:
        if stream.total == 0:
            raise TraceInputError(f"{path}: empty file (nothing after decompression)") from None
        msg = " ".join(str(exc).split())
        kind = "truncated JSON" if "incomplete" in msg.lower() or "premature" in msg.lower() else "invalid JSON"
        raise TraceInputError(f"{path}: {kind}: {msg[:200]}") from None
    except ijson.common.JSONError as exc:
        raise TraceInputError(f"{path}: invalid JSON: {' '.join(str(exc).split())[:200]}") from None
    counts["events"] = n
    if n == 0 and first == b"[":
        raise TraceInputError(f"{path}: {_EMPTY_CAPTURE.format(what=' (an empty array of events)')}")
    if n == 0:
        kind = _events_type(path)
        if kind is None:
            raise NotATraceError(f"{path}: no traceEvents array (and no top-level array of events): not a "
                                 "torch.profiler/Chrome trace")
        if kind == "start_array":
            raise TraceInputError(f"{path}: {_EMPTY_CAPTURE.format(what=' (traceEvents is an empty array)')}")
        raise TraceInputError(f"{path}: traceEvents is {_JSON_KIND.get(kind, kind)}, not an array of events: not a "
                              "Chrome trace, or a damaged one; capture it again")
    if n == counts["metadata"]:
        raise TraceInputError(f"{path}: " + _EMPTY_CAPTURE.format(
            what=f" but {n} metadata events (process and thread names), no activity or annotation"))


_JSON_KIND = {"start_map": "an object", "string": "a string", "number": "a number", "boolean": "a boolean",
              "null": "null"}


def _events_type(path: str) -> str | None:
    """The ijson event that opens the document's top-level ``traceEvents`` value (``start_array``,
    ``start_map``, ``number``...), None where the document has none. Read only for a document in
    which no event was found, so its cost does not matter."""
    with _Stream(path) as stream:
        try:
            for prefix, event, _value in ijson.parse(stream, use_float=True):
                if prefix == "traceEvents" and event != "map_key":
                    return event
        except ijson.common.JSONError:
            return None
    return None


def _x_event(ev: dict):
    """(name, ts, dur) of a complete event, or None where one of them is missing."""
    name, ts, dur = ev.get("name"), ev.get("ts"), ev.get("dur")
    if not isinstance(name, str) or not _is_num(ts) or not _is_num(dur):
        return None
    return name, float(ts), float(dur)


def _general_scan(stream: _Stream, b: _Builder) -> None:
    d = b.data
    pack, write = _SPILL.pack, b.spill.write
    pack_launch, write_launch = _LAUNCH.pack, b.launch_spill.write
    for ev in _general_events(stream, {}):
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
            if x[2] < 0:
                d.negative_durations += 1
                continue
            if cat == "user_annotation" or cat == "gpu_user_annotation":
                b.span(cat == "gpu_user_annotation", *x, _int_arg(ev, "External id"))
            else:
                name, ts, dur = x
                key = (cat, name)
                nid = b._intern.get(key)
                if nid is None:
                    nid = b.name_id(key, cat, name, str(ev.get("pid")).encode())
                if b.keep[nid]:
                    args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
                    nelems, dtype, group = args.get("In msg nelems"), args.get("dtype"), args.get("Process Group Name")
                    t = (nelems if _is_num(nelems) else None, dtype if isinstance(dtype, str) else None,
                         group if isinstance(group, str) else None)
                    b.collective(d.activities, t)
                d.activities += 1
                if cat == "kernel":
                    d.kernels += 1
                write(pack(ts, dur, nid, _int_arg(ev, "correlation")))
        elif (cat == "cuda_runtime" or cat == "cuda_driver") and ev.get("ph") == "X":
            name, ts, dur = ev.get("name"), ev.get("ts"), ev.get("dur")
            if not isinstance(name, str) or not _is_num(ts):
                continue
            if _WAIT_NAME.fullmatch(name):
                if _is_num(dur):
                    d.host_waits.append((float(ts), float(dur)))
                continue
            if _LAUNCH_NAME.fullmatch(name):
                d.launch_apis["HIP" if name.startswith("hip") else "CUDA"] += 1
                if _is_num(dur) and _waited(name, float(dur)):
                    d.host_waits.append((float(ts), float(dur)))
                corr = _int_arg(ev, "correlation")
                if corr >= 0:
                    write_launch(pack_launch(float(ts), corr))
                    if _GRAPH_LAUNCH.match(name):
                        d.graph_launches.append((float(ts), corr))


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _int_arg(ev: dict, key: str) -> int:
    """A non-negative integer argument of an event (``correlation``, ``External id``), or -1."""
    args = ev.get("args")
    if isinstance(args, dict):
        c = args.get(key)
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
