"""The job skeleton (roles/vllm_job) as every job meets it, on the sandbox."""

from __future__ import annotations

import json

import pytest

from testlib import LOCK, UNIT, run_playbook, wait_for


@pytest.mark.parametrize(("playbook", "old", "new"), [
    ("profile.yml", "vllm_campaign_lock_path", "vllm_job_lock_path"),
    ("playbooks/allreduce_bench.yml", "allreduce_floor_artifacts_dir",
     "vllm_job_artifacts_dir (one artifacts directory for every job)"),
    ("experiment.yml", "vllm_experiment_concurrencies",
     "vllm_experiment_bench_load.concurrencies (or vllm_bench_load.concurrencies, for the whole fleet)"),
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
    play = run_playbook("rollout.yml", "-e", json.dumps({
        "vllm_job_artifacts_dir": str(tmp_path), "vllm_rollout_change": change,
        "vllm_rollout_bench_load": {"concurrencies": [1], "repeats": 1}}))
    (report,) = (json.loads(p.read_text()) for p in (tmp_path / "rollout").glob("*/report.json"))
    return play, report, report["entries"][0]


def test_a_rollout_of_what_the_host_already_runs_restarts_nothing_and_says_so(host, tmp_path):
    # A server started after its files (the role restarts one older than its files, as an interrupted run
    # leaves it, and an earlier test's drop-in, made and removed, leaves the drop-in directory newer).
    host.check_output(f"systemctl restart {UNIT}")
    wait_for(lambda: host.run("curl -sf -o /dev/null http://127.0.0.1:8000/health").rc == 0, "the service's health",
             timeout_s=120)
    pid = host.check_output(f"systemctl show {UNIT} -p MainPID --value")
    # The inventory's own NCCL_PROTO (inventory/sandbox): the host already runs it.
    play, report, entry = rollout_report(tmp_path, {"environment": {"NCCL_PROTO": "LL"}})
    assert play.rc == 0, play.output[-3000:]
    assert host.check_output(f"systemctl show {UNIT} -p MainPID --value") == pid, "nothing may be restarted"
    assert (entry["outcome"], entry["status"], entry["restarted"]) == ("kept", "unchanged", False)
    assert report["headline"].startswith(f"rollout {report['id']}: nothing to change: 1/1 hosts already ran it, none "
                                         "restarted (vLLM 0.32.0 (/opt/vllm-standin/bin/vllm))"), report["headline"]


def test_a_rollout_beside_someone_else_s_drop_in_is_refused_before_anything_stops(host, tmp_path):
    # Issue 37's case: a foreign drop-in whose EnvironmentFile= overrides the change's variable: the rollout
    # refuses the host before anything stops, naming the variable and the file.
    pid = host.check_output(f"systemctl show {UNIT} -p MainPID --value")
    dropin, site_env = f"/etc/systemd/system/{UNIT}.service.d/90-site.conf", "/etc/site-nccl.env"
    host.check_output(f"printf 'NCCL_PROTO=Simple\\n' > {site_env} && mkdir -p $(dirname {dropin}) && "
                      f"printf '[Service]\\nEnvironmentFile={site_env}\\n' > {dropin}")
    try:
        change = {"environment": {"NCCL_PROTO": "LL128"}}
        play = run_playbook("rollout.yml", "-e", json.dumps({"vllm_job_artifacts_dir": str(tmp_path),
                                                             "vllm_rollout_change": change}))
    finally:
        host.run(f"rm -f {dropin} {site_env} && systemctl daemon-reload")
    assert play.rc != 0
    # The service's preflight, before the job's checks: the host's own NCCL_PROTO is overridden already.
    assert play.result("Refuse variables that someone else's unit files would override")["msg"].startswith(
        "NCCL_PROTO cannot take effect: someone else's unit file sets it otherwise, and systemd gives the server "
        f"that - NCCL_PROTO: asked NCCL_PROTO=LL, the server would get NCCL_PROTO=Simple; set by {site_env}, the "
        f"EnvironmentFile= of {dropin} (not this role's). Nothing was changed.")
    assert host.check_output(f"systemctl show {UNIT} -p MainPID --value") == pid, "nothing may be stopped"
    assert not host.file(LOCK).exists
