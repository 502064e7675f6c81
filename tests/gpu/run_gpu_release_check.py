#!/usr/bin/env python3
"""Real-GPU check of playbooks/release_gpus.yml (issue 4).

On a machine with NVIDIA GPUs and PyTorch:

1. smoke test: the playbook with ``-c local`` against a temporary file held by a CPU process
   titled ``VLLM::Worker_TP0`` that ignores SIGTERM (proves the Ansible set-up works);
2. starts a foreign process holding GPU 1 (or, with one GPU, a small allocation on GPU 0);
3. starts a vLLM-like process (argv[0] and prctl name ``VLLM::Worker_TP0``) that ignores
   SIGTERM and allocates tens of GiB on GPU 0;
4. runs the playbook on every ``/dev/nvidiaN`` of the machine and asserts: the vLLM-like
   holder is gone (killed by SIGKILL after the TERM timeout), the foreign one still runs, the
   play failed naming its PID, and nvidia-smi shows GPU 0's memory freed;
5. prints the key figures (memory before/loaded/after per GPU, seconds to release).

This script itself never touches CUDA: it is an ancestor of the module, which never signals
its ancestors, so a GPU held by it would be reported and fail the run.

Exit status: 0 passed, 1 failed, 77 skipped (no NVIDIA GPU, nvidia-smi or PyTorch).
Ansible: ``ansible-playbook`` on PATH, else ``python3 -m ansible.cli.playbook`` when
``ansible`` is importable (PYTHONPATH), else the wheels given by ``--wheels DIR`` are
unpacked into a temporary directory put on the playbook's PYTHONPATH. See README.md.
"""

import argparse
import atexit
import contextlib
import glob
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLAYBOOK = "playbooks/release_gpus.yml"
SKIP = 77
TITLE = "VLLM::Worker_TP0"

# The vLLM-like worker: process title by argv[0] (cmdline) and prctl (comm), SIGTERM ignored
# as the worker on the production host did, memory touched so nvidia-smi counts all of it.
OWNED_CODE = textwrap.dedent(
    """
    import ctypes, ctypes.util, os, signal, sys, time
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.prctl(15, b"VLLM::Worker_TP0", 0, 0, 0)  # PR_SET_NAME; the kernel keeps 15 bytes
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    import torch
    size = int(float(sys.argv[1]) * 2**30)
    block = torch.empty(size, dtype=torch.uint8, device="cuda:0")
    block.fill_(1)
    torch.cuda.synchronize()
    print("ready", os.getpid(), flush=True)
    while True:
        time.sleep(60)
    """
)
# The foreign job: an ordinary PyTorch process, nothing in its command line looks like vLLM.
FOREIGN_CODE = textwrap.dedent(
    """
    import os, sys, time
    import torch
    block = torch.ones(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    print("ready", os.getpid(), flush=True)
    while True:
        time.sleep(60)
    """
)
# A CPU stand-in for the smoke test: holds the file it is given.
SMOKE_CODE = textwrap.dedent(
    """
    import signal, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    handle = open(sys.argv[1], "rb")
    print("ready", flush=True)
    while True:
        time.sleep(60)
    """
)


class CheckFailed(Exception):
    pass


class Skip(Exception):
    pass


def log(text=""):
    print(text, flush=True)


# --------------------------------------------------------------------------- Ansible


def find_ansible(wheels):
    """``(command prefix, extra environment)`` that runs ansible-playbook."""
    explicit = os.environ.get("ANSIBLE_PLAYBOOK")
    if explicit:
        return [explicit], {}
    on_path = shutil.which("ansible-playbook")
    if on_path:
        return [on_path], {}
    module = [sys.executable, "-m", "ansible.cli.playbook"]
    probe = [sys.executable, "-c", "import ansible.cli.playbook"]
    if subprocess.run(probe, stderr=subprocess.DEVNULL, check=False).returncode == 0:
        return module, {}
    if not wheels:
        raise CheckFailed("no ansible-playbook on PATH, ansible not importable, and no --wheels "
                          "DIR given (see tests/gpu/README.md)")
    site = tempfile.mkdtemp(prefix="gpu-release-site-")
    atexit.register(shutil.rmtree, site, True)
    found = sorted(glob.glob(os.path.join(wheels, "*.whl")))
    if not found:
        raise CheckFailed("no *.whl in %s" % wheels)
    for wheel in found:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    pythonpath = os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p)
    env = {"PYTHONPATH": pythonpath}
    result = subprocess.run(probe, env=dict(os.environ, **env), stderr=subprocess.PIPE,
                            text=True, check=False)
    if result.returncode != 0:
        raise CheckFailed("ansible from %s does not import: %s" % (wheels, result.stderr[-2000:]))
    log("ansible-core unpacked from %d wheels in %s into %s" % (len(found), wheels, site))
    return module, env


