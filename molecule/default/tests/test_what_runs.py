"""What runs is what was asked (docs/deploy.md, "What runs, read back"): someone else's drop-in on the
deployed host, refused before anything stops where it overrides a variable the role sets, and caught by
the read-back after the start where it replaces the command.

Runs last on the converged host (after the watch's tests, whose idle service must be the one converge
started), and leaves it on its last-known-good, healthy."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))

from testlib import ROOT, UNIT, assert_normal_service, run_playbook

INVENTORY = yaml.safe_load((ROOT / "inventory/sandbox/group_vars/vllm_servers/vllm.yml").read_text())
DROPIN = f"/etc/systemd/system/{UNIT}.service.d/90-site.conf"
SITE_ENV = "/etc/site-nccl.env"
# The change both plays ask: the inventory's environment with NCCL_PROTO=LL128 and a shorter stand-in load.
CHANGE = {"vllm_environment": dict(INVENTORY["vllm_environment"], NCCL_PROTO="LL128", VLLM_STANDIN_LOAD_S=3)}


def main_pid(host) -> str:
    return host.check_output(f"systemctl show {UNIT} -p MainPID --value")


def cmdline(host, pid: str) -> list[str]:
    argv = host.file(f"/proc/{pid}/cmdline").content_string.split("\0")[:-1]
    return argv[argv.index("serve") - 1:]


def environ(host, pid: str) -> dict:
    entries = host.file(f"/proc/{pid}/environ").content_string.split("\0")
    return dict(e.split("=", 1) for e in entries if "=" in e)


def deploy_beside(host, dropin: str, site_env: str | None = None):
    """deploy.yml with CHANGE while someone else's drop-in (and its environment file) is on the host;
    both removed after, whatever the play did."""
    if site_env is not None:
        host.check_output(f"printf '{site_env}' > {SITE_ENV}")
    host.check_output(f"mkdir -p $(dirname {DROPIN}) && printf '{dropin}' > {DROPIN}")
    try:
        play = run_playbook("playbooks/deploy.yml", "-e", json.dumps(CHANGE))
        left = host.file(DROPIN).exists
    finally:
        host.run(f"rm -f {SITE_ENV} {DROPIN} && systemctl daemon-reload")
    return play, left


def test_a_variable_someone_else_s_drop_in_overrides_is_refused_before_anything_stops(host):
    # Its EnvironmentFile= would win over the role's (systemd reads it later): NCCL_PROTO=LL128 could not
    # take effect, and the deploy says so with the server untouched.
    before = main_pid(host)
    play, _ = deploy_beside(host, f"[Service]\\nEnvironmentFile={SITE_ENV}\\n", "NCCL_PROTO=Simple\\n")
    assert play.rc != 0
    assert (f"NCCL_PROTO cannot take effect: someone else's unit file sets it otherwise, and systemd gives the "
            f"server that - NCCL_PROTO: asked NCCL_PROTO=LL128, the server would get NCCL_PROTO=Simple; set by "
            f"{SITE_ENV}, the EnvironmentFile= of {DROPIN} (not this role's). Nothing was changed.") in play.output
    assert main_pid(host) == before
    assert environ(host, before)["NCCL_PROTO"] == INVENTORY["vllm_environment"]["NCCL_PROTO"]


def test_a_command_someone_else_s_drop_in_replaces_is_read_back_after_the_start_and_rolled_back(host):
    before = main_pid(host)
    asked = cmdline(host, before)
    theirs = [*asked, "--max-num-seqs", "4"]
    play, left = deploy_beside(host, f"[Service]\\nExecStart=\\nExecStart={' '.join(theirs)}\\n")
    assert play.rc != 0
    readback = play.result("Read back what the started server runs")["readback"]
    assert readback["pid"] != int(before) and readback["argv"] == theirs
    # Only the command differs: the asked variables are what the process has.
    assert [(d["what"], d["words"]) for d in readback["differences"]] == [
        ("arguments", "run and not asked: --max-num-seqs 4")]
    assert readback["environment"]["NCCL_PROTO"] == "LL128" and readback["environment"]["VLLM_STANDIN_LOAD_S"] == "3"
    assert f"arguments: run and not asked: --max-num-seqs 4; set by ExecStart= in {DROPIN} (not this role's)" \
        in play.output
    # A start that does not run what was asked is a failed load: the host went back to its last-known-good,
    # whose drop-in directory had no such file (the rollback removed it, before the cleanup).
    assert "is back on its last-known-good" in play.output, play.output[-3000:]
    assert not left
    assert_normal_service(host)
    pid = main_pid(host)
    assert pid not in (before, str(readback["pid"])) and cmdline(host, pid) == asked
    running = environ(host, pid)
    assert running["NCCL_PROTO"] == INVENTORY["vllm_environment"]["NCCL_PROTO"]
    assert running["VLLM_STANDIN_LOAD_S"] == str(INVENTORY["sandbox_standin_load_s"])
