"""vllm-ops-watch: find a vLLM engine that stopped making progress, keep the evidence, restart it.

vLLM's ``/health`` answers 200 while its engine lives, whether or not it steps: a hung engine stays
"healthy" for hours and ``Restart=always`` never fires, since nothing exits. This watch, run by the
``vllm`` role as ``vllm-ops-watch.service`` (its own user; ptrace and kill, nothing else), reads the
server's ``/metrics`` every ``interval_s`` and applies one rule (:class:`Liveness`):

**Stalled** = requests are running or waiting, and neither the engine's step counter
(``vllm:iteration_tokens_total_count``) nor its generated tokens (``vllm:generation_tokens_total``)
advanced for ``stall_s`` seconds, under one start of the unit (its InvocationID). Idle (nothing
running or waiting) is never stalled; a load (``/metrics`` refused, or a new InvocationID) starts the
count again; a slow but advancing engine is not stalled, however slow. ``stall_s`` is the configured
one, else derived: :data:`STALL_FACTOR` times the longest gap seen between two advances while busy
(polled: a slow step, a long prefill), never below ``stall_floor_s`` (120 s by default).

When stalled, it first keeps the evidence (:func:`collect`): every process of the unit's cgroup, its
threads' state, wait channel and kernel stack (where readable), ``py-spy dump`` of each (a stopped
process read without attaching; a failure is evidence too), ``/metrics``, the journal's tail,
``nvidia-smi -q``, the server's NCCL settings (its environment files); then a one-line verdict (:func:`verdict`: which
process, in what frame) in ``incident.json``, under ``incidents_dir/<UTC time>/``, the oldest removed
past ``keep`` incidents or ``max_bytes``. Then, unless a job holds the host's lock (a live profile's
flush stalls the engine for minutes: the watch records, never acts), it ends the stuck server: SIGKILL
to its main process, and systemd restarts it (``Restart=always``); the watch waits for the new start
to answer ``/health`` and records the load (its phases, as the role's health wait records one:
``vllm_ops_loads.py``, installed beside the watch). At most ``max_restarts`` in ``restart_window_s``: past
that it restarts nothing, says so in the journal and its status, and exits :data:`EXIT_GAVE_UP` (the
unit does not restart it: ``systemctl status vllm-ops-watch`` shows why).

Between stalls it reads the step time at its load (:class:`Slowdown`, ``vllm_ops_step_model.py``) and
exports its figures for Prometheus. A slowdown held ``capture_after_s`` (the residual above the
baseline's band at every judged interval) is an incident of its own (:meth:`Watch.slowdown_incident`):
its figures, the baseline's, what changed on the host since the baseline (:func:`fingerprint`), and,
with ``auto_capture`` on an armed service, when no job holds the lock and none ran (nor a capture) in
``capture_min_interval_s``, a live capture of the traffic as it runs (:func:`live_capture`: the
profiler started and stopped over loopback, ``vllm_ops_profiler.py``, the traces moved into the
incident), which ``playbooks/incidents.yml`` reads.

Standard library only, Python 3.9: installed by the ``vllm`` role beside its config
(``watch.json``, whose fields and defaults are ``vllm_ops_watch_config``'s, the collection's
``watch_config.py``); ``vllm_ops_watch.py --config FILE``. Its state is in its status line
(``systemctl status``) and in ``incidents_dir/watch-state.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request
from collections import deque
from datetime import datetime, timezone

# installed beside the watch by the role: its configuration's fields and defaults (the collection's
# watch_config.py, which the vllm_watch_config module writes watch.json with); the watch needs it
import vllm_ops_watch_config as watch_config

try:  # installed beside the watch by the role: the load's record, as the role's health wait makes it
    import vllm_ops_loads as loads
except ImportError:  # a watch copied alone still watches; its incidents say why no load is recorded
    loads = None
try:  # installed beside the watch by the role: the step time at its load (the collection's step_model.py)
    import vllm_ops_step_model as step_model
except ImportError:  # without it the watch finds stalls and exports no step time
    step_model = None
try:  # installed beside the watch by the role: nvidia-smi's link fields (the collection's vllm_fabric_lib.py)
    import vllm_ops_fabric_lib as fabric_lib
except ImportError:  # without it the watch reads no PCIe link
    fabric_lib = None
try:  # installed beside the watch by the role: the profiler's endpoints and traces (the collection's profiler.py)
    import vllm_ops_profiler as profiler
except ImportError:  # without it the watch captures nothing; its slowdown incidents say why
    profiler = None

STEPS = "vllm:iteration_tokens_total_count"
TOKENS = "vllm:generation_tokens_total"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
# The derived stall time: this many times the longest gap seen between two advances while busy.
STALL_FACTOR = 10
EXIT_GAVE_UP = 3
LOAD_JOURNAL_LINES = 20000  # one start's journal, read whole for its load record (a few hundred lines)
PY_SPY_ATTEMPTS = 2  # py-spy sometimes misses the interpreter's version on a busy host; a second read finds it
# incident.json's schema: the controller reads it through vllm_ops.records.incident, which defines the fields.
INCIDENT_SCHEMA = "vllm-ops/incident/2"
# A frame that names a collective or the wait for one (vLLM's shared-memory broadcast, NCCL, custom
# all-reduce, torch.distributed).
COLLECTIVE = re.compile(r"all_reduce|allreduce|all_gather|reduce_scatter|broadcast|barrier|nccl|"
                        r"collective_rpc|acquire_read|acquire_write|shm_broadcast|custom_ar", re.I)
SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
# A job's (or an operator's) request to fit the baseline on a known-good window of the scrapes the watch
# kept (``--baseline-window``/``--baseline-last``), in the incidents directory until the watch reads it.
BASELINE_REQUEST = "baseline-request.json"
# What the link reading asks nvidia-smi (fields every driver has; the widths only: the generation drops
# while a GPU idles and needs the utilization beside it, which the campaign's reading judges).
LINK_FIELDS = ("index", "pci.bus_id", "pcie.link.width.current", "pcie.link.width.max")
# The figures the watch exports for Prometheus (node_exporter's textfile collector reads metrics_file):
# name -> (type, help). The project's alert rules use these names and no other (a test checks both ways).
EXPORTED = {
    "vllm_ops_watch_updated_timestamp_seconds": ("gauge", "When the watch last wrote these figures (Unix time)."),
    "vllm_ops_watch_stalls_total": ("counter", "Stalls found since the watch started."),
    "vllm_ops_watch_restarts_in_window": ("gauge", "Restarts the watch made in its restart window."),
    "vllm_ops_watch_gave_up": ("gauge", "1 when the watch stopped restarting: its restart limit was reached."),
    "vllm_ops_watch_last_incident_timestamp_seconds": ("gauge", "When the last incident was recorded (Unix time)."),
    "vllm_ops_watch_baseline_intervals": ("gauge", "Intervals the step-time baseline was fitted on (0: learning)."),
    "vllm_ops_watch_step_seconds": ("gauge", "Mean decode step time over the last judged interval."),
    "vllm_ops_watch_step_expected_seconds": ("gauge", "The baseline's step time at the same batch and KV usage."),
    "vllm_ops_watch_step_residual": ("gauge", "Step time over the baseline's at the same load, less one."),
    "vllm_ops_watch_step_band": ("gauge", "The baseline's noise band: a residual above it is a slowdown."),
    "vllm_ops_watch_decode_batch": ("gauge", "Tokens generated per engine step over the last judged interval."),
    "vllm_ops_watch_slowdown_since_timestamp_seconds": ("gauge", "Since when every judged interval was above "
                                                        "the band (Unix time); absent when none is."),
    "vllm_ops_watch_pcie_link_width": ("gauge", "A GPU's PCIe link width in lanes, read while requests ran."),
    "vllm_ops_watch_pcie_link_width_max": ("gauge", "The widest PCIe link the GPU and its slot support, lanes."),
}


# -- /metrics ----------------------------------------------------------------------------------------

def parse_metrics(text):
    """The samples of a Prometheus text exposition, each name's values summed over its label sets
    (one engine: one set; several engines: their sum). Comments and malformed lines are skipped."""
    out = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if not match or line.startswith("#"):
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        out[match.group(1)] = out.get(match.group(1), 0.0) + value
    return out


def reading(samples):
    """What the rule needs from parsed ``/metrics``: ``{steps, tokens, busy}``; a counter the server
    does not export is None."""
    return {"steps": samples.get(STEPS), "tokens": samples.get(TOKENS),
            "busy": samples.get(RUNNING, 0.0) + samples.get(WAITING, 0.0)}


# -- the rule --------------------------------------------------------------------------------------

class Liveness:
    """The stall rule over successive readings. :meth:`observe` takes each poll's time, the unit's
    InvocationID and the reading (None when ``/metrics`` did not answer) and returns the seconds the
    engine has been stalled (0 when it is not)."""

    def __init__(self, stall_s=0.0, floor_s=120.0):
        self.configured, self.floor_s = float(stall_s), float(floor_s)
        self.identity = None
        self.last = None  # the previous reading
        self.progress_at = None  # the last time the engine advanced, was idle, or (re)started
        self.longest_gap_s = 0.0  # the longest span between two advances while busy, this start

    @property
    def stall_s(self):
        """The configured stall time, else :data:`STALL_FACTOR` x the longest gap seen, floored."""
        if self.configured > 0:
            return self.configured
        return max(self.floor_s, STALL_FACTOR * self.longest_gap_s)

    def observe(self, now, identity, value):
        if identity != self.identity:  # a new start: its load is no stall
            self.identity, self.last, self.progress_at, self.longest_gap_s = identity, None, now, 0.0
        if value is None or (value["steps"] is None and value["tokens"] is None):
            # not answering (loading, stopping, or dead: systemd's business), or no progress counter
            # to judge by (a server that exports neither): never a stall
            self.last, self.progress_at = None, now
            return 0.0
        advanced = self.last is not None and any(
            value[k] is not None and self.last[k] is not None and value[k] > self.last[k]
            for k in ("steps", "tokens"))
        if advanced and self.last["busy"] > 0:
            self.longest_gap_s = max(self.longest_gap_s, now - self.progress_at)
        if advanced or value["busy"] <= 0 or self.last is None:
            self.progress_at = now
        self.last = value
        stalled = now - self.progress_at
        return stalled if stalled >= self.stall_s else 0.0

    def state(self, now):
        return {"identity": self.identity, "stall_s": round(self.stall_s, 1),
                "stall_derived": self.configured <= 0,
                "longest_gap_s": round(self.longest_gap_s, 1),
                "since_progress_s": None if self.progress_at is None else round(now - self.progress_at, 1),
                "last": self.last}


class RestartBudget:
    """At most ``limit`` restarts in any ``window_s`` seconds."""

    def __init__(self, limit, window_s, past=()):
        self.limit, self.window_s = int(limit), float(window_s)
        self.times = deque(sorted(past))

    def count(self, now):
        """The restarts within the window that ends ``now``."""
        while self.times and now - self.times[0] >= self.window_s:
            self.times.popleft()
        return len(self.times)

    def allows(self, now):
        return self.count(now) < self.limit

    def spend(self, now):
        self.times.append(now)


# -- evidence --------------------------------------------------------------------------------------

def _read(path, default=None):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError as exc:
        return default if default is not None else f"(not readable: {exc.strerror})"


def _status_field(text, field):
    match = re.search(rf"^{field}:\s*(.*)$", text or "", re.M)
    return match.group(1).strip() if match else None


def role_of(title, main_pid, pid):
    """What a process of the server is, by its title (vLLM sets ``VLLM::EngineCore``,
    ``VLLM::Worker_TP3``, ``VLLM::Worker`` at TP 1, as its command line; the kernel's 15-character
    ``comm`` cuts the rank off): the API server (the unit's main process), the engine, or a worker
    and its tensor-parallel rank."""
    if pid == main_pid:
        return "API server", None
    if title.startswith("VLLM::EngineCor"):
        return "engine", None
    match = re.match(r"VLLM::Worker(?:_TP(\d+))?", title)
    if match:
        return "worker", int(match.group(1) or 0)
    return "other", None


def py_spy_frames(text):
    """The threads of a ``py-spy dump``: ``[{thread, idle, frames: ["func (file:line)", ...]}]``, each
    thread's frames innermost first, as py-spy prints them."""
    threads, current = [], None
    for line in text.splitlines():
        head = re.match(r'^Thread (\S+) \(([^)]*)\)(?:: "(.*)")?', line)
        if head:
            current = {"thread": head.group(3) or head.group(1), "idle": head.group(2) == "idle", "frames": []}
            threads.append(current)
        elif current is not None and line.startswith("    ") and line.strip():
            current["frames"].append(line.strip())
    return threads


def process_evidence(pid, main_pid, py_spy, timeout_s=30):
    """One process: name, role, state, wait channel, threads (each with its kernel stack where the
    kernel lets this user read it), and py-spy's dump or why there is none."""
    status = _read(f"/proc/{pid}/status", "")
    cmdline = _read(f"/proc/{pid}/cmdline", "").replace("\0", " ").strip()
    name = cmdline.split(" ", 1)[0] if cmdline.startswith("VLLM::") else _read(f"/proc/{pid}/comm", "").strip()
    role, rank = role_of(name, main_pid, pid)
    threads = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:  # gone since the cgroup was read
        tids = []
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        state = _status_field(_read(f"{base}/status", ""), "State")
        if state is None:  # the thread ended since the listing (a server's worker threads come and go)
            continue
        threads.append({"tid": int(tid), "name": _read(f"{base}/comm", "").strip(), "state": state,
                        "wchan": _read(f"{base}/wchan", "").strip() or None,
                        "kernel_stack": _read(f"{base}/stack")})
    entry = {"pid": pid, "name": name, "role": role, "rank": rank, "cmdline": cmdline,
             "state": _status_field(status, "State"), "wchan": _read(f"/proc/{pid}/wchan", "").strip() or None,
             "threads": threads, "py_spy": None, "py_spy_error": None}
    if not py_spy or not os.access(py_spy, os.X_OK):
        entry["py_spy_error"] = f"py-spy not installed at {py_spy}: no Python stacks"
        return entry
    command = [py_spy, "dump", "--pid", str(pid)]
    if (entry["state"] or "").startswith(("T", "t")):
        # A stopped process is read without ptrace (--nonblocking: it is paused already, so the stack
        # is consistent). Attaching would fail, and a failed attach can leave it traced, deaf to the
        # SIGCONT of systemd's stop (seen: the stop then waits out TimeoutStopSec).
        command.append("--nonblocking")
    for attempt in range(PY_SPY_ATTEMPTS):
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            entry["py_spy_error"] = f"py-spy dump took more than {timeout_s} s"
            return entry
        entry["py_spy_text"] = run.stdout + run.stderr
        if run.returncode == 0:
            entry["py_spy"], entry["py_spy_error"] = py_spy_frames(run.stdout), None
            return entry
        text = run.stderr.strip() or run.stdout.strip() or f"exit {run.returncode}"
        entry["py_spy_error"] = " ".join(text.split())[-500:] + f" (attempt {attempt + 1})"
    return entry


def _innermost(entry):
    """The innermost frame of a process's main thread (py-spy lists it first), or None."""
    for thread in entry.get("py_spy") or []:
        if thread["frames"] and thread["thread"] in ("MainThread", str(entry["pid"])):
            return thread["frames"][0]
    threads = [t for t in entry.get("py_spy") or [] if t["frames"]]
    return threads[0]["frames"][0] if threads else None


def _collective(entry):
    """The first frame, of any thread of a process, inside a collective or waiting for one; or None."""
    for thread in entry.get("py_spy") or []:
        for frame in thread["frames"]:
            if COLLECTIVE.search(frame):
                return frame
    return None


def _who(entry):
    named = {"engine": "the engine", "API server": "the API server"}.get(entry["role"])
    if entry["role"] == "worker":
        named = f"worker rank {entry['rank']}"
    return f"{named or 'process'} ({entry['name'] or '?'}, pid {entry['pid']})"


def verdict(processes):
    """One line: which process is stuck and in what frame, by priority: a stopped process (State T:
    nothing else can run while it is stopped); a worker inside a collective (the ranks wait on each
    other: name them all); the engine's innermost frame; else what is known."""
    stopped = [p for p in processes if (p.get("state") or "").startswith(("T", "t"))]
    if stopped:
        first = sorted(stopped, key=lambda p: {"engine": 0, "worker": 1}.get(p["role"], 2))[0]
        frame = _collective(first) or _innermost(first)
        where = f" in {frame}" if frame else f"; py-spy: {first.get('py_spy_error') or 'no dump'}"
        return (f"{_who(first)} is stopped (State {first['state']}, wait channel {first.get('wchan') or '?'})"
                + where)
    workers = [p for p in processes if p["role"] == "worker" and _collective(p)]
    if workers:
        lead = workers[0]
        others = ", ".join(str(p["rank"]) for p in workers[1:])
        return (f"{_who(lead)} is inside a collective: {_collective(lead)}"
                + (f"; ranks {others} too" if others else ""))
    engine = next((p for p in processes if p["role"] == "engine"), None)
    if engine and _innermost(engine):
        where = _collective(engine) or _innermost(engine)
        return f"{_who(engine)} is stuck in {where}"
    if engine:
        return f"{_who(engine)} made no progress; no Python stack: {engine.get('py_spy_error') or 'no dump'}"
    return "no engine process found in the unit's cgroup"


def nccl_environment(paths):
    """The NCCL_* settings of the server's environment files, later files over earlier ones (the
    variant's over the unit's), as systemd reads them. (``/proc/PID/environ`` is its owner's alone:
    reading it would take CAP_DAC_READ_SEARCH, which the watch does not have; its user is in the
    server's group, which may read these files.)"""
    found = {}
    for path in paths:
        for line in _read(path, "").splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and key.startswith("NCCL_"):
                found[key] = value.strip().strip('"')
    return found


def cgroup_pids(control_group):
    """The processes of a unit's cgroup (systemd's ControlGroup), on cgroup v2 or v1's named hierarchy."""
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"):
        path = f"{root}{control_group}/cgroup.procs"
        if control_group and os.path.isfile(path):
            pids = sorted({int(x) for x in _read(path, "").split()})
            if pids:
                return pids
    return []


def _command(argv, timeout_s=30):
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        return run.stdout + (run.stderr if run.returncode else "")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({argv[0]} failed: {exc})"


# The access-log lines of the watch's own polls (and of health checks), left out of an incident's
# journal: at one every interval_s they would be all of its tail.
POLL_LINE = re.compile(r'"GET /(?:metrics|health) HTTP/1\.1" 200')


def journal_tail(unit, lines):
    """The unit's last ``lines`` journal lines but the polls' (:data:`POLL_LINE`), tqdm's lines
    included (``--all``: the journal keeps a line with a carriage return as a blob)."""
    text = _command(["journalctl", "--all", "-u", unit, "-n", str(lines * 20), "--no-pager", "-o", "short-iso"])
    kept = [line for line in text.splitlines() if not POLL_LINE.search(line)]
    return "\n".join(kept[-lines:]) + "\n"


def dir_bytes(path):
    total = 0
    for base, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(base, name))
    return total


