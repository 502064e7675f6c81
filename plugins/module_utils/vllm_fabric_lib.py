"""The GPUs' PCIe links read on the host while the profiled requests run (vllm_profile_run's sampler).

Standard library only, Python 3.9: this runs on the managed host. A link's generation drops while
its GPU idles, so a reading is only evidence under load: the sampler starts at the first token of
a profiled request, reads ``nvidia-smi --query-gpu`` every ``interval_s`` until the requests end,
and keeps per GPU the reading with its link most up (highest generation, then width, then GPU
utilization): a link that trained lower never reads higher, a healthy one reads its maximum under
load. With the first reading it asks which process holds which GPU
(``--query-compute-apps``: the workers, so the controller can put ranks on GPUs) and the read
peer-to-peer matrix (``topo -p2p r``). The controller judges (``vllm_ops.fabric``); this only reads.

Each reading is one nvidia-smi run (tens of milliseconds of CPU on a GPU host), beside the profiled
server: keep ``interval_s`` at a second or more.
"""

import re
import subprocess
import threading
import time

# Tried in this order: drivers before gpucurrent/gpumax/hostmax (R535 has none of them) answer the
# second, whose pcie.link.gen.current newer drivers still accept as deprecated.
QUERIES = (
    ("index", "pci.bus_id", "uuid", "utilization.gpu", "pcie.link.gen.gpucurrent", "pcie.link.gen.max",
     "pcie.link.gen.gpumax", "pcie.link.gen.hostmax", "pcie.link.width.current", "pcie.link.width.max"),
    ("index", "pci.bus_id", "uuid", "utilization.gpu", "pcie.link.gen.current", "pcie.link.gen.max",
     "pcie.link.width.current", "pcie.link.width.max"),
)
# nvidia-smi field -> key of a reading: the one table, which the controller's judge (vllm_ops.fabric) reads too.
FIELD_KEYS = {
    "index": "index",
    "pci.bus_id": "bus_id",
    "uuid": "uuid",
    "utilization.gpu": "utilization_pct",
    "pcie.link.gen.gpucurrent": "gen_current",
    "pcie.link.gen.current": "gen_current",
    "pcie.link.gen.max": "gen_max",
    "pcie.link.gen.gpumax": "gen_gpu_max",
    "pcie.link.gen.hostmax": "gen_host_max",
    "pcie.link.width.current": "width_current",
    "pcie.link.width.max": "width_max",
}
APPS_FIELDS = ("pid", "process_name", "gpu_bus_id", "used_memory")
APPS_KEYS = {"pid": "pid", "process_name": "process_name", "gpu_bus_id": "bus_id", "used_memory": "used_mib"}
TEXT_KEYS = ("bus_id", "uuid", "process_name")
FORMAT = "--format=csv,noheader,nounits"
DURING = "during the profiled requests"


class FabricError(Exception):
    """nvidia-smi could not be asked; the message is the reason, in words."""


def field_value(key, text):
    """A cell of nvidia-smi's CSV as the reading keeps it: None for a value not given ([N/A], [Not Supported]),
    a bus id upper-cased, a name as it is, a number (a percent's too) as an int."""
    text = text.strip()
    if not text or text.startswith("[") or text == "N/A":
        return None
    if key in TEXT_KEYS:
        return text.upper() if key == "bus_id" else text
    match = re.match(r"^(\d+)(?:\s*%)?$", text)
    return int(match.group(1)) if match else None


