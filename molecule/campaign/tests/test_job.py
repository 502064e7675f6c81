"""The job skeleton (roles/vllm_job) as every job meets it, on the sandbox."""

from __future__ import annotations

import json

import pytest

from testlib import LOCK, UNIT, run_playbook


@pytest.mark.parametrize(("playbook", "old", "new"), [
    ("profile.yml", "vllm_campaign_lock_path", "vllm_job_lock_path"),
    ("playbooks/allreduce_bench.yml", "allreduce_bench_artifacts_dir", "allreduce_floor_artifacts_dir"),
])
def test_a_variable_of_an_earlier_release_is_refused_naming_its_new_name(host, playbook, old, new):
    pid = host.check_output(f"systemctl show {UNIT} -p MainPID --value")
    play = run_playbook(playbook, "-e", json.dumps({old: "/tmp/somewhere"}))
    assert play.rc != 0
    message = play.result("Check for variables that earlier releases used")["msg"]
    assert message == f"{old} was renamed {new}. Rename it in the inventory (or on the command line) and run again."
    assert host.check_output(f"systemctl show {UNIT} -p MainPID --value") == pid, "nothing may be stopped"
    assert not host.file(LOCK).exists


def test_a_rollout_of_a_version_the_host_cannot_run_is_refused_before_anything_stops(host):
    # The sandbox runs the stand-in from a fixed vllm_executable, whatever vllm_version says (issue 37).
    pid = host.check_output(f"systemctl show {UNIT} -p MainPID --value")
    play = run_playbook("rollout.yml", "-e", json.dumps({"vllm_rollout_change": {"version": "0.0.1"}}))
    assert play.rc != 0
    message = play.result("Check the change")["msg"]
    assert message.startswith("vllm_rollout_change.version is 0.0.1, but this host runs /opt/vllm-standin/bin/vllm "
                              "whatever the version (its vllm_executable does not follow vllm_version and "
                              "vllm_install_enabled is false (nothing installs it)): it would keep running vLLM 0.32.0")
    assert host.check_output(f"systemctl show {UNIT} -p MainPID --value") == pid, "nothing may be stopped"
    assert not host.file(LOCK).exists


def rollout_report(tmp_path, change: dict):
    """rollout.yml on this host with ``change``, its canary's baseline one run (no figure is asserted)."""
    play = run_playbook("rollout.yml", "-e", json.dumps({"vllm_rollout_artifacts_dir": str(tmp_path),
                                                         "vllm_rollout_change": change,
                                                         "vllm_rollout_concurrencies": [1], "vllm_rollout_repeats": 1}))
    (report,) = (json.loads(p.read_text()) for p in (tmp_path / "rollout").glob("*/report.json"))
    return play, report, report["entries"][0]


def test_a_rollout_whose_start_does_not_run_what_was_asked_rolls_the_host_back(host, tmp_path):
    # Someone else's drop-in replaces the command (issue 37): the change's start is read back from its
    # process, differs, and counts as a change that did not load: the host goes back to its last-known-good,
    # whose drop-in directory had no such file, and the report says what runs now, read back.
    pid = host.check_output(f"systemctl show {UNIT} -p MainPID --value")
    argv = host.file(f"/proc/{pid}/cmdline").content_string.split("\0")[:-1]
    asked = argv[argv.index("serve") - 1:]
    dropin = f"/etc/systemd/system/{UNIT}.service.d/90-site.conf"
    host.check_output(f"printf '[Service]\\nExecStart=\\nExecStart={' '.join([*asked, '--max-num-seqs', '4'])}\\n' "
                      f"> {dropin}")
    try:
        play, report, entry = rollout_report(tmp_path, {"environment": {"NCCL_PROTO": "LL128"}})
        left = host.file(dropin).exists
    finally:
        host.run(f"rm -f {dropin} && systemctl daemon-reload")
    assert play.rc != 0
    assert (entry["outcome"], entry["status"]) == ("did not load", "rolled back")
    assert ("does not run what was asked - arguments: run and not asked: --max-num-seqs 4; set by ExecStart= in "
            f"{dropin} (not this role's)") in entry["reason"]
    assert not left
    now = int(host.check_output(f"systemctl show {UNIT} -p MainPID --value"))
    assert now != int(pid)
    assert entry["after"] == {"version": "0.32.0", "executable": "/opt/vllm-standin/bin/vllm", "read_back": True,
                              "pid": now}
    argv = host.file(f"/proc/{now}/cmdline").content_string.split("\0")[:-1]
    assert argv[argv.index("serve") - 1:] == asked
    name = entry["host"]
    assert report["headline"].startswith(f"rollout {report['id']} stopped at the canary {name} (did not load): {name} "
                                         "rolled back, runs vLLM 0.32.0 (/opt/vllm-standin/bin/vllm), read back")


def test_a_rollout_of_what_the_host_already_runs_restarts_nothing_and_says_so(host, tmp_path):
    pid = host.check_output(f"systemctl show {UNIT} -p MainPID --value")
    # The inventory's own NCCL_PROTO (inventory/sandbox): the host already runs it.
    play, report, entry = rollout_report(tmp_path, {"environment": {"NCCL_PROTO": "LL"}})
    assert play.rc == 0, play.output[-3000:]
    assert host.check_output(f"systemctl show {UNIT} -p MainPID --value") == pid, "nothing may be restarted"
    assert (entry["outcome"], entry["status"], entry["restarted"]) == ("kept", "unchanged", False)
    assert report["headline"].startswith(f"rollout {report['id']}: nothing to change: 1/1 hosts already ran it, none "
                                         "restarted (vLLM 0.32.0 (/opt/vllm-standin/bin/vllm))"), report["headline"]
