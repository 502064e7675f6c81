"""playbooks/release_gpus.yml end to end, with -c local against simulated device files.

Asserts on what a user sees: the exit status, the recap, the failure message, and which of
the real holder processes are gone or still alive.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpu_release_helpers import REPO, ROLE, alive

ANSIBLE_PLAYBOOK = Path(sys.executable).with_name("ansible-playbook")

pytestmark = pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(),
                                reason="ansible-playbook is not next to this Python")


def play(devices, *args, **extra_vars):
    evars = {
        "gpu_release_devices": [str(d) for d in devices],
        "gpu_release_psmisc_manage": False,  # psmisc is there; apt needs python3-apt
        "gpu_release_term_timeout_s": 1,
        "gpu_release_nvidia_smi": "no-such-nvidia-smi",
    }
    evars.update(extra_vars)
    cmd = [str(ANSIBLE_PLAYBOOK), "playbooks/release_gpus.yml", "-i", "localhost,", "-c", "local",
           "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", json.dumps(evars),
           # No sudo needed to signal our own children; and under Mitogen a local become runs
           # sudo even to become root as root, which a machine may not have.
           "-e", "ansible_become=false"]
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(cmd + list(args), cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, check=False)
    return proc.returncode, proc.stdout


def recap(output):
    match = re.search(r"^localhost\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+"
                      r"failed=(\d+)", output, re.M)
    assert match, output
    return dict(zip(("ok", "changed", "unreachable", "failed"), map(int, match.groups()), strict=True))


def test_release_kills_the_stubborn_worker_then_a_rerun_changes_nothing(devices, holders):
    stubborn = holders.owned(devices[0], ignore_term=True)
    polite = holders.owned(devices[1])
    rc, out = play(devices)
    assert rc == 0, out
    assert not alive(stubborn) and not alive(polite)
    assert recap(out)["changed"] == 1 and recap(out)["failed"] == 0
    assert "SIGKILL for %d" % stubborn.pid in out
    assert "nvidia-smi not found on this host" in out  # said, not hidden

    rc, out = play(devices)
    assert rc == 0, out
    assert recap(out)["changed"] == 0
    assert "nothing to release" in out


def test_foreign_holder_survives_and_the_play_fails_naming_it(devices, holders):
    worker = holders.owned(devices[0])
    job = holders.foreign(devices[1])
    rc, out = play(devices)
    assert rc == 2, out
    assert not alive(worker) and alive(job)
    assert recap(out)["failed"] == 1
    assert ("PID %d (command 'sleep 600', user root) holds %s" % (job.pid, devices[1])
            in out.replace("\\'", "'")), out


def test_force_foreign_releases_it_too(devices, holders):
    job = holders.foreign(devices[1])
    rc, out = play(devices, gpu_release_force_foreign=True)
    assert rc == 0, out
    assert not alive(job)
    assert "signalled foreign holders %d" % job.pid in out


def test_check_mode_signals_nothing(devices, holders):
    worker = holders.owned(devices[0])
    rc, out = play(devices, "--check")
    assert rc == 0, out
    assert alive(worker)
    assert recap(out)["changed"] == 1
    assert "would signal PID(s) %d" % worker.pid in out


def test_memory_left_on_a_gpu_fails_with_the_figures(devices, fake_nvidia_smi):
    smi = fake_nvidia_smi([{"index": 0, "idle_mib": 0}, {"index": 1, "idle_mib": 99224}])
    rc, out = play(devices, gpu_release_nvidia_smi=smi, gpu_release_settle_timeout_s=0)
    assert rc == 2, out
    assert "GPU memory above 1024 MiB after waiting up to 0 s: GPU 1 99224 MiB" in out


def test_shared_control_node_is_refused(devices):
    rc, out = play([*devices, "/dev/nvidiactl"])
    assert rc == 2, out
    assert "/dev/nvidiactl is a shared control node" in out


def _module_docs():
    path = REPO / "plugins" / "modules" / "gpu_release.py"
    namespace = {"__name__": "gpu_release_module", "__file__": str(path)}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # our own file
    return namespace


def test_role_defaults_argument_specs_and_module_options_agree():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options)
    for name, spec in options.items():
        assert spec["default"] == defaults[name], name

    docs = yaml.safe_load(_module_docs()["DOCUMENTATION"])["options"]
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    [release] = [t for t in tasks if "vllm_ops.serving.gpu_release" in t]
    assert set(release["vllm_ops.serving.gpu_release"]) == set(docs)
    for option, value in release["vllm_ops.serving.gpu_release"].items():
        assert value == "{{ gpu_release_%s }}" % option
        if option not in ("devices", "owned_units"):  # those defaults differ on purpose
            assert docs[option]["default"] == defaults["gpu_release_%s" % option], option
