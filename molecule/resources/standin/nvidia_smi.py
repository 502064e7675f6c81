#!/usr/bin/python3
"""A stand-in for ``nvidia-smi`` on a host whose GPUs are simulated.

Test double for the sandbox host, installed as /usr/local/bin/nvidia-smi.
GPUs are the numeric device files matched by GPU_SIM_DEVICE_GLOB (default
/dev/nvidia[0-9]*); a GPU's compute processes are the processes holding its
device file open (found through /proc/*/fd, so run it as root to see all, as
the real tool does); the memory a process uses is the MiB in its claim file
GPU_SIM_CLAIM_DIR/<pid> (written by the vLLM stand-in's workers), else 256.
Each GPU's PCIe link is Gen5 x16 (GPU_SIM_PCIE_GEN, GPU_SIM_PCIE_WIDTH); an idle GPU (no
holder) reports Gen1, as a real one lowers its link speed when idle; the fault switch
pcie-link-degraded in VLLM_STANDIN_FAULT_DIR trains chosen GPUs' links lower.

Python 3.11 standard library only. See README.md next to this file.
"""

import glob
import os
import re
import sys
import time
import uuid

DRIVER = "570.133.20"
CUDA = "12.8"
DEFAULT_HOLDER_MIB = 256
BUS_IDS = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]

GPU_FIELDS = {  # query name -> (header, unit)
    "index": ("index", None),
    "name": ("name", None),
    "gpu_name": ("name", None),
    "uuid": ("uuid", None),
    "gpu_uuid": ("uuid", None),
    "pci.bus_id": ("pci.bus_id", None),
    "gpu_bus_id": ("pci.bus_id", None),
    "count": ("count", None),
    "driver_version": ("driver_version", None),
    "memory.used": ("memory.used", "MiB"),
    "memory.total": ("memory.total", "MiB"),
    "memory.free": ("memory.free", "MiB"),
    "utilization.gpu": ("utilization.gpu", "%"),
    # Deprecated since driver 5xx in favour of gpucurrent, still answered, as the real tool does.
    "pcie.link.gen.current": ("pcie.link.gen.current", None),
    "pcie.link.gen.gpucurrent": ("pcie.link.gen.gpucurrent", None),
    "pcie.link.gen.max": ("pcie.link.gen.max", None),
    "pcie.link.gen.gpumax": ("pcie.link.gen.gpumax", None),
    "pcie.link.gen.hostmax": ("pcie.link.gen.hostmax", None),
    "pcie.link.width.current": ("pcie.link.width.current", None),
    "pcie.link.width.max": ("pcie.link.width.max", None),
}
P2P_CAPABILITIES = {"r": "P2P Read", "w": "P2P Write", "n": "NVLink", "a": "Atomics", "p": "PCIe"}
P2P_LEGEND = ["", "Legend:", "", "  X    = Self", "  OK   = Status Ok", "  CNS  = Chipset not supported",
              "  GNS  = GPU not supported", "  TNS  = Topology not supported", "  NS   = Not supported",
              "  U    = Unknown"]
APP_FIELDS = {
    "pid": ("pid", None),
    "process_name": ("process_name", None),
    "name": ("process_name", None),
    "used_memory": ("used_gpu_memory", "MiB"),
    "used_gpu_memory": ("used_gpu_memory", "MiB"),
    "gpu_uuid": ("gpu_uuid", None),
    "gpu_bus_id": ("gpu_bus_id", None),
    "gpu_name": ("gpu_name", None),
}


class Usage(Exception):
    """Bad invocation: message for the user and exit status."""

    def __init__(self, message, status=2):
        super().__init__(message)
        self.status = status


def gpu_name():
    return os.environ.get("GPU_SIM_NAME", "NVIDIA H200")


def total_mib():
    try:
        return int(float(os.environ.get("GPU_SIM_TOTAL_MIB", "143771")))
    except ValueError:
        return 143771


def find_gpus():
    """Map GPU index -> real path of its device file (numeric names only)."""
    gpus = {}
    for path in glob.glob(os.environ.get("GPU_SIM_DEVICE_GLOB", "/dev/nvidia[0-9]*")):
        match = re.fullmatch(r"\D*(\d+)", os.path.basename(path))
        if match:
            gpus[int(match.group(1))] = os.path.realpath(path)
    return dict(sorted(gpus.items()))


def gpu_uuid(index):
    host_seed = os.environ.get("GPU_SIM_UUID_SEED", "vllm-sandbox")
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{host_seed}.gpu{index}"))