def run_playbook(ansible, extra_vars, log_path=None):
    """Run the playbook against localhost; ``(rc, output, seconds)``."""
    prefix, extra_env = ansible
    cmd = [*prefix, PLAYBOOK, "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=%s" % sys.executable,
           "-e", json.dumps(extra_vars),
           # Root signals any holder and a user its own, with no become; under Mitogen a local
           # become runs sudo even as root, and the device may have none.
           "-e", "ansible_become=false"]
    # The wheels carried to the device are ansible-core's alone: run without Mitogen. The checkout is
    # the collection vllm_ops.serving through a link of its own (the tree copied here has no .collections).
    collections = tempfile.mkdtemp(prefix="gpu-release-collections-")
    os.makedirs(os.path.join(collections, "ansible_collections", "vllm_ops"))
    os.symlink(REPO, os.path.join(collections, "ansible_collections", "vllm_ops", "serving"))
    atexit.register(shutil.rmtree, collections, True)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_STRATEGY="linear", **extra_env)
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, check=False)
    seconds = time.monotonic() - started
    if log_path:
        with open(log_path, "w") as handle:
            handle.write("$ %s\n%s" % (" ".join(cmd), proc.stdout))
    return proc.returncode, proc.stdout, seconds


def module_result(output):
    """The gpu_release result a failed task printed (``FAILED! => {...}``), else None."""
    marker = output.find("FAILED! => ")
    if marker < 0:
        return None
    try:
        return json.JSONDecoder().raw_decode(output, marker + len("FAILED! => "))[0]
    except ValueError:
        return None


# --------------------------------------------------------------------------- processes


def start(argv0, code, args, env=None):
    # Python finds its prefix (and so a virtualenv's site-packages, where
    # PyTorch may live) from argv[0]; a bare title hides it. Hand the child
    # this interpreter's import path instead.
    child_env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **(env or {}))
    return subprocess.Popen([argv0, "-c", code] + [str(a) for a in args], executable=sys.executable,
                            stdout=subprocess.PIPE, universal_newlines=True, env=child_env)


