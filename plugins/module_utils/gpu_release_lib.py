"""Find and release the holders of NVIDIA per-GPU device nodes.

Target-side logic of the ``gpu_release`` module. It runs on the managed host, so it imports
the Python standard library only (never the controller-side ``vllm_ops`` package) and stays
compatible with Python 3.9.

``release`` is four phases, each a plain function pytest can call on its own:

1. ``discover``, read-only: the devices (given, or ``discover_devices``: ``/dev/nvidiaN``,
   never the shared control nodes, which are refused), the classification rules, the holder
   finder, and from ``nvidia-smi`` each node's GPU index and the memory before.
2. ``classify_holders``: ``fuser <device>`` gives the PIDs holding each node (or, on a host
   without psmisc, ``/proc/<pid>/{fd,maps}`` read as fuser does), ``/proc/<pid>/{stat,comm,
   cmdline,status,cgroup}`` command, user and systemd unit, and ``classify`` sorts each
   holder: ``protected`` (this process or an ancestor), ``ignored`` (GPU daemons such as
   nvidia-persistenced), ``owned`` (the service's) or ``foreign``.
3. ``signal_holders``: ``terminate`` sends SIGTERM, waits for ``/proc/<pid>`` to vanish,
   sends SIGKILL to the survivors and waits again (zombies count as gone, and a PID whose
   start time changed, reused, is never signalled); classified again, up to ``MAX_ROUNDS``.
4. ``verify``: the holders still there and those left alive are problems, and
   ``wait_for_memory`` polls ``nvidia-smi`` until no released PID holds memory and every GPU
   that no foreign holder occupies is at or under the threshold.

``release`` composes them and returns a result dictionary the module hands to Ansible.
"""

import os
import pwd
import re
import shutil
import signal
import subprocess
import time

# Per-GPU nodes are /dev/nvidia0, /dev/nvidia1, ...: the number is the nvidia-smi index.
DEVICE_NAME_RE = re.compile(r"^nvidia(\d+)$")
# Shared control nodes: every CUDA client holds them, and so do nvidia-persistenced and DCGM.
SHARED_NODE_RE = re.compile(r"^nvidia(ctl|-uvm.*|-modeset|-caps.*|-nvswitch.*|-nvlink.*)$")

OWNED = "owned"
FOREIGN = "foreign"
IGNORED = "ignored"
PROTECTED = "protected"

# How often to look at /proc while waiting for a process to exit, and at nvidia-smi while
# waiting for the driver to free memory.
PROC_POLL_S = 0.1
MEMORY_POLL_S = 1.0
NVIDIA_SMI_TIMEOUT_S = 60
# Scan, release and scan again at most this many times: a dying parent may leave a child
# that opened the device late; anything still there after that is reported, not chased.
MAX_ROUNDS = 3

