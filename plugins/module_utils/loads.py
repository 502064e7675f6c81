"""What one model load is made of, read from the lines vLLM 0.32 logs while it loads, and how it
compares with the disk's floor.

Shared by the hosts and the controller: the health wait (the collection's ``vllm_wait_healthy``
module) imports this file from its module_utils and returns its record, the watch runs it beside
itself, and the reports read that record back from ``job.json`` with it (``vllm_ops_host.loads``:
the package maps the collection's module_utils). So it imports only the standard library, nothing of
``vllm_ops``, and runs on Python 3.9 (ruff's per-file target and a unit test check both).

**Input**: the load's lines, oldest first, each ``(t, text)`` with ``t`` the second the line was
written (the journal's receive time; None when unknown), and ``t0``, the process's start (systemd's
``ExecMainStartTimestamp``). tqdm's carriage returns split a line into several.

**Milestones** (:data:`MILESTONES`, one entry each; a new vLLM line is one more entry): a line that
ends a phase. A milestone's time is its *last* line before the first ``ready`` line (each rank logs
its own "Loading weights took"; the slowest ends the phase), except ``load_start``'s, its first.

**Phases** (:data:`PHASES`, in load order), each the span from the previous milestone found (``t0``
for the first) to its own:

- ``start``: the process's start to ``Starting to load model``: Python, the config, the engine's and
  the workers' processes, the distributed set-up;
- ``weights``: to ``Loading weights took``: the checkpoint read, tensor by tensor;
- ``post_load``: to ``Model loading took``: what follows the read (the INT4 weights repacked for
  the Marlin kernels, the model moved into place); the CPU build logs no such line;
- ``compile``: to ``torch.compile took ... in total`` (the CPU build: ``Warming up done.``): Dynamo
  and Inductor, or the compile cache read back;
- ``kv_cache``: to ``KV cache size: N tokens``: the profiling run and the KV cache's sizing;
- ``cuda_graphs``: to ``Graph capturing finished``;
- ``engine_init``: to ``init engine (profile, create kv cache, warmup model) took``: the rest of the
  engine's start (warm-up);
- ``api_start``: to ``Application startup complete.``: the API server's own start once the engine is up.

A phase whose milestone was not logged is **not measured** (never estimated): its time lies in the
next phase measured, which names it in ``includes``. Without timestamps a phase has only the
seconds vLLM states (``stated_s``: "Loading weights took 1741.90 seconds"); ``seconds`` is then null.
**total_s** = ``t0`` to ``ready`` (null when the load never got there); the phases measured sum to it.
A load that did not reach ``ready`` names the phase it stopped in (``failed_in``: the one after the
last milestone found).

**Weights**: ``bytes`` = the checkpoint's size (the files the caller measured, else vLLM's own
"Checkpoint size: X GiB"); ``seconds`` = vLLM's stated weights time (else the phase's span);
``gbps`` = bytes / seconds / 1e9: the rate the load read its checkpoint at. ``shards`` and
``loader`` from tqdm's bar; ``load_format`` from the ``non-default args`` line (``auto`` when absent).

**Against the disk** (:func:`against_disk`): the disk's floor is what the host's disk reads the
checkpoint's files at (the ``vllm_disk`` role measures it, bounded, while the service serves);
``ratio`` = weights gbps / disk gbps. At or above :data:`DISK_BOUND_RATIO` the weights phase reads
as fast as the disk can (**disk-bound**: a faster loader cannot help, reading less or from the page
cache can); below it, it is **not disk-bound** (the time goes to the loader's own work); above
:data:`CACHED_RATIO` it read faster than the disk can (**page cache**: the checkpoint was cached).
Unknown when either figure is missing. A verdict is data (``{bound, evidence}``); :func:`load_words` and
:func:`disk_words` put records in words.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections import namedtuple
from datetime import datetime, timezone

SCHEMA = 1
TOOL = "vllm_ops.loads"
DISK_BOUND_RATIO = 0.7  # the weights' rate at 70% of the disk's floor or more: the read is the bound
CACHED_RATIO = 1.25  # well above the disk's floor: the checkpoint came from the page cache, not the disk
GB = 1e9

Milestone = namedtuple("Milestone", "name patterns")
Phase = namedtuple("Phase", "name milestone words")

# vLLM 0.32's lines (GPU model runner, and the CPU build where it differs), matched with re.search.
MILESTONES = (
    Milestone("load_start", (r"Starting to load model (?P<model>.+?)\.\.\.",)),
    Milestone("weights", (r"Loading weights took (?P<s>[\d.]+) seconds",)),
    Milestone("model", (r"Model loading took (?P<gib>[\d.]+) GiB memory and (?P<s>[\d.]+) seconds",)),
    Milestone("compile", (r"torch\.compile took (?P<s>[\d.]+) s in total",
                          r"torch\.compile and initial profiling/warmup run together took (?P<s>[\d.]+) s in total",
                          r"\] Warming up done\.")),
    Milestone("kv", (r"(?P<device>[A-Z]+) KV cache size: (?P<tokens>[\d,]+) tokens",)),
    Milestone("graphs", (r"Graph capturing finished in (?P<s>[\d.]+) secs?, took (?P<gib>[\d.]+) GiB",)),
    Milestone("engine", (r"init engine \(profile, create kv cache, warmup model\) took (?P<s>[\d.]+) s",)),
    Milestone("ready", (r"Application startup complete\.",)),
)
PHASES = (
    Phase("start", "load_start", "start"),
    Phase("weights", "weights", "weights"),
    Phase("post_load", "model", "post-load"),
    Phase("compile", "compile", "compile"),
    Phase("kv_cache", "kv", "KV cache"),
    Phase("cuda_graphs", "graphs", "CUDA graphs"),
    Phase("engine_init", "engine", "engine warm-up"),
    Phase("api_start", "ready", "API start"),
)
PHASE_NAMES = tuple(p.name for p in PHASES)

# Facts read on the way, not milestones: (name, pattern); the last match wins unless noted.
FACTS = (
    ("version", r"Initializing a V1 LLM engine \(v(?P<v>[^)\s]+)\)"),
    ("checkpoint", r"Filesystem type for checkpoints: (?P<fs>\S+)\. Checkpoint size: (?P<gib>[\d.]+) GiB\. "
                   r"Available RAM: (?P<ram>[\d.]+) GiB\."),
    ("args", r"non-default args: (?P<args>\{.*\})"),
    ("kv_memory", r"Available KV cache memory: (?P<gib>[\d.]+) GiB"),
    ("profile_run", r"Initial profiling/warmup run took (?P<s>[\d.]+) s"),
    ("cache_hit", r"Directly load (?:the compiled graph\(s\)|AOT compilation)"),
    ("cache_miss", r"Compiling a graph for compile range|saved AOT compiled function|Cache the graph of compile range"),
    ("cache_off", r"vLLM's torch\.compile cache is disabled"),
    ("server", r"Starting vLLM server on (?P<url>\S+)"),
)
# tqdm's bar of vLLM's loaders ("Loading safetensors checkpoint shards", "... (eager)", "Loading safetensors
# using Runai Model Streamer", "Multi-thread loading shards", ...).
PROGRESS = re.compile(r"(?P<desc>(?:Loading|Multi-thread loading) [^:|\r\n]*?):\s+(?P<pct>\d+)% Completed \|\s*"
                      r"(?P<n>\d+)/(?P<total>\d+)")
LOAD_FORMAT = re.compile(r"'load_format': '(?P<fmt>[^']+)'")

# The weight files of a checkpoint directory, as vLLM's default loader picks them: the first pattern that has any.
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")

_MILESTONES = [(m.name, [re.compile(p) for p in m.patterns]) for m in MILESTONES]
_FACTS = [(name, re.compile(p)) for name, p in FACTS]


def weight_files(directory):
    """The checkpoint's weight files in ``directory`` (sorted), by the first of :data:`WEIGHT_PATTERNS` that
    matches any: what a load reads, and what the disk's floor and the page cache's residency are measured on."""
    if not directory:
        return []
    for pattern in WEIGHT_PATTERNS:
        files = sorted(glob.glob(os.path.join(directory, pattern)))
        if files:
            return files
    return []


# -- one start of a systemd unit: its journal and its load's record (the role's health wait, the watch) --

def journal_entries(text):
    """``journalctl -o json`` lines -> ``[(monotonic s, realtime s, message)]``; a message journald keeps as
    bytes (tqdm's carriage returns) is decoded."""
    out = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("MESSAGE")
        if isinstance(message, list):
            message = bytes(b & 0xFF for b in message if isinstance(b, int)).decode("utf-8", "replace")
        if not isinstance(message, str):
            continue
        try:
            mono, real = int(entry["__MONOTONIC_TIMESTAMP"]) / 1e6, int(entry["__REALTIME_TIMESTAMP"]) / 1e6
        except (KeyError, ValueError):
            mono = real = None
        out.append((mono, real, message))
    return out


def weight_bytes(model_path):
    """``(bytes, source)`` of the model's weight files (what a load reads), or (None, None)."""
    files = weight_files(model_path)
    try:
        return (sum(os.path.getsize(f) for f in files), f"the {len(files)} weight file(s) in {model_path}") \
            if files else (None, None)
    except OSError:
        return None, None


def load_record(entries, props, model_path, unit, invocation, healthy_at=None):
    """The load's record (:func:`parse_load`) of the journal entries of one start, timed from the
    unit's ExecMainStartTimestampMonotonic."""
    t0 = None
    try:
        t0 = int(props.get("ExecMainStartTimestampMonotonic") or 0) / 1e6 or None
    except ValueError:
        t0 = None
    nbytes, source = weight_bytes(model_path)
    record = parse_load([(mono, text) for mono, _, text in entries], t0=t0, checkpoint_bytes=nbytes,
                        checkpoint_source=source)
    started = None
    if t0 is not None:
        first = next(((mono, real) for mono, real, _ in entries if mono is not None and real is not None), None)
        if first:
            started = datetime.fromtimestamp(first[1] - (first[0] - t0), tz=timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ")
    record.update(unit=unit, invocation_id=invocation, started_at=started,
                  healthy_s=round(healthy_at - t0, 3) if healthy_at is not None and t0 is not None else None)
    return record


def split_lines(lines):
    """``(t, text)`` pairs with tqdm's carriage returns taken as line ends; plain strings get t None."""
    out = []
    for item in lines:
        t, text = item if isinstance(item, tuple) else (None, item)
        for part in str(text).split("\r"):
            if part.strip():
                out.append((t, part))
    return out


def progress(lines):
    """``(loaded, total, text)``: the load so far in one line for an operator (the health wait's
    progress), from its lines, oldest first."""
    loaded = total = None
    phase = None
    for _, text in split_lines(lines):
        match = PROGRESS.search(text)
        if match:
            loaded, total = int(match.group("n")), int(match.group("total"))
            phase = None
        if "Application startup complete." in text:
            phase = "application startup complete"
        elif "Model loading took" in text or "init engine" in text or "Loading weights took" in text:
            phase = "weights loaded; initialising the engine (KV cache, warm-up)"
    if phase:
        words = phase if loaded is None else f"{loaded}/{total} shards loaded; {phase}"
    elif loaded is None:
        words = "no shard progress logged yet"
    else:
        words = f"{loaded}/{total} shards loaded ({100 * loaded // max(total, 1)}%)"
    return loaded, total, words


def _number(text):
    try:
        return float(text.replace(",", ""))
    except (TypeError, ValueError, AttributeError):
        return None


def _scan(lines):
    """Every milestone's and fact's matches: ``{name: [(t, groupdict)]}``, and tqdm's bars."""
    found, facts, bars = {}, {}, []
    for t, text in lines:
        for name, patterns in _MILESTONES:
            for pattern in patterns:
                match = pattern.search(text)
                if match:
                    found.setdefault(name, []).append((t, match.groupdict()))
                    break
        for name, pattern in _FACTS:
            match = pattern.search(text)
            if match:
                facts.setdefault(name, []).append((t, match.groupdict()))
        match = PROGRESS.search(text)
        if match:
            bars.append(match.groupdict())
    return found, facts, bars


def _before_ready(found):
    """The matches that came before the first ``ready`` line (and that one)."""
    ready = found.get("ready")
    if not ready:
        return found
    limit = ready[0][0]
    out = {"ready": [ready[0]]}
    for name, hits in found.items():
        if name != "ready":
            kept = [h for h in hits if limit is None or h[0] is None or h[0] <= limit]
            if kept:
                out[name] = kept
    return out


# The milestones whose stated figure is the phase's own duration (others state a longer span: "Model
# loading took" covers the model's construction and the weights too, "init engine" the whole engine).
PHASE_STATED = {"weights", "compile", "graphs"}


def _stated(hits):
    """The largest duration a milestone's lines state (the slowest rank), or None."""
    values = [_number(g.get("s")) for _, g in hits if g.get("s") is not None]
    values = [v for v in values if v is not None]
    return max(values) if values else None


def parse_load(lines, t0=None, checkpoint_bytes=None, checkpoint_source="the checkpoint's files"):
    """The load record of one start (see the module's docstring): ``{schema, tool, ready, total_s,
    failed_in, phases [{name, seconds, stated_s, status, includes, why}], weights {...}, compile {...},
    kv_cache {...}, cuda_graphs {...}, stated {...}, vllm_version, load_format, milestones_found}``."""
    lines = split_lines(lines)
    found, facts, bars = _scan(lines)
    found = _before_ready(found)
    times = {name: hits[0][0] if name in ("load_start", "ready") else hits[-1][0] for name, hits in found.items()}
    ready = "ready" in found
    phases, pending, previous = [], [], t0
    for phase in PHASES:
        hits = found.get(phase.milestone)
        stated = _stated(hits) if hits and phase.milestone in PHASE_STATED else None
        entry = {"name": phase.name, "seconds": None, "stated_s": stated, "status": "not measured",
                 "includes": [], "why": None}
        t = times.get(phase.milestone)
        if not hits:
            entry["why"] = "vLLM logged no line that ends it"
            pending.append(phase.name)
        elif t is None or previous is None:
            entry["status"] = "stated" if stated is not None else "not measured"
            entry["why"] = "no timestamps" + ("; vLLM states its duration" if stated is not None else "")
        elif t < previous:
            entry["why"] = "its line came before the phase it follows"
        else:
            entry.update(seconds=round(t - previous, 3), status="measured", includes=pending)
            pending = []
        if hits and t is not None:
            previous = t
        phases.append(entry)
    failed_in = None
    if not ready:
        reached = [i for i, p in enumerate(PHASES) if p.milestone in found]
        stop = reached[-1] + 1 if reached else 0
        failed_in = PHASE_NAMES[stop] if stop < len(PHASES) else None
        for entry in phases[stop:]:
            entry["why"] = "stopped here" if entry["name"] == failed_in else "not reached"
            entry["status"] = "not measured"
    total = None
    if ready and times.get("ready") is not None and t0 is not None:
        total = round(times["ready"] - t0, 3)
    return {
        "schema": SCHEMA, "tool": TOOL, "ready": ready, "total_s": total, "failed_in": failed_in,
        "phases": phases,
        "weights": _weights(found, facts, bars, phases, checkpoint_bytes, checkpoint_source),
        "compile": _compile(found, facts),
        "kv_cache": _kv(found, facts),
        "cuda_graphs": _graphs(found),
        "stated": _statements(found, facts),
        "vllm_version": facts["version"][-1][1]["v"] if facts.get("version") else None,
        "load_format": _load_format(facts),
        "milestones_found": [m.name for m in MILESTONES if m.name in found],
    }


def _statements(found, facts):
    """The durations vLLM states in its own lines, as it states them (seconds; the slowest rank's)."""
    def fact(name, key):
        return _number(facts[name][-1][1][key]) if facts.get(name) else None
    model = found.get("model") or []
    return {"weights_s": _stated(found["weights"]) if found.get("weights") else None,
            "model_loading_s": _stated(model) if model else None,
            "model_gib": _number(model[-1][1].get("gib")) if model else None,
            "compile_s": _stated(found["compile"]) if found.get("compile") else None,
            "profile_run_s": fact("profile_run", "s"),
            "graphs_s": _stated(found["graphs"]) if found.get("graphs") else None,
            "engine_init_s": _stated(found["engine"]) if found.get("engine") else None}


def _load_format(facts):
    if not facts.get("args"):
        return None
    match = LOAD_FORMAT.search(facts["args"][-1][1]["args"])
    return match.group("fmt") if match else "auto"


def _weights(found, facts, bars, phases, checkpoint_bytes, checkpoint_source):
    span = next(p["seconds"] for p in phases if p["name"] == "weights")
    stated = _stated(found["weights"]) if found.get("weights") else None
    nbytes, source = checkpoint_bytes, checkpoint_source
    if not nbytes and facts.get("checkpoint"):
        gib = _number(facts["checkpoint"][-1][1]["gib"])
        if gib:
            nbytes, source = int(gib * 2**30), "vLLM's 'Checkpoint size' line (GiB, 2 decimals)"
    seconds = stated if stated is not None else span
    last = bars[-1] if bars else None
    return {
        "bytes": nbytes or None, "bytes_source": source if nbytes else None,
        "seconds": seconds,
        "seconds_source": "stated" if stated is not None else ("span" if span is not None else None),
        "gbps": round(nbytes / seconds / GB, 3) if nbytes and seconds else None,
        "shards_loaded": int(last["n"]) if last else None, "shards": int(last["total"]) if last else None,
        "loader": last["desc"] if last else None,
        "filesystem": facts["checkpoint"][-1][1]["fs"] if facts.get("checkpoint") else None,
    }


def _compile(found, facts):
    if facts.get("cache_hit"):
        cache = "hit"
    elif facts.get("cache_off"):
        cache = "disabled"
    elif facts.get("cache_miss"):
        cache = "miss"
    else:
        cache = None
    return {"stated_s": _stated(found["compile"]) if found.get("compile") else None, "cache": cache}


def _kv(found, facts):
    hits = found.get("kv") or []
    tokens = _number(hits[-1][1].get("tokens")) if hits else None
    memory = _number(facts["kv_memory"][-1][1]["gib"]) if facts.get("kv_memory") else None
    run = _number(facts["profile_run"][-1][1]["s"]) if facts.get("profile_run") else None
    return {"tokens": int(tokens) if tokens is not None else None, "gib": memory, "profile_run_s": run,
            "device": hits[-1][1].get("device") if hits else None}


def _graphs(found):
    hits = found.get("graphs") or []
    return {"stated_s": _stated(hits) if hits else None, "gib": _number(hits[-1][1].get("gib")) if hits else None}


# --------------------------------------------------------------------------------- against the disk

def against_disk(load, disk):
    """The weights phase against the disk's floor: ``{bound: "disk" | "not disk" | "page cache" | "unknown",
    evidence: {weights_gbps, disk_gbps, ratio, threshold, resident_fraction}, why}``."""
    weights = (load or {}).get("weights") or {}
    w = weights.get("gbps")
    d = (disk or {}).get("gbps")
    evidence = {"weights_gbps": w, "disk_gbps": d, "ratio": None, "threshold": DISK_BOUND_RATIO,
                "resident_fraction": (disk or {}).get("resident_fraction")}
    if w is None or d is None or d <= 0:
        why = ("the load's weights rate was not measured" if w is None else
               "the disk's floor was not measured" + (": " + disk["why"] if (disk or {}).get("why") else ""))
        return {"bound": "unknown", "evidence": evidence, "why": why}
    evidence["ratio"] = round(w / d, 3)
    evidence["cached_above"] = CACHED_RATIO
    bound = "page cache" if w / d > CACHED_RATIO else ("disk" if w / d >= DISK_BOUND_RATIO else "not disk")
    return {"bound": bound, "evidence": evidence, "why": None}


def seconds_words(seconds):
    """Seconds in words for a load: ``40.0 s``, ``29.0 min`` (from 90 s on); ``-`` for None."""
    if seconds is None:
        return "-"
    if seconds >= 90:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


_WORDS = {p.name: p.words for p in PHASES}


def phase_words(entry, notes=()):
    """One phase in words: ``weights 29.0 min``, ``compile 45.0 s (cache miss; with post-load: not logged
    apart)``, ``CUDA graphs not measured``."""
    name = _WORDS[entry["name"]]
    notes = list(notes)
    if entry.get("includes"):
        notes.append("with " + ", ".join(_WORDS[n] for n in entry["includes"]) + ": not logged apart")
    if entry["seconds"] is not None:
        text = f"{name} {seconds_words(entry['seconds'])}"
    elif entry.get("stated_s") is not None:
        text = f"{name} {seconds_words(entry['stated_s'])}"
        notes.insert(0, "vLLM's figure")
    else:
        return f"{name} not measured"
    return text + (" (" + "; ".join(notes) + ")" if notes else "")


def load_words(load):
    """A load in one line: ``ready in 31.6 min: start 40.0 s, weights 29.0 min (540.0 GB at 0.31 GB/s), ...``."""
    if not load:
        return "no load recorded"
    if load.get("ready"):
        total = load.get("total_s")
        head = f"ready in {seconds_words(total)}" if total is not None else "ready (total not measured)"
    else:
        head = f"did not get ready (stopped in {_WORDS.get(load.get('failed_in'), 'an unknown phase')})"
    parts = []
    included = {n for e in load.get("phases") or [] for n in e.get("includes") or []}
    for entry in load.get("phases") or []:
        skipped = entry.get("why") in ("not reached", "stopped here") or entry["name"] in included
        if entry["status"] == "not measured" and skipped:
            continue
        notes = []
        if entry["name"] == "weights":
            notes = _weights_notes(load.get("weights") or {})
        if entry["name"] == "compile" and (load.get("compile") or {}).get("cache"):
            notes = [f"cache {load['compile']['cache']}"]
        parts.append(phase_words(entry, notes))
    return head + (": " + ", ".join(parts) if parts else "")


def size_words(nbytes):
    """Bytes in decimal units: ``540.0 GB``, ``52.6 MB``."""
    if nbytes is None:
        return "-"
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{int(nbytes)} B"


def _weights_notes(weights):
    if weights.get("bytes") and weights.get("gbps") is not None:
        return [f"{size_words(weights['bytes'])} at {weights['gbps']:.2f} GB/s"]
    if weights.get("bytes"):
        return [size_words(weights["bytes"])]
    return []


def disk_words(disk):
    """The disk's floor in words: ``this disk reads 2.10 GB/s (1.0 GiB of the checkpoint read in 0.5 s, O_DIRECT);
    12% of the checkpoint in the page cache``, or why it was not measured."""
    if not disk:
        return "the disk's floor was not measured"
    if disk.get("gbps") is None:
        text = "the disk's floor was not measured: " + (disk.get("why") or "no reason recorded")
    else:
        text = (f"this disk reads {disk['gbps']:.2f} GB/s ({size_words(disk.get('bytes'))} of the checkpoint read in "
                f"{disk.get('seconds') or 0:.2f} s, {disk.get('method') or '?'})")
    if disk.get("resident_fraction") is not None:
        text += f"; {100 * disk['resident_fraction']:.0f}% of the checkpoint in the page cache"
    return text


def verdict_words(verdict):
    """:func:`against_disk`'s verdict in words."""
    e = verdict["evidence"]
    if verdict["bound"] == "unknown":
        return f"disk-bound or not: unknown ({verdict['why']})"
    if verdict["bound"] == "page cache":
        return (f"the load read faster than this disk can (weights at {100 * e['ratio']:.0f}% of its floor): "
                "from the page cache")
    bound = "disk-bound" if verdict["bound"] == "disk" else "not disk-bound"
    return f"the load is {bound} (weights at {100 * e['ratio']:.0f}% of the disk's floor)"