def prune(incidents_dir, keep, max_bytes):
    """Remove the oldest incidents past ``keep`` of them or ``max_bytes`` in all; the removed names."""
    names = sorted(n for n in os.listdir(incidents_dir)
                   if os.path.isfile(os.path.join(incidents_dir, n, "incident.json")))
    sizes = {n: dir_bytes(os.path.join(incidents_dir, n)) for n in names}
    removed = []
    while names and (len(names) > keep or sum(sizes[n] for n in names) > max_bytes):
        name = names.pop(0)
        shutil.rmtree(os.path.join(incidents_dir, name), ignore_errors=True)
        removed.append(name)
    return removed


def incident_dir(cfg, wall):
    """A new incident's name (its UTC time, as the controller reads it) and its directory, made."""
    stamp = datetime.fromtimestamp(wall, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = os.path.join(cfg["incidents_dir"], stamp)
    os.makedirs(path, exist_ok=True)
    return stamp, path


def collect(cfg, props, metrics_text, stall, now=None):
    """Write an incident's evidence and ``incident.json`` (its verdict, ``action`` still to be set by
    the caller) under ``incidents_dir/<UTC time>/``; return (directory, incident)."""
    stamp, path = incident_dir(cfg, now or time.time())
    main_pid = int(props.get("MainPID") or 0)
    processes = [process_evidence(pid, main_pid, cfg["py_spy"]) for pid in cgroup_pids(props.get("ControlGroup"))]
    for p in processes:
        text = p.pop("py_spy_text", None)
        if text is not None:
            _write(os.path.join(path, f"py-spy-{p['pid']}.txt"), text)
    nccl = nccl_environment(cfg.get("environment_files") or [])
    _write(os.path.join(path, "metrics.txt"), metrics_text or "(no answer)")
    _write(os.path.join(path, "journal.txt"), journal_tail(cfg["unit"], cfg["journal_lines"]))
    if shutil.which("nvidia-smi"):
        _write(os.path.join(path, "nvidia-smi.txt"), _command(["nvidia-smi", "-q"], timeout_s=60))
    incident = {
        "schema": INCIDENT_SCHEMA, "kind": "stall", "time": stamp, "unit": cfg["unit"],
        "invocation_id": props.get("InvocationID"), "main_pid": main_pid,
        "verdict": verdict(processes), "stall": stall, "nccl_environment": nccl,
        "nvidia_smi": bool(shutil.which("nvidia-smi")), "processes": processes, "action": None,
    }
    return path, incident


def _write(path, text, mode=None):
    """Whole or not at all: a reader (the incidents' fetch, an operator's jq) never sees half a file. With
    ``mode``, the file gets it (else the umask's)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, path)


def save(path, incident):
    _write(os.path.join(path, "incident.json"), json.dumps(incident, indent=2, sort_keys=True) + "\n")


# -- slowdowns -------------------------------------------------------------------------------------

class Slowdown:
    """The step time at its load (``vllm_ops_step_model``), one interval of ``slowdown_interval_s`` at a
    time, from the scrapes the watch makes anyway. Without a baseline (``baseline.json`` in the incidents
    directory) it learns one from the first ``baseline_intervals`` judged intervals (a known-good window:
    the service as deployed) and keeps it, across restarts of the service and of the watch, until it is
    removed; then each interval's residual against it, with its band."""

    def __init__(self, cfg, describe=dict):
        self.cfg = cfg
        self.describe = describe  # the host as it is now (fingerprint), kept with a fitted baseline
        self.path = os.path.join(cfg["incidents_dir"], "baseline.json")
        self.record = _load_json(self.path) or None
        self.learning = []
        self.start = None  # (monotonic time, invocation, samples) at the interval's start
        self.latest = None
        self.missing = None  # what the server's /metrics lacks of what the model reads, said once a start
        # The slowdown under way: (monotonic, wall) of the first of the judged intervals above the band in a
        # row, and those intervals; ``reported`` once its incident is written (one incident an episode).
        self.above_since = None
        self.above = []
        self.reported = False

    @property
    def baseline(self):
        return (self.record or {}).get("baseline")

    def observe(self, now, wall, invocation, samples):
        """A scrape; returns the interval it closed (with ``residual`` and ``band`` once there is a baseline)
        or None."""
        if samples is None or self.start is None or self.start[1] != invocation:
            self.start = None if samples is None else (now, invocation, samples)
            if samples is not None:
                lacking = step_model.missing(samples)
                if lacking and lacking != self.missing:
                    say("the server's /metrics lacks what the step time is read from: " + "; ".join(lacking),
                        "warning")
                self.missing = lacking
            return None
        seconds = now - self.start[0]
        if seconds < self.cfg["slowdown_interval_s"]:
            return None
        measured = step_model.interval(self.start[2], samples, seconds)
        self.start = (now, invocation, samples)
        if measured is None:
            return None
        if self.baseline is None:
            self.learning.append(dict(measured, at=wall))
            if len(self.learning) >= self.cfg["baseline_intervals"]:
                self.fit()
            self.latest = measured
            return measured
        try:
            residual = step_model.residual(self.baseline, measured)
        except step_model.ModelError as exc:  # a load far outside the window's: judged against nothing
            self.latest = dict(measured, unjudged=str(exc))
            return self.latest
        expected = step_model.predict(self.baseline, measured["batch"], measured["kv"])
        self.latest = dict(measured, expected_ms=expected, residual=residual, band=self.baseline["band"], at=wall)
        if residual > self.baseline["band"]:
            if self.above_since is None:
                self.above_since, self.above = (now - seconds, wall - seconds), []
            self.above = [*self.above, self.latest][-20:]
        else:
            self.above_since, self.above, self.reported = None, [], False
        return self.latest

    def fit_window(self, scrapes, start, end, by):
        """The baseline fitted on the window ``[start, end]`` (wall times) of the watch's ``scrapes``
        (:func:`step_model.window_intervals`), replacing the one it had; ``(ok, words)``. Too few intervals
        with traffic in the window leave the baseline as it was."""
        intervals = step_model.window_intervals(list(scrapes), start, end)
        kept = [s for s in scrapes if start <= s[0] <= end]
        if not kept:
            oldest = f"{_utc(scrapes[0][0])}" if scrapes else "none yet"
            return False, (f"no scrape of /metrics in {_utc(start)} to {_utc(end)} (the oldest kept: {oldest}): "
                           "the baseline is left as it was")
        try:
            baseline = step_model.fit(intervals, self.cfg["min_band"], window=[start, end])
        except step_model.ModelError as exc:
            return False, f"{exc} ({len(kept)} scrapes in {_utc(start)} to {_utc(end)}): the baseline is left as it was"
        self.keep(baseline, intervals, by)
        return True, (f"step-time baseline fitted on {by}'s window {_utc(start)} to {_utc(end)} "
                      f"({baseline['intervals']} intervals): {baseline['a']:.2f} ms + {baseline['b']:.3f} ms a token "
                      f"of batch, band {baseline['band']:.0%}")

    def keep(self, baseline, samples, by):
        """A fitted baseline kept (``baseline.json``, with the intervals it was fitted on, the host as it is now
        and who vouched for them); what was being learned and any slowdown under way start again from it."""
        self.record = {"baseline": baseline, "fitted_at": time.time(), "samples": samples, "host": self.describe(),
                       "by": by}
        _write(self.path, json.dumps(self.record, indent=2, sort_keys=True) + "\n")
        self.learning, self.above_since, self.above, self.reported = [], None, [], False

    def held_s(self, now):
        """Seconds the slowdown under way has held (every judged interval above the band), or None."""
        return None if self.above_since is None else now - self.above_since[0]

    def fit(self):
        window = [self.learning[0]["at"] - self.learning[0]["seconds"], self.learning[-1]["at"]]
        try:
            baseline = step_model.fit(self.learning, self.cfg["min_band"], window=window)
        except step_model.ModelError as exc:
            say(f"no step-time baseline yet: {exc}", "warning")
            self.learning = self.learning[1:]
            return
        self.keep(baseline, self.learning, "the watch's first intervals with traffic")
        say(f"step-time baseline fitted on {baseline['intervals']} intervals: {baseline['a']:.2f} ms + "
            f"{baseline['b']:.3f} ms a token of batch, band {baseline['band']:.0%}")


class Links:
    """The GPUs' PCIe link widths, read every ``pcie_interval_s`` while requests run (a width may drop
    while a GPU idles, so an idle reading is no evidence). A link that trained narrower than it can
    divides the all-reduce bandwidth of every rank, and nothing else says so between jobs."""

    def __init__(self, cfg, runner=subprocess.run):
        self.cfg, self.runner = cfg, runner
        self.last = None
        self.readings = []
        self.error = None

    def observe(self, now, busy):
        if fabric_lib is None or not busy or not self.cfg["nvidia_smi"]:
            return
        if self.last is not None and now - self.last < self.cfg["pcie_interval_s"]:
            return
        self.last = now
        args = ["--query-gpu=" + ",".join(LINK_FIELDS), fabric_lib.FORMAT]
        try:
            text = fabric_lib.run_smi(self.cfg["nvidia_smi"], args, self.runner, 20)
            self.readings = fabric_lib.parse_rows(text, LINK_FIELDS, fabric_lib.FIELD_KEYS)
            self.error = None
        except fabric_lib.FabricError as exc:
            if str(exc) != self.error:
                say(f"the GPUs' PCIe links are not read: {exc}", "warning")
            self.readings, self.error = [], str(exc)

    def figures(self):
        """``{name: [(labels, value)]}`` of the last reading; the names absent without one."""
        out = {}
        for name, key in (("vllm_ops_watch_pcie_link_width", "width_current"),
                          ("vllm_ops_watch_pcie_link_width_max", "width_max")):
            samples = [({"gpu": str(r["index"]), "bus_id": r.get("bus_id") or ""}, r[key])
                       for r in self.readings if r.get(key) is not None]
            if samples:
                out[name] = samples
        return out


def exposition(unit, figures):
    """The Prometheus text exposition of ``figures`` (name -> value, or a list of ``(labels, value)``; a name
    of :data:`EXPORTED`, a None value left out), each with its HELP and TYPE, labelled with the unit."""
    lines = []
    for name, value in figures.items():
        if value is None:
            continue
        kind, text = EXPORTED[name]
        lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
        for labels, number in value if isinstance(value, list) else [({}, value)]:
            pairs = ",".join(f'{key}="{val}"' for key, val in [("unit", unit), *sorted(labels.items())])
            lines.append(f"{name}{{{pairs}}} {float(number):.9g}")
    return "\n".join(lines) + "\n"


def export(path, text):
    """The exposition where node_exporter's textfile collector reads it: whole (a rename), readable by all.
    Returns why it could not be written, or None."""
    if not path:
        return None
    try:
        _write(path, text, 0o644)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    return None


# -- what changed, and why: the slowdown's incident ---------------------------------------------------

def _utc(wall):
    return datetime.fromtimestamp(wall, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _digest(path):
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"


def fingerprint(cfg, links):
    """What makes the service what it is, as the watch can read it, to tell what changed between a
    baseline and a slowdown: vLLM's version (``/version``), the unit's files and the environment files
    (their SHA-256), the NCCL settings, the GPU driver, each GPU's PCIe link width under load."""
    status, text = fetch(cfg["url"] + "/version", cfg["request_timeout_s"])
    try:
        version = json.loads(text).get("version") if status == 200 else None
    except (ValueError, AttributeError):
        version = None
    show = _command(["systemctl", "show", cfg["unit"], "-p", "FragmentPath", "-p", "DropInPaths"])
    props = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
    unit_files = [p for p in [props.get("FragmentPath", ""), *props.get("DropInPaths", "").split()] if p]
    driver = None
    if cfg["nvidia_smi"] and shutil.which(cfg["nvidia_smi"]):
        lines = _command([cfg["nvidia_smi"], "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()
        driver = lines[0].strip() if lines and re.fullmatch(r"[0-9][0-9.]*", lines[0].strip()) else None
    widths = {str(r["index"]): r["width_current"] for r in links.readings if r.get("width_current") is not None}
    return {"vllm_version": version, "unit_files": {p: _digest(p) for p in unit_files},
            "environment_files": {p: _digest(p) for p in cfg.get("environment_files") or []},
            "nccl_environment": nccl_environment(cfg.get("environment_files") or []), "driver": driver,
            "pcie_link_widths": widths or None}


def changes(before, after):
    """What differs between two fingerprints, each in words (``vLLM 0.32.0 -> 0.33.0``); a figure either
    side could not read (None) is no change."""
    if not before or not after:
        return []
    said = []
    for key, name in (("vllm_version", "vLLM"), ("driver", "the GPU driver")):
        if before.get(key) and after.get(key) and before[key] != after[key]:
            said.append(f"{name} {before[key]} -> {after[key]}")
    for key, what in (("unit_files", "the unit's file"), ("environment_files", "the environment file")):
        old, new = before.get(key) or {}, after.get(key) or {}
        said += [f"{what} {path} {'added' if path not in old else 'removed' if path not in new else 'changed'}"
                 for path in sorted(set(old) | set(new)) if old.get(path) != new.get(path)]
    old, new = before.get("nccl_environment") or {}, after.get("nccl_environment") or {}
    said += [f"{name} {old.get(name, '(unset)')} -> {new.get(name, '(unset)')}"
             for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)]
    old, new = before.get("pcie_link_widths") or {}, after.get("pcie_link_widths") or {}
    said += [f"GPU {gpu}'s PCIe link x{old[gpu]:g} -> x{new[gpu]:g}"
             for gpu in sorted(set(old) & set(new), key=int) if old[gpu] != new[gpu]]
    return said


def live_capture(cfg, path, prefix, sleep=time.sleep):
    """A capture of the service as it runs (the campaign's zero-downtime path, on the host): the armed
    server's profiler started over loopback (the fence lets loopback through), ``capture_s`` of its own
    traffic, stopped (bounded by ``max_iterations`` too), one complete trace per rank waited for, then
    every file of the capture (its prefix's: the ranks' traces and tables, the API server's) moved into
    ``path/capture/`` beside ``nvidia-smi topo -m``. Returns the
    capture's record: ``ok`` and ``traces`` [{rank, file, bytes, sha256}], or ``ok`` false and ``why``."""
    started = time.time()
    out = {"prefix": prefix, "started_at": _utc(started), "tensor_parallel_size": cfg["ranks"],
           "seconds": cfg["capture_s"]}
    try:
        profiler.start(urllib.request.urlopen, cfg["url"], prefix, int(cfg["max_iterations"]),
                       cfg["request_timeout_s"])
        sleep(cfg["capture_s"])
        out["stop_profile_s"] = round(profiler.stop(urllib.request.urlopen, cfg["url"], cfg["capture_timeout_s"]), 3)
        traces, _ = profiler.find(cfg["trace_dir"], prefix, cfg["ranks"], cfg["capture_timeout_s"], 2)
        dest = os.path.join(path, "capture")
        os.makedirs(dest, exist_ok=True)
        # every file of this capture: the ranks' traces and tables, and the API server's own trace and table
        for name in sorted(os.listdir(cfg["trace_dir"])):
            if name.startswith(prefix + "_"):
                shutil.move(os.path.join(cfg["trace_dir"], name), os.path.join(dest, name))
    except (profiler.ProfilerError, profiler.TraceError, OSError) as exc:
        return dict(out, ok=False, why=str(exc))
    if cfg["nvidia_smi"] and shutil.which(cfg["nvidia_smi"]):
        _write(os.path.join(dest, "topology.txt"), _command([cfg["nvidia_smi"], "topo", "-m"], timeout_s=60))
    return dict(out, ok=True, finished_at=_utc(time.time()),
                traces=[{key: t[key] for key in ("rank", "file", "bytes", "sha256")} for t in traces])


# -- the host ---------------------------------------------------------------------------------------

def unit_props(unit):
    text = _command(["systemctl", "show", unit, "-p", "MainPID", "-p", "InvocationID", "-p", "ControlGroup",
                     "-p", "ActiveState", "-p", "ExecMainStartTimestampMonotonic"])
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def fetch(url, timeout_s):
    """(status, body); status -1 when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except (OSError, ValueError):
        return -1, ""


def notify(text):
    """sd_notify's STATUS= (the line ``systemctl status`` shows), when run by systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(text.encode(), address)


def say(text, level="info"):
    # systemd reads "<N>" at a line's start as the journal priority (3 error, 4 warning, 6 info).
    prefix = {"error": "<3>", "warning": "<4>", "info": "<6>"}[level]
    print(f"{prefix}{text}", flush=True)


def wait_restarted(cfg, old_invocation, deadline):
    """Wait for a start newer than ``old_invocation`` to answer /health 200: (props, the monotonic
    second it answered, or None past ``deadline``)."""
    while time.monotonic() < deadline:
        props = unit_props(cfg["unit"])
        if props.get("InvocationID") and props.get("InvocationID") != old_invocation \
                and props.get("ActiveState") == "active":
            status, _ = fetch(cfg["url"] + "/health", cfg["request_timeout_s"])
            if status == 200:
                return props, time.monotonic()
        time.sleep(1)
    return unit_props(cfg["unit"]), None


def restart_load(cfg, props, healthy_at):
    """The new start's load record, as the role's health wait records one (``vllm_ops_loads``: its
    phases from vLLM's lines in this start's journal, timed from the unit's start; systemd's monotonic
    clock is Python's), or why there is none."""
    invocation = props.get("InvocationID")
    if loads is None:
        return {"error": "vllm_ops_loads.py is not beside the watch: the load is not recorded"}
    if not invocation:
        return {"error": "the unit has no start to read"}
    text = _command(["journalctl", "--no-pager", "-o", "json", "-n", str(LOAD_JOURNAL_LINES), "-u", cfg["unit"],
                     f"_SYSTEMD_INVOCATION_ID={invocation}"], timeout_s=60)
    return loads.load_record(loads.journal_entries(text), props, cfg.get("model_path"), cfg["unit"], invocation,
                             healthy_at)


def lock_holder(path, now=None):
    """The job holding the host's lock (``kind job_id``), or None: none, or a stale one by the rules
    the lock itself keeps (plugins/modules/vllm_job_lock.py, ``stale_reason``) that the host
    can check, so that a job killed with its lock left behind does not keep the watch from acting:
    expired (``expires_epoch``), or taken before the host's last boot (``boot_id``). A lock it cannot
    read counts as held: the watch never acts when unsure."""
    text = _read(path, "")
    if not text:
        return None
    try:
        lock = json.loads(text)
    except ValueError:
        return "a job"
    if not isinstance(lock, dict):
        return "a job"
    boot = _read("/proc/sys/kernel/random/boot_id", "").strip()
    if lock.get("boot_id") and boot and lock["boot_id"] != boot:
        return None
    if "expires_epoch" in lock and float(lock["expires_epoch"]) <= (time.time() if now is None else now):
        return None
    # locks of earlier releases say campaign_id, and no kind (a campaign's)
    return f"{lock.get('kind') or 'campaign'} {lock.get('job_id', lock.get('campaign_id', ''))}".strip()


class Watch:
    def __init__(self, cfg):
        self.cfg = cfg
        self.rule = Liveness(cfg["stall_s"], cfg["stall_floor_s"])
        self.state_file = os.path.join(cfg["incidents_dir"], "watch-state.json")
        state = _load_json(self.state_file)
        self.budget = RestartBudget(cfg["max_restarts"], cfg["restart_window_s"], state.get("restarts", []))
        self.recorded = None  # the InvocationID whose ongoing stall was recorded without action
        self.stalls = 0
        self.links = Links(cfg)
        self.slowdown = Slowdown(cfg, lambda: fingerprint(cfg, self.links)) if step_model is not None else None
        # the last job seen holding the host's lock ({at, holder}) and the last capture's time, across the
        # watch's restarts: a capture waits capture_min_interval_s after either
        self.job_seen = state.get("job_seen")
        self.last_capture = state.get("last_capture")
        # what the step model reads of each scrape, for a baseline fitted on a past window on request
        self.scrapes = deque(maxlen=int(cfg["history_s"] / max(cfg["interval_s"], 1.0)) + 1)
        self.baseline_request = state.get("baseline_request")
        self.last_incident = None
        self.gave_up = False
        self.export_failed = None

    def write_state(self, now, said):
        wall = time.time()
        state = {"updated": wall, "said": said, "stalls": self.stalls, "restarts": list(self.budget.times),
                 "job_seen": self.job_seen, "last_capture": self.last_capture,
                 "baseline_request": self.baseline_request, **self.rule.state(now)}
        if self.slowdown is not None:
            state["step"] = {"latest": self.slowdown.latest, "missing": self.slowdown.missing,
                             "learning": len(self.slowdown.learning), "baseline": self.slowdown.baseline}
        _write(self.state_file, json.dumps(state, indent=2, sort_keys=True) + "\n")
        failed = export(self.cfg["metrics_file"], exposition(self.cfg["unit"], self.figures(wall)))
        if failed != self.export_failed and failed:  # said once, not at every poll
            say(f"the figures for Prometheus cannot be written ({failed}); the watch goes on", "warning")
        self.export_failed = failed

    def figures(self, wall):
        """What the watch exports (:data:`EXPORTED`); the step's figures only for a judged interval."""
        slow = self.slowdown
        latest = (slow.latest or {}) if slow is not None else {}
        baseline = slow.baseline if slow is not None else None
        return {
            "vllm_ops_watch_updated_timestamp_seconds": wall,
            "vllm_ops_watch_stalls_total": self.stalls,
            "vllm_ops_watch_restarts_in_window": self.budget.count(wall),
            "vllm_ops_watch_gave_up": int(self.gave_up),
            "vllm_ops_watch_last_incident_timestamp_seconds": self.last_incident,
            "vllm_ops_watch_baseline_intervals": None if slow is None else (baseline or {}).get("intervals", 0),
            "vllm_ops_watch_step_seconds": None if "step_ms" not in latest else latest["step_ms"] / 1000.0,
            "vllm_ops_watch_step_expected_seconds": (None if "expected_ms" not in latest
                                                     else latest["expected_ms"] / 1000.0),
            "vllm_ops_watch_step_residual": latest.get("residual"),
            "vllm_ops_watch_step_band": latest.get("band"),
            "vllm_ops_watch_decode_batch": latest.get("batch"),
            "vllm_ops_watch_slowdown_since_timestamp_seconds": (None if slow is None or slow.above_since is None
                                                                else slow.above_since[1]),
            **self.links.figures(),
        }

    def step_words(self):
        """The last judged interval in words, for the status line; empty when there is none."""
        latest = self.slowdown.latest if self.slowdown is not None else None
        if not latest:
            return ""
        if "unjudged" in latest:
            return f"; step {latest['step_ms']:.1f} ms at batch {latest['batch']:.1f}, not judged: {latest['unjudged']}"
        if "residual" not in latest:
            learned = len(self.slowdown.learning)
            return (f"; step {latest['step_ms']:.1f} ms at batch {latest['batch']:.1f} (learning the baseline: "
                    f"{learned} of {self.cfg['baseline_intervals']:.0f} intervals)")
        return (f"; step {latest['step_ms']:.1f} ms at batch {latest['batch']:.1f}, {latest['residual']:+.0%} "
                f"against the baseline (band {latest['band']:.0%})")

    def poll(self):
        """One poll: read, judge, act. Returns the exit code to stop with, or None."""
        # The rule's clock is monotonic (a clock step is no stall); the restarts' times are the wall
        # clock's, kept across the watch's own restarts and the host's.
        cfg, now, wall = self.cfg, time.monotonic(), time.time()
        props = unit_props(cfg["unit"])
        status, text = fetch(cfg["url"] + "/metrics", cfg["request_timeout_s"])
        samples = parse_metrics(text) if status == 200 else None
        value = reading(samples) if samples is not None else None
        stalled = self.rule.observe(now, props.get("InvocationID"), value)
        if self.slowdown is not None:
            self.slowdown.observe(now, wall, props.get("InvocationID"), samples)
            if samples is not None:
                self.scrapes.append((wall, props.get("InvocationID"),
                                     {k: samples[k] for k in step_model.NAMES if k in samples}))
            self.answer_baseline_request(wall)
        self.links.observe(now, value is not None and value["busy"] > 0)
        holder = lock_holder(cfg["lock_file"], wall)
        if holder:
            self.job_seen = {"at": wall, "holder": holder}
        if not stalled:
            self.recorded = None
            held = self.slowdown.held_s(now) if self.slowdown is not None else None
            if held is not None and held >= cfg["capture_after_s"] and not self.slowdown.reported:
                self.slowdown_incident(props, text, held, holder)
            last = self.rule.last
            said = ("not answering (loading or stopped)" if value is None else
                    f"no {STEPS} or {TOKENS} in /metrics: nothing to judge progress by" if last is None else
                    "idle" if last["busy"] <= 0 else
                    f"{last['busy']:.0f} request(s) in flight, advancing" + self.step_words())
            notify(f"STATUS={said}; stall after {self.rule.stall_s:.0f} s; "
                   f"{self.budget.count(wall)} restart(s) in the window")
            self.write_state(now, said)
            return None
        if self.recorded == props.get("InvocationID"):
            return None  # this stall is recorded already, and a job holds the lock
        self.stalls += 1
        stall = {"stalled_s": round(stalled, 1), "stall_s": round(self.rule.stall_s, 1),
                 "reading": value, "derived": self.rule.configured <= 0}
        path, incident = collect(cfg, props, text, stall, wall)
        self.last_incident = wall
        say(f"stalled for {stalled:.0f} s with {value['busy']:.0f} request(s) in flight: {incident['verdict']}; "
            f"evidence in {path}", "error")
        if holder:
            incident["action"] = {"taken": "none", "why": f"{holder} holds the host's lock ({cfg['lock_file']})"}
            self.recorded = props.get("InvocationID")
            save(path, incident)
            say(f"{holder} holds the lock: recorded, not restarted", "warning")
        elif not self.budget.allows(wall):
            incident["action"] = {"taken": "none", "why": f"{cfg['max_restarts']} restart(s) in the last "
                                  f"{cfg['restart_window_s']:.0f} s already: the watch gives up"}
            save(path, incident)
            said = (f"gave up: stalled again after {cfg['max_restarts']} restart(s) in "
                    f"{cfg['restart_window_s']:.0f} s; evidence in {path}; restart by hand once understood")
            say(said, "error")
            notify(f"STATUS={said}")
            self.gave_up = True
            self.write_state(now, said)
            return EXIT_GAVE_UP
        else:
            self.budget.spend(wall)
            # The incident is on disk before the restart (its wait may last a whole load, and the
            # watch may not live through it); ok is null until the new start answered or gave up.
            incident["action"] = {"taken": "restart", "ok": None, "old_main_pid": int(props.get("MainPID") or 0)}
            save(path, incident)
            incident["action"] = self.restart(props)
            save(path, incident)
        prune(cfg["incidents_dir"], cfg["keep"], cfg["max_bytes"])
        self.write_state(now, f"incident {os.path.basename(path)}: {incident['verdict']}")
        return None

    def answer_baseline_request(self, wall):
        """A request in the incidents directory to fit the baseline on a past window: read, answered (in the
        state and the journal), removed."""
        path = os.path.join(self.cfg["incidents_dir"], BASELINE_REQUEST)
        if not os.path.exists(path):
            return
        request = _load_json(path)
        with contextlib.suppress(OSError):
            os.unlink(path)
        try:
            start, end, by = float(request["from"]), float(request["to"]), str(request.get("by") or "a request")
        except (KeyError, TypeError, ValueError):
            ok, said, start, end, by = False, f"{path} is no request (from, to, by): ignored", None, None, None
        else:
            ok, said = self.slowdown.fit_window(self.scrapes, start, end, by)
        self.baseline_request = {"at": wall, "by": by, "from": start, "to": end, "ok": ok, "said": said}
        say(said, "info" if ok else "warning")

    def capture_refused(self, wall, holder):
        """Why no live capture may run now, or None: off, not armed, a job holding the lock, or a job or a
        capture within ``capture_min_interval_s``."""
        cfg = self.cfg
        if not cfg["auto_capture"]:
            return "automatic capture is off (vllm_watch_auto_capture)"
        if not cfg["armed"]:
            return "the service's profiler is not armed (vllm_profiler_armed): a live capture needs it"
        if profiler is None:
            return "the watch's vllm_ops_profiler.py is missing: re-run playbooks/deploy.yml"
        if holder:
            return f"{holder} holds the host's lock ({cfg['lock_file']})"
        for what, at in (("a job (" + ((self.job_seen or {}).get("holder") or "") + ") held the host's lock",
                          (self.job_seen or {}).get("at")), ("the last capture ran", self.last_capture)):
            if at is not None and wall - at < cfg["capture_min_interval_s"]:
                return (f"{what} {wall - at:.0f} s ago, within vllm_watch_capture_min_interval_s "
                        f"({cfg['capture_min_interval_s']:.0f} s)")
        return None

    def slowdown_incident(self, props, metrics_text, held, holder):
        """A slowdown that held ``capture_after_s``: its incident (the figures, the baseline, what changed on
        the host since it), then the live capture when one may run. One an episode."""
        cfg, slow, wall = self.cfg, self.slowdown, time.time()
        slow.reported = True
        latest, baseline = slow.above[-1], slow.baseline  # the last judged interval above the band
        stamp, path = incident_dir(cfg, wall)
        _write(os.path.join(path, "metrics.txt"), metrics_text or "(no answer)")
        now_host = fingerprint(cfg, self.links)
        changed = changes((slow.record or {}).get("host"), now_host)
        since = _utc(slow.above_since[1])
        verdict_text = (f"decode steps {latest['residual']:+.0%} at the same load (batch {latest['batch']:.1f}: "
                        f"{latest['step_ms']:.2f} ms against the baseline's {latest['expected_ms']:.2f}) since "
                        f"{since}, beyond the baseline's band of {latest['band']:.0%}")
        incident = {
            "schema": INCIDENT_SCHEMA, "kind": "slowdown", "time": stamp, "unit": cfg["unit"],
            "invocation_id": props.get("InvocationID"), "main_pid": int(props.get("MainPID") or 0),
            "verdict": verdict_text, "stall": None, "processes": [],
            "nccl_environment": nccl_environment(cfg.get("environment_files") or []), "nvidia_smi": False,
            "slowdown": {"since": since, "held_s": round(held, 1), "latest": latest, "intervals": slow.above,
                         "baseline": baseline, "fitted_at": _utc((slow.record or {}).get("fitted_at") or wall),
                         "baseline_by": (slow.record or {}).get("by"),
                         "host_at_baseline": (slow.record or {}).get("host"), "host_now": now_host,
                         "changes": changed},
            "action": None,
        }
        self.last_incident = wall
        say(f"slowdown: {verdict_text}" + (f"; changed since the baseline: {'; '.join(changed)}" if changed else ""),
            "warning")
        refused = self.capture_refused(wall, holder)
        if refused:
            incident["action"] = {"taken": "none", "why": refused}
            save(path, incident)
        else:
            save(path, incident)  # the figures on disk before the capture, which may take minutes
            self.last_capture = wall
            say(f"capturing {cfg['capture_s']:.0f} s of the service's own traffic under the profiler", "info")
            done = live_capture(cfg, path, f"watch-{stamp}")
            incident["capture"] = done
            incident["action"] = ({"taken": "capture", "ok": True} if done["ok"] else
                                  {"taken": "capture", "ok": False, "why": done["why"]})
            save(path, incident)
            say(f"live capture in {path}/capture" if done["ok"] else f"live capture failed: {done['why']}",
                "info" if done["ok"] else "error")
        prune(cfg["incidents_dir"], cfg["keep"], cfg["max_bytes"])
        return path

    def restart(self, props):
        """SIGKILL to every process of the server (a stalled engine has nothing to save, and a hung one
        may not heed the SIGTERM of a stop): the others first, then, once they are gone, the main
        process, so that systemd finds the unit's cgroup empty when its main process exits and starts
        it again at once (``Restart=always``). Waited for until ``/health`` answers 200."""
        cfg, pid = self.cfg, int(props.get("MainPID") or 0)
        if pid <= 0:  # never kill(0): that is the watch's own process group
            return {"taken": "restart", "ok": False, "why": "the server has no main process to end"}
        others = [p for p in cgroup_pids(props.get("ControlGroup")) if p > 0 and p != pid]
        say(f"restarting {cfg['unit']}: SIGKILL to its {len(others)} other process(es), then to its main "
            f"process {pid}; systemd starts it again", "warning")
        t0 = time.monotonic()
        failed = []
        for each in [*others, pid]:
            if each == pid:  # the others gone (or zombies, reaped with the main process) first
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and any(_alive(p) for p in others):
                    time.sleep(0.05)
            try:
                os.kill(each, signal.SIGKILL)
            except ProcessLookupError:
                pass
            except OSError as exc:
                failed.append(f"{each}: {exc.strerror}")
        if failed and failed[-1].startswith(f"{pid}:"):
            return {"taken": "restart", "ok": False, "why": f"could not end the main process {failed[0]}"}
        new, healthy_at = wait_restarted(cfg, props.get("InvocationID"), t0 + cfg["health_timeout_s"])
        healthy, waited = healthy_at is not None, round((healthy_at or time.monotonic()) - t0, 1)
        load = restart_load(cfg, new, healthy_at)
        result = {"taken": "restart", "ok": healthy, "old_main_pid": pid, "main_pid": int(new.get("MainPID") or 0),
                  "invocation_id": new.get("InvocationID"), "seconds_to_healthy": waited if healthy else None,
                  "load": load}
        said = (f"healthy again in {waited:.0f} s, main PID {result['main_pid']}" if healthy
                else f"not healthy after {waited:.0f} s")
        if loads is not None and "error" not in load:
            said += f"; {loads.load_words(load)}"
        say(f"{cfg['unit']} {said}", "info" if healthy else "error")
        return result


def _alive(pid):
    """Whether ``pid`` still runs (a zombie does not: it only waits for its parent)."""
    state = _status_field(_read(f"/proc/{pid}/status", ""), "State")
    return state is not None and not state.startswith(("Z", "X"))


def _load_json(path):
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _when(text):
    """A time given to ``--baseline-window``: Unix seconds, or ISO 8601 (a ``Z`` or an offset; UTC without)."""
    try:
        return float(text)
    except ValueError:
        pass
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


def request_baseline(cfg, start, end, by):
    """Ask the running watch to fit its baseline on ``[start, end]``; the line to print: ``unchanged`` when
    its baseline is that window's already, else ``requested``."""
    current = _load_json(os.path.join(cfg["incidents_dir"], "baseline.json"))
    if current.get("by") == by and (current.get("baseline") or {}).get("window") == [start, end]:
        return f"unchanged: the baseline is {by}'s window already"
    _write(os.path.join(cfg["incidents_dir"], BASELINE_REQUEST),
           json.dumps({"from": start, "to": end, "by": by}, sort_keys=True) + "\n", 0o644)
    return (f"requested: the watch fits its baseline on {by}'s window {_utc(start)} to {_utc(end)} at its next "
            "poll (journalctl -u vllm-ops-watch says how it went)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="/usr/local/lib/vllm-ops/watch/watch.json")
    window = parser.add_mutually_exclusive_group()
    window.add_argument("--baseline-window", nargs=2, metavar=("FROM", "TO"),
                        help="ask the running watch to fit its baseline on this known-good window (Unix seconds or "
                             "ISO 8601 times) of the /metrics it kept, then exit")
    window.add_argument("--baseline-last", type=float, metavar="SECONDS",
                        help="the same for the last SECONDS (a benchmark that just ended)")
    parser.add_argument("--by", default="an operator", help="who vouches for the window (a job, a person)")
    args = parser.parse_args(argv)
    try:
        cfg = watch_config.load(args.config)
    except watch_config.WatchConfigError as exc:
        parser.error(str(exc))
    if args.baseline_window or args.baseline_last:
        now = time.time()
        try:
            start, end = ((now - args.baseline_last, now) if args.baseline_last
                          else tuple(_when(t) for t in args.baseline_window))
        except ValueError as exc:
            parser.error(f"--baseline-window: {exc}")
        if end <= start:
            parser.error(f"--baseline-window: {_utc(end)} is not after {_utc(start)}")
        print(request_baseline(cfg, start, end, args.by))
        return 0
    os.makedirs(cfg["incidents_dir"], exist_ok=True)
    watch = Watch(cfg)
    say(f"watching {cfg['unit']} at {cfg['url']}/metrics every {cfg['interval_s']:.0f} s; stall after "
        + (f"{cfg['stall_s']:.0f} s" if cfg["stall_s"] > 0 else
           f"{STALL_FACTOR}x the longest gap between steps seen, at least {cfg['stall_floor_s']:.0f} s")
        + f"; at most {cfg['max_restarts']} restart(s) in {cfg['restart_window_s']:.0f} s")
    notify("READY=1")
    while True:
        try:
            code = watch.poll()
        except Exception:  # a watch that dies on one odd poll watches nothing
            say("a poll failed, the watch goes on: " + " | ".join(traceback.format_exc().splitlines()[-3:]), "error")
            code = None
        if code is not None:
            return code
        time.sleep(cfg["interval_s"])


if __name__ == "__main__":
    sys.exit(main())