GPU_QUERY = ["--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]
MINOR_QUERY = ["--query-gpu=index,minor_number", "--format=csv,noheader,nounits"]
APPS_QUERY = ["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"]


class ReleaseError(Exception):
    """A condition that stops the release before or while it runs (bad input, tool failure)."""


# --------------------------------------------------------------------------- devices


def device_index(path):
    """GPU index of a per-GPU node (``/dev/nvidia3`` -> 3), or None for any other name."""
    match = DEVICE_NAME_RE.match(os.path.basename(path))
    return int(match.group(1)) if match else None


def discover_devices(dev_dir="/dev"):
    """The per-GPU nodes ``<dev_dir>/nvidiaN`` that exist, in index order."""
    try:
        names = os.listdir(dev_dir)
    except OSError:
        return []
    found = []
    for name in names:
        match = DEVICE_NAME_RE.match(name)
        if match:
            found.append((int(match.group(1)), os.path.join(dev_dir, name)))
    return [path for _, path in sorted(found)]


def validate_devices(devices):
    """Error messages for device paths that must never be released (empty when all fine)."""
    errors = []
    for path in devices:
        name = os.path.basename(path)
        if not os.path.isabs(path) or not name:
            errors.append("device %r is not an absolute path to a device node" % path)
        elif SHARED_NODE_RE.match(name):
            errors.append(
                "device %s is a shared control node: every CUDA client and GPU daemons such as "
                "nvidia-persistenced and DCGM hold it, so it must never be released; list the "
                "per-GPU nodes /dev/nvidiaN instead" % path
            )
    return errors


def compile_patterns(patterns, option):
    """Compile regular expressions, naming the option and the pattern when one is invalid."""
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise ReleaseError("%s: invalid regular expression %r: %s" % (option, pattern, exc)) from exc
    return compiled


def normalize_unit(name):
    """``vllm`` -> ``vllm.service``; names that already carry a unit suffix stay as they are."""
    name = name.strip()
    if name.endswith((".service", ".scope")):
        return name
    return name + ".service"


# --------------------------------------------------------------------------- /proc


def _read_text(path):
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8", "replace")


def parse_stat(text):
    """``(state, ppid, starttime)`` from ``/proc/<pid>/stat``.

    The command between the parentheses may itself hold spaces and parentheses, so the fields
    are counted from the last ``)``.
    """
    rest = text[text.rindex(")") + 2:].split()
    return rest[0], int(rest[1]), int(rest[19])


def unit_from_cgroup(text):
    """The systemd unit (``*.service`` or ``*.scope``) a ``/proc/<pid>/cgroup`` text names.

    Reads the unified (``0::``) or the ``name=systemd`` hierarchy and takes the deepest unit,
    so a service inside ``user@1000.service`` is named rather than the user manager.
    """
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if not ((hierarchy == "0" and controllers == "") or "name=systemd" in controllers.split(",")):
            continue
        for component in reversed(path.split("/")):
            if component.endswith((".service", ".scope")):
                return component
    return None


def _user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def read_process(pid, proc_root="/proc"):
    """What ``/proc/<pid>`` says about a process, or None when it is gone."""
    base = os.path.join(proc_root, str(pid))
    try:
        state, ppid, starttime = parse_stat(_read_text(os.path.join(base, "stat")))
    except (OSError, ValueError, IndexError):
        return None
    info = {
        "pid": pid,
        "ppid": ppid,
        "state": state,
        "starttime": starttime,
        "comm": "",
        "cmdline": "",
        "uid": None,
        "user": None,
        "unit": None,
    }
    try:
        info["comm"] = _read_text(os.path.join(base, "comm")).rstrip("\n")
        with open(os.path.join(base, "cmdline"), "rb") as handle:
            raw = handle.read()
        info["cmdline"] = " ".join(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a)
        for line in _read_text(os.path.join(base, "status")).splitlines():
            if line.startswith("Uid:"):
                info["uid"] = int(line.split()[2])  # effective UID, as ps shows it
                info["user"] = _user_name(info["uid"])
                break
        info["unit"] = unit_from_cgroup(_read_text(os.path.join(base, "cgroup")))
    except (OSError, ValueError, IndexError):
        # Exited while being read: the stat read above already has what identifies it.
        pass
    return info


def is_gone(pid, starttime=None, proc_root="/proc"):
    """True when the process has exited, is a zombie, or its PID now names another process."""
    try:
        state, _, current = parse_stat(_read_text(os.path.join(proc_root, str(pid), "stat")))
    except (OSError, ValueError, IndexError):
        return True
    if state in ("Z", "X", "x"):
        return True
    return starttime is not None and current != starttime


def protected_pids(pid=None, proc_root="/proc"):
    """This process, its ancestors and PID 1: never signalled, whatever they match."""
    pid = os.getpid() if pid is None else pid
    protected = {1}
    while pid and pid not in protected:
        protected.add(pid)
        info = read_process(pid, proc_root)
        if info is None:
            break
        pid = info["ppid"]
    return protected


# --------------------------------------------------------------------------- holders


def fuser_pids(fuser, path):
    """PIDs holding ``path`` according to ``fuser`` (PIDs on stdout, the rest on stderr).

    fuser exits 1 both when nothing holds the file and when the file is missing.
    """
    try:
        proc = subprocess.run(
            [fuser, path], capture_output=True, text=True, check=False,
        )
    except OSError as exc:
        raise ReleaseError("cannot run %s: %s" % (fuser, exc)) from exc
    if proc.returncode == 1:
        return []
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        raise ReleaseError("%s %s failed (rc %d): %s" % (fuser, path, proc.returncode, tail[0]))
    return sorted({int(token) for token in re.findall(r"\d+", proc.stdout)})


def _holds(base, key, real):
    for fd in os.listdir(os.path.join(base, "fd")):
        try:
            st = os.stat(os.path.join(base, "fd", fd))
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == key:
            return True
    with open(os.path.join(base, "maps"), "rb") as handle:
        return any(line.split(None, 5)[5:] == [real] for line in
                   handle.read().decode("utf-8", "replace").splitlines())


def proc_pids(path, proc_root="/proc"):
    """PIDs holding ``path`` open or mapped, read from ``/proc`` as fuser does.

    The fallback for hosts without psmisc: same answer for open files and mappings.
    """
    try:
        target = os.stat(path)
    except OSError:
        return []
    key = (target.st_dev, target.st_ino)
    real = os.path.realpath(path)
    pids = []
    for name in os.listdir(proc_root):
        if not name.isdigit():
            continue
        try:
            if _holds(os.path.join(proc_root, name), key, real):
                pids.append(int(name))
        except OSError:
            continue  # exited, or not ours to read
    return sorted(pids)


def classify(info, owned_res, owned_units, ignored_res, protected):
    """``(kind, reason)`` of one holder; the first rule that applies wins."""
    if info["pid"] in protected:
        return PROTECTED, "this module or one of its ancestors"
    texts = (info["comm"], info["cmdline"])
    for regex in ignored_res:
        if any(regex.search(text) for text in texts):
            return IGNORED, "matches ignored pattern %r" % regex.pattern
    if info["unit"] and info["unit"] in owned_units:
        return OWNED, "in owned unit %s" % info["unit"]
    for regex in owned_res:
        if any(regex.search(text) for text in texts):
            return OWNED, "matches owned pattern %r" % regex.pattern
    return FOREIGN, "matches no owned pattern or unit"


def scan(devices, finder, classifier, proc_root="/proc"):
    """``{device: [holder, ...]}``; a holder is ``read_process`` output plus kind and reason.

    ``finder(device)`` returns the PIDs holding a device (``fuser_pids`` or ``proc_pids``).
    """
    found = {}
    for device in devices:
        holders = []
        for pid in finder(device):
            info = read_process(pid, proc_root)
            if info is None or is_gone(pid, info["starttime"], proc_root):
                continue
            info["kind"], info["reason"] = classifier(info)
            holders.append(info)
        found[device] = holders
    return found


MAX_COMMAND_CHARS = 160


def describe(info):
    """``PID 12 (command 'sleep 300', user bob)`` for messages (long commands shortened)."""
    command = " ".join(info["cmdline"].split()) or "[%s]" % info["comm"]
    if len(command) > MAX_COMMAND_CHARS:
        command = command[:MAX_COMMAND_CHARS - 3] + "..."
    text = "PID %d (command %r, user %s" % (info["pid"], command, info["user"])
    if info.get("unit"):
        text += ", unit %s" % info["unit"]
    return text + ")"


# --------------------------------------------------------------------------- signals


def send_signal(pid, starttime, signum, proc_root="/proc"):
    """Signal the process if it is still the one that was scanned; True if a signal went out."""
    if is_gone(pid, starttime, proc_root):
        return False
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    except PermissionError as exc:
        raise ReleaseError(
            "not permitted to signal PID %d: run the module as root (become: true)" % pid
        ) from exc
    return True


def wait_gone(targets, timeout_s, proc_root="/proc", clock=time.monotonic, sleep=time.sleep):
    """Wait up to ``timeout_s`` for every ``{pid: starttime}`` to go; the survivors, sorted."""
    deadline = clock() + timeout_s
    while True:
        alive = sorted(pid for pid, start in targets.items() if not is_gone(pid, start, proc_root))
        if not alive or clock() >= deadline:
            return alive
        sleep(PROC_POLL_S)


def terminate(targets, term_timeout_s, kill_timeout_s, proc_root="/proc",
              clock=time.monotonic, sleep=time.sleep):
    """SIGTERM, wait, SIGKILL the survivors, wait: ``(signalled, killed, still_alive)``."""
    signalled = [pid for pid in sorted(targets)
                 if send_signal(pid, targets[pid], signal.SIGTERM, proc_root)]
    survivors = wait_gone({pid: targets[pid] for pid in signalled}, term_timeout_s,
                          proc_root, clock, sleep)
    killed = [pid for pid in survivors if send_signal(pid, targets[pid], signal.SIGKILL, proc_root)]
    left = wait_gone({pid: targets[pid] for pid in killed}, kill_timeout_s, proc_root, clock, sleep)
    return signalled, killed, left


# --------------------------------------------------------------------------- nvidia-smi


def resolve_command(command):
    """Absolute path of an executable given by name (searched on PATH) or path; else None."""
    if os.sep in command:
        return command if os.path.isfile(command) and os.access(command, os.X_OK) else None
    return shutil.which(command) or shutil.which(command, path="/usr/bin:/usr/sbin:/bin:/sbin")


def _run_nvidia_smi(nvidia_smi, args):
    try:
        proc = subprocess.run(
            [nvidia_smi, *args], capture_output=True, text=True, check=False,
            timeout=NVIDIA_SMI_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReleaseError("%s %s failed: %s" % (nvidia_smi, args[0], exc)) from exc
    if proc.returncode != 0:
        detail = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
        raise ReleaseError("%s %s failed (rc %d): %s" % (nvidia_smi, args[0], proc.returncode, detail))
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()]


def _mib(text):
    text = text.strip()
    return int(text) if text.isdigit() else None  # "[N/A]", "N/A"


def query_memory(nvidia_smi):
    """``{gpu_index: used_mib or None}`` from ``nvidia-smi --query-gpu=index,memory.used``."""
    memory = {}
    for line in _run_nvidia_smi(nvidia_smi, GPU_QUERY):
        fields = [field.strip() for field in line.split(",")]
        if len(fields) >= 2 and fields[0].isdigit():
            memory[int(fields[0])] = _mib(fields[1])
    return memory


def query_minor_numbers(nvidia_smi):
    """``{minor: gpu_index}`` from ``--query-gpu=index,minor_number``, or None if unknown.

    ``/dev/nvidiaN`` has minor number N. On a bare host N is also the nvidia-smi index, but in
    a container given one GPU the node keeps the host's number (``/dev/nvidia3``) while
    nvidia-smi calls it GPU 0; the minor number ties the two. A tool that does not know the
    field (a stand-in) leaves the number in the name as the index.
    """
    try:
        lines = _run_nvidia_smi(nvidia_smi, MINOR_QUERY)
    except ReleaseError:
        return None
    minors = {}
    for line in lines:
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 2 or not (fields[0].isdigit() and fields[1].isdigit()):
            return None
        minors[int(fields[1])] = int(fields[0])
    return minors or None


def query_compute_apps(nvidia_smi):
    """``[{pid, process_name, used_mib}]`` from ``nvidia-smi --query-compute-apps``."""
    apps = []
    for line in _run_nvidia_smi(nvidia_smi, APPS_QUERY):
        fields = [field.strip() for field in line.split(",")]
        if len(fields) >= 3 and fields[0].isdigit():
            apps.append({"pid": int(fields[0]), "process_name": ", ".join(fields[1:-1]),
                         "used_mib": _mib(fields[-1])})
    return apps


def memory_list(memory):
    """``{0: 12}`` -> ``[{"index": 0, "used_mib": 12}]`` (JSON keys must not be integers)."""
    return [{"index": index, "used_mib": memory[index]} for index in sorted(memory)]


def over_threshold(memory, indices, threshold_mib):
    """The indices whose known usage is above the threshold."""
    return [i for i in indices if memory.get(i) is not None and memory[i] > threshold_mib]


def wait_for_memory(nvidia_smi, indices, threshold_mib, timeout_s, released_pids=(),
                    clock=time.monotonic, sleep=time.sleep):
    """Poll until the driver has freed what was released, or time is up.

    Done when no released PID is still listed as a compute app and every GPU in
    ``indices`` is at or under the threshold. Returns the last reading,
    ``{gpu_index: used_mib}``.
    """
    released = set(released_pids)
    deadline = clock() + timeout_s
    while True:
        memory = query_memory(nvidia_smi)
        lingering = released and any(app["pid"] in released for app in query_compute_apps(nvidia_smi))
        if (not lingering and not over_threshold(memory, indices, threshold_mib)) or clock() >= deadline:
            return memory
        sleep(MEMORY_POLL_S)


# --------------------------------------------------------------------------- release


def _new_device_entry(device):
    return {"index": device_index(device), "exists": os.path.exists(device), "holders": [],
            "signalled": [], "killed": [], "would_signal": []}


def _public(info):
    return {key: info[key] for key in
            ("pid", "ppid", "user", "uid", "comm", "cmdline", "unit", "state", "kind", "reason")}


def _group_by_pid(found, wanted):
    """``{pid: (holder, [devices])}`` for holders whose kind is in ``wanted``."""
    grouped = {}
    for device, holders in found.items():
        for info in holders:
            if info["kind"] in wanted:
                grouped.setdefault(info["pid"], (info, []))[1].append(device)
    return grouped


def kinds_to_signal(force_foreign):
    """The holder kinds a release signals: the service's own, and foreign ones when forced."""
    return (OWNED, FOREIGN) if force_foreign else (OWNED,)


def holder_finder(fuser_path, proc_root="/proc"):
    """``finder(device) -> [pid]``: ``fuser`` when the host has it, else the ``/proc`` scan."""
    if fuser_path is None:

        def finder(device):
            return proc_pids(device, proc_root)
    else:

        def finder(device):
            return fuser_pids(fuser_path, device)

    return finder


# --------------------------------------------------------------------------- phase 1: discover


def discover(devices=None, owned_patterns=(), owned_units=(), ignored_patterns=(), fuser="fuser",
             nvidia_smi="nvidia-smi", proc_root="/proc", dev_dir="/dev"):
    """What to release and with what, read-only: the plan the other phases work from.

    The devices (the given ones, else ``discover_devices``), checked: a shared control node or
    an invalid pattern raises ``ReleaseError`` before any tool runs. Then the rules (compiled
    patterns, units), the holder finder (fuser, else ``/proc``), an entry per device, and from
    nvidia-smi, when there is one, the memory before and each node's GPU index (its minor
    number). Returns a dict: ``devices``, ``present`` (those that exist), ``entries``
    (``{device: entry}``), ``rules``, ``finder``, ``fuser`` (path or None), ``nvidia_smi``
    (path or None), ``memory_before`` (``{index: used_mib}`` or None) and ``warnings``.
    """
    warnings = []
    devices = list(devices or [])
    if not devices:
        devices = discover_devices(dev_dir)
        if not devices:
            warnings.append("no %s/nvidiaN device nodes on this host: nothing to release" % dev_dir)
    errors = validate_devices(devices)
    if errors:
        raise ReleaseError("; ".join(errors))
    rules = {
        "owned": compile_patterns(owned_patterns, "owned_patterns"),
        "ignored": compile_patterns(ignored_patterns, "ignored_patterns"),
        "units": {normalize_unit(unit) for unit in owned_units if unit and unit.strip()},
    }
    fuser_path = resolve_command(fuser)
    if fuser_path is None:
        warnings.append("%s not found (psmisc not installed): holders found by reading /proc "
                        "directly" % fuser)

    entries = {device: _new_device_entry(device) for device in devices}
    for device, entry in entries.items():
        if not entry["exists"]:
            warnings.append("device %s does not exist: skipped" % device)
    if os.geteuid() != 0:
        warnings.append("not running as root: fuser sees only this user's processes, so holders "
                        "of other users are missed (use become: true)")

    nvsmi = resolve_command(nvidia_smi)
    memory_before = None
    if nvsmi is None:
        warnings.append("%s not found on this host: GPU memory not checked, release verified by "
                        "fuser alone" % nvidia_smi)
    else:
        memory_before = _read_gpus(nvsmi, entries, warnings)
    return {
        "devices": devices,
        "present": [device for device in devices if entries[device]["exists"]],
        "entries": entries,
        "rules": rules,
        "finder": holder_finder(fuser_path, proc_root),
        "fuser": fuser_path,
        "nvidia_smi": nvsmi,
        "memory_before": memory_before,
        "warnings": warnings,
    }


def _read_gpus(nvsmi, entries, warnings):
    """The memory before (None when unreadable); sets each entry's GPU index from its minor
    number when nvidia-smi knows the numbers."""
    memory_before = None
    try:
        memory_before = query_memory(nvsmi)
    except ReleaseError as exc:
        warnings.append("memory before release unknown: %s" % exc)
    minors = query_minor_numbers(nvsmi)
    if minors is not None:
        for device, entry in entries.items():
            number = device_index(device)
            entry["index"] = minors.get(number) if number is not None else None
            if number is not None and entry["index"] is None and entry["exists"]:
                warnings.append("%s: no GPU with minor number %d in nvidia-smi: its memory "
                                "is not checked" % (device, number))
    return memory_before


# --------------------------------------------------------------------------- phase 2: classify


def classify_holders(plan, protected, proc_root="/proc"):
    """``{device: [holder, ...]}`` for the plan's present devices, as they are held now.

    Each holder is ``read_process`` output with the ``kind`` and ``reason`` that ``classify``
    gives it under the plan's rules; ``protected`` PIDs (``protected_pids``) are ``protected``.
    """
    rules = plan["rules"]

    def classifier(info):
        return classify(info, rules["owned"], rules["units"], rules["ignored"], protected)

    return scan(plan["present"], plan["finder"], classifier, proc_root)


# --------------------------------------------------------------------------- phase 3: signal


def signal_holders(plan, protected, force_foreign=False, check_mode=False, term_timeout_s=30,
                   kill_timeout_s=30, proc_root="/proc", clock=time.monotonic, sleep=time.sleep):
    """Classify, signal what is to be signalled (``terminate``), and classify again.

    At most ``MAX_ROUNDS`` rounds: a dying parent may leave a child that opened a device late.
    Each PID is signalled in one round only; in check mode nothing is signalled and one round
    tells what would be. Every holder seen is added to its device's entry in the plan, with
    what was signalled, killed (or would be signalled) among them. Returns a dict: ``found``
    (the last classification), ``signalled``, ``killed``, ``forced`` (foreign PIDs signalled)
    and ``would_signal``.
    """
    entries = plan["entries"]
    to_signal = kinds_to_signal(force_foreign)
    signalled, killed, forced = [], [], []
    seen = {}
    found = {}
    for _ in range(MAX_ROUNDS):
        found = classify_holders(plan, protected, proc_root)
        for device, holders in found.items():
            known = {h["pid"] for h in entries[device]["holders"]}
            entries[device]["holders"].extend(_public(h) for h in holders if h["pid"] not in known)
        targets = {}
        for info, _devices in _group_by_pid(found, to_signal).values():
            if info["pid"] not in seen:
                targets[info["pid"]] = info["starttime"]
                seen[info["pid"]] = info
        if check_mode or not targets:
            break
        # Survivors of SIGKILL show up in the next classification and are reported by verify.
        sent, sent_kill, _left = terminate(targets, term_timeout_s, kill_timeout_s, proc_root,
                                           clock, sleep)
        signalled.extend(sent)
        killed.extend(sent_kill)
        forced.extend(pid for pid in sent if seen[pid]["kind"] == FOREIGN)
    else:
        found = classify_holders(plan, protected, proc_root)

    would_signal = sorted(seen) if check_mode else []
    for entry in entries.values():
        held = {h["pid"] for h in entry["holders"]}
        entry["signalled"] = sorted(held.intersection(signalled))
        entry["killed"] = sorted(held.intersection(killed))
        entry["would_signal"] = sorted(held.intersection(would_signal))
    return {"found": found, "signalled": signalled, "killed": killed, "forced": forced,
            "would_signal": would_signal}


# --------------------------------------------------------------------------- phase 4: verify


def verify(plan, outcome, force_foreign=False, check_mode=False, memory_threshold_mib=1024,
           settle_timeout_s=60, kill_timeout_s=30, clock=time.monotonic, sleep=time.sleep):
    """What the release left: holders still there, and the GPU memory.

    Problems (each fails the run): a holder to signal that is still there (it outlived
    SIGKILL, or came back after ``MAX_ROUNDS``); a holder left alive (foreign unless forced,
    protected always), named with what it holds; GPU memory the driver did not free within
    ``settle_timeout_s`` (``wait_for_memory``), or that cannot be read. Returns a dict:
    ``problems``, ``warnings``, ``foreign`` (the holders left alive), ``ignored``,
    ``memory_after`` and ``apps_after`` (None when not read).
    """
    found = outcome["found"]
    problems, warnings = [], []
    if not check_mode:
        alive = _group_by_pid(found, kinds_to_signal(force_foreign))
        if alive:
            problems.append("still holding the GPUs after SIGTERM, SIGKILL and %d s: %s" % (
                kill_timeout_s, "; ".join("%s, state %s, holds %s" % (
                    describe(info), info["state"], ", ".join(devs))
                    for info, devs in (alive[p] for p in sorted(alive)))))
    # Foreign holders are left alive (unless forced); the module's own ancestors always are.
    left_alone = (PROTECTED,) if force_foreign else (FOREIGN, PROTECTED)
    blockers = _group_by_pid(found, left_alone)
    foreign = []
    for pid in sorted(blockers):
        info, devs = blockers[pid]
        entry = _public(info)
        entry["devices"] = devs
        foreign.append(entry)
    if foreign:
        problems.append(
            "%d holder(s) not owned by the service left alive (set gpu_release_force_foreign: "
            "true to signal them): %s" % (len(foreign), "; ".join(
                "%s holds %s%s" % (describe(f), ", ".join(f["devices"]),
                                   " [%s]" % f["reason"] if f["kind"] == PROTECTED else "")
                for f in foreign)))
    ignored = [dict(_public(info), devices=devs)
               for info, devs in (_group_by_pid(found, (IGNORED,)).values())]

    if outcome["forced"]:
        warnings.append("gpu_release_force_foreign is true: signalled foreign holders %s"
                        % ", ".join(str(pid) for pid in outcome["forced"]))

    memory_after, apps_after = _verify_memory(plan, outcome, foreign, check_mode,
                                              memory_threshold_mib, settle_timeout_s,
                                              problems, warnings, clock, sleep)
    return {"problems": problems, "warnings": warnings, "foreign": foreign, "ignored": ignored,
            "memory_after": memory_after, "apps_after": apps_after}


def _verify_memory(plan, outcome, foreign, check_mode, memory_threshold_mib, settle_timeout_s,
                   problems, warnings, clock, sleep):
    """``(memory_after, apps_after)``; adds to ``problems`` and ``warnings`` what it finds."""
    entries, nvsmi = plan["entries"], plan["nvidia_smi"]
    memory_after = None
    apps_after = None
    indices = sorted(i for i in (entries[d]["index"] for d in plan["present"]) if i is not None)
    if nvsmi is not None and not check_mode:
        # A holder left alive keeps its memory (and, with CUDA, holds every GPU node, not just
        # its own), so the threshold applies only to GPUs no such holder occupies; on the
        # others, wait until the driver no longer lists a released PID. The run fails on
        # the holders left alive anyway.
        blocked = {entries[d]["index"] for f in foreign for d in f["devices"]}
        checked = [i for i in indices if i not in blocked]
        try:
            memory_after = wait_for_memory(nvsmi, checked, memory_threshold_mib,
                                           settle_timeout_s, outcome["signalled"], clock, sleep)
            apps_after = query_compute_apps(nvsmi)
        except ReleaseError as exc:
            problems.append("cannot verify GPU memory: %s" % exc)
        if memory_after is not None:
            unlisted = [i for i in indices if i not in memory_after]
            if unlisted:
                warnings.append("%s does not list GPU(s) %s: their memory is not checked"
                                % (nvsmi, ", ".join(str(i) for i in unlisted)))
            over = over_threshold(memory_after, checked, memory_threshold_mib)
            if over:
                problems.append(
                    "GPU memory above %d MiB after waiting up to %d s: %s; compute apps: %s" % (
                        memory_threshold_mib, settle_timeout_s,
                        ", ".join("GPU %d %d MiB" % (i, memory_after[i]) for i in over),
                        ", ".join("PID %d %s %s MiB" % (a["pid"], a["process_name"], a["used_mib"])
                                  for a in apps_after or []) or "none listed"))
    elif check_mode and plan["memory_before"] and not outcome["would_signal"]:
        over = over_threshold(plan["memory_before"], indices, memory_threshold_mib)
        if over:
            warnings.append("check mode: GPU(s) %s above %d MiB now with nothing to signal" % (
                ", ".join(str(i) for i in over), memory_threshold_mib))
    return memory_after, apps_after


# --------------------------------------------------------------------------- release


def summarize(outcome, memory_after, check_mode, elapsed):
    """The one-line ``msg``: what was (or would be) signalled, and the memory after."""
    signalled, killed, would_signal = outcome["signalled"], outcome["killed"], outcome["would_signal"]
    if check_mode:
        summary = ("would signal PID(s) %s" % ", ".join(str(p) for p in would_signal)
                   if would_signal else "nothing to release")
    elif signalled:
        summary = "signalled PID(s) %s (SIGKILL for %s) in %.1f s" % (
            ", ".join(str(p) for p in signalled),
            ", ".join(str(p) for p in killed) or "none", elapsed)
    else:
        summary = "nothing to release"
    if memory_after is not None:
        summary += "; GPU memory after (MiB): %s" % ", ".join(
            "%d: %s" % (i, memory_after[i]) for i in sorted(memory_after))
    return summary


def release(devices=None, owned_patterns=(), owned_units=(), ignored_patterns=(),
            term_timeout_s=30, kill_timeout_s=30, force_foreign=False, memory_threshold_mib=1024,
            settle_timeout_s=60, nvidia_smi="nvidia-smi", fuser="fuser", check_mode=False,
            proc_root="/proc", dev_dir="/dev", clock=time.monotonic, sleep=time.sleep):
    """Release the devices; returns ``(result, error_message_or_None)``.

    The four phases in order: ``discover``, ``classify_holders`` (within ``signal_holders``'
    rounds), ``signal_holders``, ``verify``. ``result`` carries ``changed``, ``msg``,
    ``warnings`` and the figures the module returns; an error message means the module must
    fail (after what it could release was released). Raises ``ReleaseError`` for problems
    found before anything was signalled.
    """
    started = clock()
    plan = discover(devices, owned_patterns, owned_units, ignored_patterns, fuser, nvidia_smi,
                    proc_root, dev_dir)
    protected = protected_pids(proc_root=proc_root)
    outcome = signal_holders(plan, protected, force_foreign, check_mode, term_timeout_s,
                             kill_timeout_s, proc_root, clock, sleep)
    checked = verify(plan, outcome, force_foreign, check_mode, memory_threshold_mib,
                     settle_timeout_s, kill_timeout_s, clock, sleep)
    memory_before, memory_after = plan["memory_before"], checked["memory_after"]
    elapsed = round(clock() - started, 2)
    summary = summarize(outcome, memory_after, check_mode, elapsed)
    result = {
        "changed": bool(outcome["signalled"] or outcome["would_signal"]),
        "msg": summary,
        "warnings": plan["warnings"] + checked["warnings"],
        "devices": plan["entries"],
        "signalled": sorted(outcome["signalled"]),
        "killed": sorted(outcome["killed"]),
        "would_signal": outcome["would_signal"],
        "forced_foreign": sorted(outcome["forced"]),
        "foreign": checked["foreign"],
        "ignored": checked["ignored"],
        "memory_threshold_mib": memory_threshold_mib,
        "memory_before": memory_list(memory_before) if memory_before is not None else None,
        "memory_after": memory_list(memory_after) if memory_after is not None else None,
        "compute_apps_after": checked["apps_after"],
        "nvidia_smi": plan["nvidia_smi"],
        "holder_finder": plan["fuser"] or "/proc",
        "elapsed_s": elapsed,
    }
    error = None
    if checked["problems"]:
        error = "GPU release failed: %s. Done before that: %s" % (" | ".join(checked["problems"]), summary)
    return result, error