def wait_ready(proc, what, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise CheckFailed("%s exited with %s before it was ready" % (what, proc.returncode))
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            line = proc.stdout.readline()
            if line.startswith("ready"):
                return
    raise CheckFailed("%s not ready after %d s" % (what, timeout_s))


def stop(proc):
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()


# --------------------------------------------------------------------------- nvidia-smi


def gpus():
    """``{index: (used_mib, total_mib)}``."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used,memory.total",
                          "--format=csv,noheader,nounits"], stdout=subprocess.PIPE,
                         text=True, check=True).stdout
    table = {}
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 3 and fields[0].isdigit():
            table[int(fields[0])] = (int(fields[1]), int(fields[2]))
    return table


def used(index):
    return gpus()[index][0]


def check_gpu_machine():
    if not shutil.which("nvidia-smi"):
        raise Skip("no nvidia-smi on PATH")
    try:
        table = gpus()
    except (subprocess.CalledProcessError, OSError) as exc:
        raise Skip("nvidia-smi fails: %s" % exc) from exc
    if not table:
        raise Skip("nvidia-smi lists no GPU")
    probe = subprocess.run([sys.executable, "-c", "import torch; assert torch.cuda.is_available();"
                            " print(torch.cuda.device_count())"], capture_output=True,
                           text=True, check=False)
    if probe.returncode != 0:
        raise Skip("PyTorch with CUDA not usable by %s: %s" % (
            sys.executable, probe.stderr.strip().splitlines()[-1:]))
    return table


# --------------------------------------------------------------------------- checks


def expect(condition, text, failures):
    log("  [%s] %s" % ("ok" if condition else "FAIL", text))
    if not condition:
        failures.append(text)


def smoke(ansible, out_dir):
    """The playbook against a temp file held by a CPU stand-in: proves the tool chain."""
    log("== smoke: playbook -c local against a simulated device file")
    tmp = tempfile.mkdtemp(prefix="gpu-release-smoke-")
    device = os.path.join(tmp, "nvidia0")
    open(device, "w").close()
    holder = start(TITLE, SMOKE_CODE, [device])
    try:
        wait_ready(holder, "smoke holder", 30)
        rc, output, seconds = run_playbook(ansible, {
            "gpu_release_devices": [device], "gpu_release_psmisc_manage": False,
            "gpu_release_term_timeout_s": 1, "gpu_release_nvidia_smi": "no-such-nvidia-smi",
        }, os.path.join(out_dir, "smoke.log") if out_dir else None)
        with contextlib.suppress(subprocess.TimeoutExpired):
            holder.wait(timeout=30)
        failures = []
        expect(rc == 0, "smoke play exit status 0 (got %d)" % rc, failures)
        expect(holder.returncode == -signal.SIGKILL,
               "smoke holder ignoring SIGTERM was killed (status %s)" % holder.returncode, failures)
        log("  smoke play took %.1f s" % seconds)
        if failures:
            log(output[-4000:])
            raise CheckFailed("smoke test failed: %s" % "; ".join(failures))
    finally:
        stop(holder)
        shutil.rmtree(tmp, ignore_errors=True)


def gpu_check(ansible, args, table, out_dir):
    failures = []
    count = len(table)
    foreign_gpu = 1 if count > 1 else 0
    total_gib = table[0][1] / 1024.0
    owned_gib = args.owned_gib if args.owned_gib else min(40.0, total_gib * 0.4)
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}  # CUDA's order = nvidia-smi's index order
    log("== GPU check: %d GPU(s); vLLM-like holder %.1f GiB on GPU 0, foreign %.1f GiB on GPU %d"
        % (count, owned_gib, args.foreign_gib, foreign_gpu))
    before = gpus()
    foreign = owned = None
    try:
        foreign = start("gpu-foreign-job", FOREIGN_CODE, [args.foreign_gib],
                        dict(env, CUDA_VISIBLE_DEVICES=str(foreign_gpu)))
        wait_ready(foreign, "foreign job", 300)
        with_foreign = used(0)
        owned = start(TITLE, OWNED_CODE, [owned_gib], dict(env, CUDA_VISIBLE_DEVICES="0"))
        wait_ready(owned, "vLLM-like holder", 600)
        loaded = gpus()

        # The threshold must sit above what stays on GPU 0 once the vLLM-like holder is gone:
        # nothing of ours with two GPUs, the foreign allocation with one.
        threshold = args.threshold_mib or max(1024, with_foreign + 1024)
        log("  threshold: %d MiB (GPU 0 used with only the foreign job: %d MiB)"
            % (threshold, with_foreign))
        extra = {"gpu_release_psmisc_manage": False,
                 "gpu_release_term_timeout_s": args.term_timeout_s,
                 "gpu_release_settle_timeout_s": args.settle_timeout_s,
                 "gpu_release_memory_threshold_mib": threshold}
        if args.devices:
            extra["gpu_release_devices"] = args.devices
        rc, output, seconds = run_playbook(
            ansible, extra, os.path.join(out_dir, "release.log") if out_dir else None)
        owned_status = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            owned_status = owned.wait(timeout=30)  # reaps the zombie the module left
        after = gpus()
        # The module already waited for the driver; this bounded re-read only guards the
        # figure printed below against a slow nvidia-smi refresh.
        deadline = time.monotonic() + 30
        while after[0][0] > threshold and time.monotonic() < deadline:
            time.sleep(1)
            after = gpus()
        result = module_result(output) or {}

        log("== figures")
        for index in sorted(before):
            log("  GPU %d: before %6d MiB, loaded %6d MiB, after %6d MiB (freed %d MiB) of %d MiB"
                % (index, before[index][0], loaded[index][0], after[index][0],
                   loaded[index][0] - after[index][0], before[index][1]))
        log("  module memory_before: %s" % json.dumps(result.get("memory_before")))
        log("  module memory_after:  %s" % json.dumps(result.get("memory_after")))
        log("  release: play %.1f s wall, module elapsed_s %s, TERM timeout %d s, signalled %s, "
            "killed %s, holder finder %s" % (
                seconds, result.get("elapsed_s"), args.term_timeout_s, result.get("signalled"),
                result.get("killed"), result.get("holder_finder")))
        for item in result.get("foreign", []):
            log("  foreign reported: PID %s %s user %s on %s" % (
                item["pid"], " ".join(item["cmdline"].split())[:60], item["user"],
                ", ".join(item["devices"])))
        for line in output.splitlines():
            if line.startswith("[ERROR]") or line.startswith("[WARNING]"):
                log("  ansible: %s" % line[:400])

        log("== assertions")
        expect(rc != 0, "play failed because of the foreign holder (exit status %d)" % rc,
               failures)
        expect("PID %d " % foreign.pid in output,
               "failure message names the foreign PID %d" % foreign.pid, failures)
        expect(owned_status == -signal.SIGKILL,
               "vLLM-like holder PID %d is gone, killed by SIGKILL after ignoring SIGTERM "
               "(status %s)" % (owned.pid, owned_status), failures)
        expect(owned.pid in (result.get("killed") or []),
               "module reports PID %d as killed" % owned.pid, failures)
        expect(foreign.poll() is None, "foreign job PID %d still runs" % foreign.pid, failures)
        freed = loaded[0][0] - after[0][0]
        expect(freed >= owned_gib * 1024 * 0.9,
               "nvidia-smi shows GPU 0 freed by %d MiB (allocated %.0f MiB)"
               % (freed, owned_gib * 1024), failures)
        expect(after[0][0] <= threshold,
               "GPU 0 at %d MiB, at or under the %d MiB threshold" % (after[0][0], threshold),
               failures)
        summary = {
            "gpus": count, "owned_gib": owned_gib, "foreign_gib": args.foreign_gib,
            "foreign_gpu": foreign_gpu, "threshold_mib": threshold,
            "memory_mib": {str(i): {"before": before[i][0], "loaded": loaded[i][0],
                                    "after": after[i][0], "total": before[i][1]}
                           for i in sorted(before)},
            "play_seconds": round(seconds, 2), "module": result, "play_rc": rc,
            "failures": failures,
        }
        if out_dir:
            with open(os.path.join(out_dir, "summary.json"), "w") as handle:
                json.dump(summary, handle, indent=2, sort_keys=True)
        return failures
    finally:
        stop(owned)
        stop(foreign)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheels", help="directory of ansible-core wheels to unpack if needed")
    parser.add_argument("--owned-gib", type=float, default=0,
                        help="GiB the vLLM-like holder allocates (default: 40, at most 40%% "
                             "of GPU 0)")
    parser.add_argument("--foreign-gib", type=float, default=1.0,
                        help="GiB the foreign job allocates (default 1)")
    parser.add_argument("--term-timeout-s", type=int, default=10,
                        help="gpu_release_term_timeout_s (default 10)")
    parser.add_argument("--settle-timeout-s", type=int, default=120,
                        help="gpu_release_settle_timeout_s (default 120)")
    parser.add_argument("--threshold-mib", type=int, default=0,
                        help="gpu_release_memory_threshold_mib (default: max(1024, GPU 0 used "
                             "with only the foreign job + 1024))")
    parser.add_argument("--devices", nargs="*",
                        help="gpu_release_devices (default: every /dev/nvidiaN)")
    parser.add_argument("--smoke-only", action="store_true",
                        help="only check that the playbook runs here (no GPU needed)")
    parser.add_argument("--out", default=os.environ.get("OUT"),
                        help="directory for summary.json and the play logs (default $OUT)")
    args = parser.parse_args(argv)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    log("python %s (%s), repo %s, uid %d, fuser %s" % (
        sys.version.split()[0], sys.executable, REPO, os.geteuid(),
        shutil.which("fuser") or "absent (the module reads /proc instead)"))
    try:
        ansible = find_ansible(args.wheels)
        log("ansible-playbook: %s" % " ".join(ansible[0]))
        smoke(ansible, args.out)
        if args.smoke_only:
            log("RESULT: PASS (smoke only)")
            return 0
        table = check_gpu_machine()
        failures = gpu_check(ansible, args, table, args.out)
    except Skip as exc:
        log("RESULT: SKIP (%s)" % exc)
        return SKIP
    except CheckFailed as exc:
        log("RESULT: FAIL (%s)" % exc)
        return 1
    if failures:
        log("RESULT: FAIL (%d assertion(s))" % len(failures))
        return 1
    log("RESULT: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