def parse_rows(text, fields, keys):
    """One dict per CSV line of ``--format=csv,noheader,nounits``; a line of another width raises."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split(",") if keys is not APPS_KEYS else _app_cells(line, len(fields))
        if len(cells) != len(fields):
            raise FabricError("nvidia-smi printed %r for %d fields" % (line, len(fields)))
        rows.append(dict((keys[f], field_value(keys[f], c)) for f, c in zip(fields, cells)))
    return rows


def _app_cells(line, count):
    """A compute-apps line: a process name may itself hold commas, so split around it."""
    head, _, rest = line.partition(",")
    parts = rest.rsplit(",", count - 2)
    return [head, *parts] if len(parts) == count - 1 else line.split(",")


def _rank_key(reading):
    return tuple(-1 if reading.get(k) is None else reading[k]
                 for k in ("gen_current", "width_current", "utilization_pct"))


def run_smi(nvidia_smi, args, runner, timeout_s):
    """nvidia-smi's stdout; FabricError with the reason when it is absent, fails or hangs."""
    try:
        done = runner([nvidia_smi, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                      universal_newlines=True, timeout=timeout_s)
    except FileNotFoundError:
        raise FabricError("%s not found on the host" % nvidia_smi) from None
    except OSError as exc:
        raise FabricError("%s could not be run: %s" % (nvidia_smi, exc.strerror or exc)) from None
    except subprocess.TimeoutExpired:
        raise FabricError("%s %s did not answer within %ss" % (nvidia_smi, " ".join(args), timeout_s)) from None
    if done.returncode != 0:
        said = (done.stdout or done.stderr or "").strip().splitlines()
        raise FabricError("%s %s failed (exit %d): %s" % (nvidia_smi, args[0], done.returncode,
                                                          said[0] if said else "no output"))
    return done.stdout


class Sampler:
    """Reads the links while the profiled requests run; see the module's docstring.

    ``busy()`` is called at a request's first token, ``stop()`` when the requests are over;
    ``record()`` is then capture.json's ``fabric``. ``runner`` and ``clock`` are for tests."""

    def __init__(self, nvidia_smi, interval_s=2.0, runner=subprocess.run, clock=time.monotonic,
                 timeout_s=20.0):
        self.nvidia_smi = nvidia_smi
        self.interval_s = max(float(interval_s), 0.0)
        self.runner = runner
        self.clock = clock
        self.timeout_s = timeout_s
        self.query = None
        self.best = {}
        self.samples = 0
        self.failed = 0
        self.errors = []
        self.reason = None
        self.compute_apps = []
        self.p2p_read = None
        self.started_at = None
        self._go = threading.Event()
        self._token = threading.Event()
        self._stop = threading.Event()
        self._thread = None

    # --- one reading -------------------------------------------------------------------------
    def _ask(self, args):
        return run_smi(self.nvidia_smi, args, self.runner, self.timeout_s)

    def _links(self):
        queries = [self.query] if self.query else list(QUERIES)
        last = None
        for fields in queries:
            try:
                text = self._ask(["--query-gpu=" + ",".join(fields), FORMAT])
            except FabricError as exc:
                last = exc
                if "not a valid field" in str(exc) or "exit 2)" in str(exc):
                    continue  # an older driver: the next query
                raise
            self.query = fields
            return parse_rows(text, fields, FIELD_KEYS)
        raise last

    def _first(self):
        try:
            self.compute_apps = parse_rows(self._ask(["--query-compute-apps=" + ",".join(APPS_FIELDS), FORMAT]),
                                           APPS_FIELDS, APPS_KEYS)
        except FabricError as exc:
            self.errors.append("compute apps not read: %s" % exc)
        try:
            self.p2p_read = self._ask(["topo", "-p2p", "r"])
        except FabricError as exc:
            self.errors.append("peer-to-peer matrix not read: %s" % exc)

    def sample(self):
        """One reading of every GPU's link, kept where it beats the one held; False once it gave up."""
        if self.reason:
            return False
        at = self.clock()
        try:
            rows = self._links()
        except FabricError as exc:
            if self.samples == 0:
                self.reason = str(exc)  # never read: no nvidia-smi, no GPU, no driver
                return False
            self.failed += 1
            if len(self.errors) < 5:
                self.errors.append(str(exc))
            return True
        if self.samples == 0:
            self.started_at = at
            self._first()
        self.samples += 1
        for row in rows:
            if row.get("index") is None:
                continue
            row["at_s"] = round(at - self.started_at, 3)
            held = self.best.get(row["index"])
            if held is None or _rank_key(row) > _rank_key(held):
                self.best[row["index"]] = row
        return True

    # --- the thread around the requests ------------------------------------------------------
    def _loop(self):
        self._go.wait()
        if not self._token.is_set():
            return  # the requests ended before any token: nothing ran that a reading would show
        while self.sample() and not self._stop.wait(self.interval_s):
            pass

    def start(self):
        self._thread = threading.Thread(target=self._loop, name="vllm-fabric-sampler")
        self._thread.daemon = True
        self._thread.start()

    def busy(self):
        """A profiled request produced a token: the GPUs run now."""
        if not self._token.is_set():
            self._token.set()
            self._go.set()

    def stop(self):
        self._stop.set()
        self._go.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s * 3 + self.interval_s)

    def record(self):
        """capture.json's ``fabric``: what was read, or why nothing was."""
        reason = self.reason
        if reason is None and self.samples == 0:
            reason = "no profiled request produced a token, so no reading was taken under load"
        return {
            "read": self.samples > 0,
            "reason": reason,
            "during": DURING,
            "interval_s": self.interval_s,
            "samples": self.samples,
            "failed_samples": self.failed,
            "query": list(self.query or []),
            "gpus": [self.best[i] for i in sorted(self.best)],
            "compute_apps": self.compute_apps,
            "p2p_read": self.p2p_read,
            "errors": self.errors,
        }


def not_asked(why):
    """The record of a capture that did not read the links (the reading is off)."""
    return {"read": False, "reason": why, "during": DURING, "interval_s": None, "samples": 0,
            "failed_samples": 0, "query": [], "gpus": [], "compute_apps": [], "p2p_read": None, "errors": []}