def bus_id(index):
    return f"00000000:{BUS_IDS[index % len(BUS_IDS)]}:00.0"


def _knob_int(name, default):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def fault_path(name):
    return os.path.join(os.environ.get("VLLM_STANDIN_FAULT_DIR", "/run/vllm-standin"), name)


def read_switch(name):
    """A fault switch's content, or None when it is off (absent)."""
    try:
        with open(fault_path(name), encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return None


def degraded_links(gpus):
    """``{index: (width, gen or None)}`` from the switch ``pcie-link-degraded``: one token per GPU,
    ``INDEX``, ``INDEX:xWIDTH``, ``INDEX:genGEN`` or ``INDEX:xWIDTH:genGEN`` (spaces or commas between
    tokens); an index alone trains x4 at its generation; an empty switch degrades every GPU."""
    content = read_switch("pcie-link-degraded")
    if content is None:
        return {}
    tokens = [t for t in re.split(r"[\s,]+", content) if t]
    if not tokens:
        return {index: (4, None) for index in gpus}
    out = {}
    for token in tokens:
        index, *parts = token.split(":")
        width, gen = 4, None
        if any(p.startswith("gen") for p in parts) and not any(p.startswith("x") for p in parts):
            width = None
        for part in parts:
            if part.startswith("x") and part[1:].isdigit():
                width = int(part[1:])
            elif part.startswith("gen") and part[3:].isdigit():
                gen = int(part[3:])
        if index.isdigit():
            out[int(index)] = (width, gen)
    return out


def p2p_unsupported():
    """Pairs ``{(i, j)}`` the switch ``p2p-read-unsupported`` marks CNS in ``topo -p2p r``: tokens
    ``I-J`` (spaces or commas between them); an empty switch marks every pair."""
    content = read_switch("p2p-read-unsupported")
    if content is None:
        return set()
    pairs = set()
    for token in (t for t in re.split(r"[\s,]+", content) if t):
        left, _, right = token.partition("-")
        if left.isdigit() and right.isdigit():
            pairs |= {(int(left), int(right)), (int(right), int(left))}
    return pairs or {"all"}


def holders(gpus):
    """Map GPU index -> sorted pids of live processes holding its device file."""
    by_path = {path: index for index, path in gpus.items()}
    found = {index: set() for index in gpus}
    for proc in glob.glob("/proc/[0-9]*"):
        pid = int(os.path.basename(proc))
        try:
            fds = os.listdir(f"{proc}/fd")
        except OSError:
            continue  # gone, or another user's process and we are not root
        for fd in fds:
            try:
                target = os.readlink(f"{proc}/fd/{fd}")
            except OSError:
                continue
            if target in by_path and pid != os.getpid():
                found[by_path[target]].add(pid)
    return {index: sorted(pids) for index, pids in found.items()}


def claimed_mib(pid):
    claim_dir = os.environ.get("GPU_SIM_CLAIM_DIR", "/run/gpu-sim")
    try:
        with open(os.path.join(claim_dir, str(pid)), encoding="utf-8") as fh:
            return int(float(fh.read().strip()))
    except (OSError, ValueError):
        return DEFAULT_HOLDER_MIB


def process_name(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv0 = fh.read().split(b"\0")[0].decode(errors="replace")
        if argv0:
            return argv0
        with open(f"/proc/{pid}/comm", encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return "[Not Found]"


class Snapshot:
    """Everything the reports need, read once."""

    def __init__(self, only=None):
        self.gpus = find_gpus()
        if not self.gpus:
            raise Usage("No devices were found", 6)
        if only is not None:
            missing = [i for i in only if i not in self.gpus]
            if missing:
                raise Usage("No devices were found", 6)
            self.gpus = {i: p for i, p in self.gpus.items() if i in only}
        self.holders = holders(self.gpus)
        self.apps = [(index, pid, claimed_mib(pid))
                     for index, pids in self.holders.items() for pid in pids]
        self.degraded = degraded_links(self.gpus)

    def link(self, index):
        """``(gen current, gen max, width current, width max)``: the maximum is what the GPU and
        the slot support; the current speed drops to Gen1 while the GPU idles (no holder)."""
        gen_max, width_max = _knob_int("GPU_SIM_PCIE_GEN", 5), _knob_int("GPU_SIM_PCIE_WIDTH", 16)
        width, gen = self.degraded.get(index, (None, None))
        trained_gen = min(gen or gen_max, gen_max)
        return (trained_gen if self.holders[index] else 1, gen_max,
                min(width or width_max, width_max), width_max)

    def used(self, index):
        return sum(mib for i, _, mib in self.apps if i == index)

    def gpu_value(self, index, field):
        gen, gen_max, width, width_max = self.link(index)
        values = {
            "index": index, "name": gpu_name(), "uuid": gpu_uuid(index),
            "pci.bus_id": bus_id(index), "count": len(self.gpus),
            "driver_version": DRIVER, "memory.used": self.used(index),
            "memory.total": total_mib(), "memory.free": total_mib() - self.used(index),
            "utilization.gpu": 45 if self.holders[index] else 0,
            "pcie.link.gen.current": gen, "pcie.link.gen.gpucurrent": gen,
            "pcie.link.gen.max": gen_max, "pcie.link.gen.gpumax": gen_max,
            "pcie.link.gen.hostmax": gen_max,
            "pcie.link.width.current": width, "pcie.link.width.max": width_max,
        }
        return values[GPU_FIELDS[field][0]]

    def app_value(self, app, field):
        index, pid, mib = app
        values = {"pid": pid, "process_name": process_name(pid), "used_gpu_memory": mib,
                  "gpu_uuid": gpu_uuid(index), "gpu_bus_id": bus_id(index),
                  "gpu_name": gpu_name()}
        return values[APP_FIELDS[field][0]]


def parse_format(text):
    if text is None:
        raise Usage('Please specify the output format with --format, e.g. "--format=csv".')
    opts = [o.strip() for o in text.split(",")]
    if "csv" not in opts or not set(opts) <= {"csv", "noheader", "nounits"}:
        raise Usage(f'"{text}" is not a valid format.')
    return "noheader" not in opts, "nounits" not in opts


def csv_report(fields, table, rows, value, fmt):
    header, units = parse_format(fmt)
    out = []
    if header:
        out.append(", ".join(table[f][0] + (f" [{table[f][1]}]" if table[f][1] else "")
                             for f in fields))
    for row in rows:
        cells = []
        for field in fields:
            cell = str(value(row, field))
            if units and table[field][1]:
                cell += f" {table[field][1]}"
            cells.append(cell)
        out.append(", ".join(cells))
    return out


def row(left, middle, right):
    """One line of the GPU table: cells 41, 24 and 22 wide, as the real one."""
    return f"| {left:<39} | {middle:>22} | {right:>20} |"


def summary(snap):
    w = 89
    out = [time.strftime("%a %b %d %H:%M:%S %Y"), "+" + "-" * w + "+",
           f"| NVIDIA-SMI {DRIVER:<22} Driver Version: {DRIVER:<14} CUDA Version: {CUDA:<9}|",
           "|" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+",
           "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | "
           "Volatile Uncorr. ECC |",
           "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | "
           "GPU-Util  Compute M. |",
           "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|"]
    for index in snap.gpus:
        busy = bool(snap.holders[index])
        mem = f"{snap.used(index)}MiB / {total_mib()}MiB"
        power = f"{76 + 90 * busy}W /  700W"
        out += [row(f"{index:>3}  {gpu_name():<26}{'On':>6}  ", f"{bus_id(index)} Off",
                    "0"),
                row(f"N/A   {31 + 6 * busy}C    P0{power:>24}", mem,
                    f"{('45%' if busy else '0%'):>6}      Default"),
                row("", "", "Disabled"),
                "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"]
    out += ["", "+" + "-" * w + "+", "| Processes:" + " " * (w - 11) + "|",
            "|  GPU   GI   CI              PID   Type   Process name" + " " * 24
            + "GPU Memory |",
            "|        ID   ID" + " " * 63 + "Usage      |", "|" + "=" * w + "|"]
    if not snap.apps:
        out.append("|  No running processes found" + " " * (w - 28) + "|")
    for index, pid, mib in snap.apps:
        name = process_name(pid)[:31]
        line = f"  {index:>3}   N/A  N/A  {pid:>15}      C   {name:<32}{f'{mib}MiB':>13} "
        out.append("|" + line[:w].rjust(w) + "|")
    out.append("+" + "-" * w + "+")
    return out


def topology(gpus):
    """``nvidia-smi topo -m``: the GPU matrix, each pair linked by GPU_SIM_TOPO_LINK (default
    PIX: one PCIe switch, as on an 8-GPU PCIe host; NV18 for an NVLink host), and the legend."""
    link = os.environ.get("GPU_SIM_TOPO_LINK", "PIX")
    names = [f"GPU{i}" for i in gpus]
    out = ["\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for row in names:
        cells = [" X " if col == row else link for col in names]
        out.append(f"{row}\t" + "\t".join(cells) + "\t0-47\t0\t\tN/A")
    out += ["", "Legend:", "", "  X    = Self",
            "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
            "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a "
            "NUMA node",
            "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
            "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
            "  PIX  = Connection traversing at most a single PCIe bridge",
            "  NV#  = Connection traversing a bonded set of # NVLinks"]
    return out


def p2p_matrix(gpus, capability):
    """``nvidia-smi topo -p2p CAP``: OK for every pair (a PCIe switch with P2P on), NS for NVLink
    on a host whose GPU_SIM_TOPO_LINK is not NV#, CNS for the pairs the switch
    p2p-read-unsupported names (read only), then the legend."""
    nvlink = os.environ.get("GPU_SIM_TOPO_LINK", "PIX").startswith("NV")
    off = p2p_unsupported() if capability == "r" else set()
    names = [f"GPU{i}" for i in gpus]
    out = ["\t" + "\t".join(names)]
    for i in gpus:
        cells = []
        for j in gpus:
            if i == j:
                cells.append("X")
            elif capability == "n" and not nvlink:
                cells.append("NS")
            elif "all" in off or (i, j) in off:
                cells.append("CNS")
            else:
                cells.append("OK")
        out.append(f" GPU{i}\t" + "\t".join(cells))
    return out + P2P_LEGEND


def parse_args(argv):
    opts = {"query_gpu": None, "query_apps": None, "format": None, "list": False,
            "only": None}
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, eq, val = arg.partition("=")
        if key in ("--query-gpu", "--query-compute-apps", "--format", "-i", "--id"):
            if not eq:
                if i + 1 >= len(argv):
                    raise Usage(f"Option {key} requires a value.")
                val, i = argv[i + 1], i + 1
            if key == "--query-gpu":
                opts["query_gpu"] = val
            elif key == "--query-compute-apps":
                opts["query_apps"] = val
            elif key == "--format":
                opts["format"] = val
            else:
                try:
                    opts["only"] = [int(v) for v in val.split(",")]
                except ValueError:
                    raise Usage('Invalid combination of input arguments. Please run '
                                '"nvidia-smi -h" for help.') from None
        elif arg in ("-L", "--list-gpus"):
            opts["list"] = True
        elif arg in ("-h", "--help"):
            raise Usage(__doc__.strip(), 0)
        else:
            raise Usage("Invalid combination of input arguments. Please run "
                        '"nvidia-smi -h" for help.')
        i += 1
    return opts


def fields_of(text):
    return [f.strip() for f in text.split(",") if f.strip()]


def run(argv):
    if argv[:1] == ["topo"]:
        p2p = len(argv) == 3 and argv[1] == "-p2p" and argv[2] in P2P_CAPABILITIES
        if argv[1:] != ["-m"] and not p2p:
            raise Usage('Invalid combination of input arguments. Please run "nvidia-smi topo -h" for help.')
        gpus = find_gpus()
        if not gpus:
            raise Usage("No devices were found", 6)
        return p2p_matrix(gpus, argv[2]) if p2p else topology(gpus)
    opts = parse_args(argv)
    if opts["query_gpu"] is not None or opts["query_apps"] is not None:
        query, table = (opts["query_gpu"], GPU_FIELDS) if opts["query_gpu"] is not None \
            else (opts["query_apps"], APP_FIELDS)
        fields = fields_of(query)
        for field in fields:  # validated before looking at any GPU, as the real one
            if field not in table:
                raise Usage(f'Field "{field}" is not a valid field to query.')
        parse_format(opts["format"])
        snap = Snapshot(opts["only"])
        if opts["query_gpu"] is not None:
            return csv_report(fields, table, list(snap.gpus), snap.gpu_value, opts["format"])
        return csv_report(fields, table, snap.apps, snap.app_value, opts["format"])
    snap = Snapshot(opts["only"])
    if opts["list"]:
        return [f"GPU {i}: {gpu_name()} (UUID: {gpu_uuid(i)})" for i in snap.gpus]
    return summary(snap)


def main(argv):
    try:
        lines = run(argv)
    except Usage as exc:
        print(exc)
        return exc.status
    if lines:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
