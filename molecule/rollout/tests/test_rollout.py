"""rollout.yml on three hosts, the stand-in installed as three releases (prepare.yml: 0.32.0; 0.33.0
without --reasoning-parser; 0.34.0 three times slower per token): a bad change never reaches the
other hosts and leaves the first healthy on its old configuration; a good one reaches all three
through a canary group of two, each canary's figures recomputed here from its benchmark files;
restore.yml after a rollout killed mid-way; in a batch of two, of rollout.yml and of deploy.yml, a
change that does not load on one host rolls back that host alone.
In file order; the last tests leave every host on 0.33.0."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from conftest import FAULT_DIR, FIRST, SECOND, THIRD, rollout
from testlib import INCIDENTS, UNIT, run_playbook, start_playbook, wait_for

UNIT_FILE = f"/etc/systemd/system/{UNIT}.service"
ENV_FILE = f"/etc/vllm/{UNIT}.env"
# The sandbox's vllm_extra_args without --reasoning-parser, which the stand-in's 0.33.0 does not have.
ARGS_FOR_0_33 = ["--trust-remote-code", "--tool-call-parser", "kimi_k2", "--enable-auto-tool-choice"]
# inventory/sandbox/group_vars/vllm_servers/rollout.yml
NOISE_FLOOR_PCT, MAX_REGRESSION_PCT = 5.0, 25.0
# For the tests whose change is harmless and whose subject is what follows the gate, not its verdict: the
# stand-ins share two CPUs with the other suites' lanes, and a harmless change's canary once measured TPOT
# +34% at concurrency 1 against a noise band of 7% (a CI run, with vLLM's CPU build loading beside it). The
# slower release (three times slower) still fails its gate at the inventory's 25%.
HARMLESS_GATE = {"vllm_rollout_max_regression_pct": 60.0}


def served_version(box) -> str:
    return json.loads(box.host.check_output("curl -sf http://127.0.0.1:8000/version"))["version"]


def by_host(report) -> dict:
    return {e["host"]: e for e in report["entries"]}


def recomputed(job_dir: Path, metric: str, concurrency: int) -> tuple[float, float]:
    """The experiment's change and noise band (percent) of ``metric`` at ``concurrency``, from the
    canary's bench result files: medians of the runs, the two sides' largest distances from them (the
    baseline as the gate saw it: round 1, before the change)."""
    record = json.loads((job_dir / "experiment.json").read_text())
    values = {side: [json.loads((job_dir / r["file"]).read_text())[metric] for r in record["runs"]
                     if r["variant"] == side and r["concurrency"] == concurrency and r["round"] == 1]
              for side in ("baseline", "change")}
    base, new = statistics.median(values["baseline"]), statistics.median(values["change"])
    spread = max(abs(v - base) for v in values["baseline"]) + max(abs(v - new) for v in values["change"])
    return 100 * (new / base - 1), max(100 * spread / base, NOISE_FLOOR_PCT)


def last_result(play, task_name: str) -> dict:
    """The result of the named task in its last batch (the play runs once per batch of hosts)."""
    found = [next(iter(task["hosts"].values())) for one in play.data.get("plays", []) for task in one["tasks"]
             if task["task"]["name"].split(" : ", 1)[-1] == task_name]
    assert found, f"task {task_name!r} did not run:\n{play.output[-3000:]}"
    return found[-1]


def assert_untouched(box, pid: int, unit_sha: str) -> None:
    assert box.main_pid() == pid, f"{box.name} was restarted"
    assert box.sha(UNIT_FILE) == unit_sha, f"{box.name}'s unit changed"


def test_a_change_that_does_not_load_on_the_canary_is_rolled_back_and_never_reaches_the_others(hosts, tmp_path):
    first = hosts[FIRST]
    before = {name: (box.main_pid(), box.sha(UNIT_FILE)) for name, box in hosts.items()}
    # A value only the server refuses, at its start: the canary's load fails.
    play, report = rollout(tmp_path, {"extra_args": ["--max-num-seqs", "0"]})
    assert play.rc != 0
    entries = by_host(report)
    assert (entries[FIRST]["outcome"], entries[FIRST]["status"]) == ("did not load", "rolled back")
    assert "max_num_seqs" in entries[FIRST]["reason"], "the failure says what the server refused"
    # What it runs now, read back from the rollback's process (the vllm role's read-back after every start).
    assert entries[FIRST]["after"] == {"version": "0.32.0", "executable": "/opt/vllm/0.32.0/bin/vllm",
                                       "read_back": True, "pid": first.main_pid()}
    assert entries[SECOND]["status"] == entries[THIRD]["status"] == "not reached" and report["stopped_at"] == FIRST
    # The canary runs its old unit again (restarted: the change, then the rollback), healthy.
    assert first.sha(UNIT_FILE) == before[FIRST][1] and first.main_pid() != before[FIRST][0]
    assert "--max-num-seqs" not in first.argv()
    for name in (SECOND, THIRD):
        assert_untouched(hosts[name], *before[name])


def test_a_slower_release_is_rolled_back_at_the_canarys_gate_and_the_rollout_stops(hosts, tmp_path):
    first = hosts[FIRST]
    others = {name: (box.main_pid(), box.sha(UNIT_FILE)) for name, box in hosts.items() if name != FIRST}
    play, report = rollout(tmp_path, {"version": "0.34.0"})
    assert play.rc != 0
    entries = by_host(report)
    assert (entries[FIRST]["outcome"], entries[FIRST]["status"]) == ("regressed", "rolled back")
    assert entries[SECOND]["status"] == entries[THIRD]["status"] == "not reached"
    gate = report["canary"]["gate"]
    assert gate["passed"] is False
    job_dir = Path(entries[FIRST]["job_dir"])
    for point in gate["points"]:
        change, noise = recomputed(job_dir, "median_tpot_ms", point["concurrency"])
        assert point["tpot"]["change_pct"] == pytest.approx(change, abs=5e-4)
        assert point["tpot"]["noise_pct"] == pytest.approx(noise, abs=5e-4)
        assert change > MAX_REGRESSION_PCT + noise and point["tpot"]["regressed"]
    assert gate["line"] in report["headline"] and "regressed: TPOT rose" in gate["line"]
    # The old service, back after the rollback, measured again: whether the host itself drifted is said.
    record = json.loads((job_dir / "experiment.json").read_text())
    assert {r["round"] for r in record["runs"] if r["variant"] == "baseline"} == {1, 2}
    drift = report["canary"]["drift"]
    assert drift["measured"] is True and drift["words"].startswith("measured again after the rollback, the baseline ")
    assert drift["words"] in report["headline"]
    # Back on its old release, healthy; the other hosts never touched; 0.34.0 kept (installed, not run healthy).
    assert served_version(first) == "0.32.0" and first.argv()[1] == "/opt/vllm/0.32.0/bin/vllm"
    for name, before in others.items():
        assert_untouched(hosts[name], *before)
    assert first.host.file("/opt/vllm/0.34.0/bin/vllm").exists


def test_a_release_without_an_argument_the_unit_passes_is_refused_before_the_canary_stops(hosts, tmp_path):
    before = {name: (box.main_pid(), box.sha(UNIT_FILE)) for name, box in hosts.items()}
    play, report = rollout(tmp_path, {"version": "0.33.0"})
    assert play.rc != 0
    message = play.result("Check the unit's arguments against the vLLM release that will run them")["msg"]
    assert message.startswith("vLLM 0.33.0 at /opt/vllm/0.33.0/bin/vllm does not take what the unit would pass: "
                              "--reasoning-parser is not an argument of this release"), message
    entries = by_host(report)
    assert entries[FIRST]["status"] == "refused (nothing stopped)" and entries[FIRST]["downtime_s"] == 0
    for name, box in hosts.items():
        assert_untouched(box, *before[name])


def test_restore_after_a_rollout_killed_mid_way_brings_each_host_to_its_own_last_known_good(hosts, tmp_path):
    first, second, third = hosts[FIRST], hosts[SECOND], hosts[THIRD]
    invocation, third_pid = second.prop("InvocationID"), third.main_pid()
    # A harmless change with a longer load, so that the second host can be caught loading it.
    change = {"environment": {"NCCL_PROTO": "LL128", "VLLM_STANDIN_LOAD_S": 20}}
    run = start_playbook("rollout.yml", "-e", json.dumps({"vllm_job_artifacts_dir": str(tmp_path),
                                                          "vllm_rollout_change": change, **HARMLESS_GATE}),
                         log=tmp_path / "rollout.log")

    def loading():
        return (second.prop("InvocationID") not in ("", invocation)
                and "LL128" in second.host.file(ENV_FILE).content_string)

    try:
        # Until the second host loads the change, or the rollout ends without reaching it.
        wait_for(lambda: not run.running or loading(), "the second host to load the change", timeout_s=900)
        caught = run.running
    except AssertionError:
        caught = False
    finally:
        run.kill()
    assert caught, f"the second host was not caught loading the change; the rollout's output:\n{run.output[-6000:]}"
    assert second.host.run("curl -sf -o /dev/null http://127.0.0.1:8000/health").rc != 0, "killed mid-load"

    play = run_playbook("playbooks/restore.yml")
    assert play.rc == 0, play.output[-4000:]
    # The canary passed its gate: the change is its last-known-good; the second host's is the old one.
    assert first.environ()["NCCL_PROTO"] == "LL128"
    assert second.environ()["NCCL_PROTO"] == "LL" and "LL128" not in second.host.file(ENV_FILE).content_string
    # The third host was never reached: the restore found it on its last-known-good and left it running.
    assert third.environ()["NCCL_PROTO"] == "LL" and third.main_pid() == third_pid
    again = run_playbook("playbooks/restore.yml")
    assert again.rc == 0 and again.changed == 0, again.changed_tasks


def test_a_good_change_reaches_every_host_with_each_canarys_figures_and_downtime(hosts, tmp_path):
    # The inventory's settings, as edited (here on the command line): a new release, one argument
    # less for it, one version kept (0.32.0 goes once 0.33.0 is healthy; 0.34.0 has not run: it stays).
    # The canary group rollout_canaries (molecule.yml: the first two hosts), each gated on its own,
    # in one batch; then the third host.
    edited = {"vllm_version": "0.33.0", "vllm_extra_args": ARGS_FOR_0_33, "vllm_versions_keep": 1,
              "vllm_ops_rollout_canary": "rollout_canaries", **HARMLESS_GATE}
    # A check run first: every host's checks, what a real run would do, nothing changed.
    pids = {name: box.main_pid() for name, box in hosts.items()}
    check_dir = tmp_path / "check"
    check = run_playbook("rollout.yml", "--check", "-e",
                         json.dumps({"vllm_job_artifacts_dir": str(check_dir), **edited}))
    assert check.rc == 0, check.output[-4000:]
    plans = [r["msg"] for one in check.data["plays"] for t in one["tasks"] if t["task"]["name"].endswith(
        "Say what a real run would do") for r in t["hosts"].values()]
    assert len(plans) == 3
    for name, plan in zip((FIRST, SECOND), plans, strict=False):  # both canaries (one batch, one result each)
        assert plan.startswith("Check mode: the preflight passed; a real run would benchmark the service of "
                               f"{name} as it runs, apply the change ("), plan
    assert plans[2].startswith("Check mode: the preflight passed; a real run would apply the change (")
    assert {name: box.main_pid() for name, box in hosts.items()} == pids and not check_dir.exists()
    play = run_playbook("rollout.yml", "-e", json.dumps({"vllm_job_artifacts_dir": str(tmp_path), **edited}))
    assert play.rc == 0, play.output[-4000:]
    (directory,) = (tmp_path / "rollout").iterdir()
    report = json.loads((directory / "report.json").read_text())
    entries = by_host(report)
    assert not report["stopped"] and report["counts"] == {"changed": 3}
    for name, box in hosts.items():
        assert served_version(box) == "0.33.0", name
        assert entries[name]["after"] == {"version": "0.33.0", "executable": "/opt/vllm/0.33.0/bin/vllm",
                                          "read_back": True, "pid": box.main_pid()}, name
        assert entries[name]["before"] == {"version": "0.32.0", "executable": "/opt/vllm/0.32.0/bin/vllm"}, name
        job = json.loads((Path(entries[name]["job_dir"]) / "job.json").read_text())
        assert entries[name]["downtime_s"] == job["downtime"]["seconds_not_ready"] > 0, name
        assert not box.host.file("/opt/vllm/0.32.0").exists and box.host.file("/opt/vllm/0.34.0/bin/vllm").exists
    assert [entries[name]["stage"] for name in (FIRST, SECOND, THIRD)] == ["canary", "canary", "fleet"]
    assert [c["host"] for c in report["canaries"]] == [FIRST, SECOND]
    for canary in report["canaries"]:
        gate = canary["gate"]
        assert gate["passed"] is True and gate["host"] == canary["host"]
        job_dir = Path(entries[canary["host"]]["job_dir"])
        for point in gate["points"]:
            for key, metric in (("tpot", "median_tpot_ms"), ("throughput", "output_throughput")):
                change, noise = recomputed(job_dir, metric, point["concurrency"])
                assert point[key]["change_pct"] == pytest.approx(change, abs=5e-4), (key, point["concurrency"])
                assert point[key]["noise_pct"] == pytest.approx(noise, abs=5e-4), (key, point["concurrency"])
        assert gate["line"] in report["headline"]
    # each canary's watch was asked to fit its baseline on its gated benchmark, and answered (the sandbox's
    # benchmark is seconds long: whether it had enough traffic to fit on is the watch's to say); the fleet's not
    for name in (FIRST, SECOND, THIRD):
        state = json.loads(hosts[name].host.file(f"{INCIDENTS}/watch-state.json").content_string)
        asked = state.get("baseline_request") or {}
        if name == THIRD:
            assert not asked, asked
        else:
            assert asked["by"].startswith("rollout ") and asked["by"].endswith("'s gated benchmark"), asked
            assert asked["said"] and asked["to"] - asked["from"] > 0, asked
    headline = last_result(play, "Print the rollout's headline")["msg"]
    assert headline.startswith(f"{report['headline']} ({directory}/report.md)")
    assert report["headline"].startswith(f"rollout {directory.name}: 3/3 hosts on the change "
                                         f"(vLLM 0.33.0 (/opt/vllm/0.33.0/bin/vllm), read back); canary {FIRST}: ")
    again = run_playbook("playbooks/restore.yml")
    assert again.rc == 0 and again.changed == 0, again.changed_tasks


def test_in_a_batch_of_two_only_the_host_whose_change_does_not_load_is_rolled_back(hosts, tmp_path):
    # From where the test above leaves every host (0.33.0, its arguments, NCCL_PROTO=LL): the canary,
    # then the other two in one batch. "once": the second host's load of the change dies, its
    # rollback's load goes through (the server removes the switch when it fires, so it owns it).
    first, second, third = hosts[FIRST], hosts[SECOND], hosts[THIRD]
    edited = {"vllm_version": "0.33.0", "vllm_extra_args": ARGS_FOR_0_33, "vllm_versions_keep": 1}
    switch = f"{FAULT_DIR}/engine-dies-during-load"
    second.host.check_output(f"echo once > {switch} && chown vllm {switch}")
    invocation = third.prop("InvocationID")
    extra = {"vllm_job_artifacts_dir": str(tmp_path), "vllm_ops_rollout_batch": 2,
             "vllm_rollout_change": {"environment": {"NCCL_PROTO": "LL128"}}, **edited, **HARMLESS_GATE}
    run = start_playbook("rollout.yml", "-e", json.dumps(extra), log=tmp_path / "rollout.log")

    def third_on_the_change():
        return (third.prop("InvocationID") not in ("", invocation)
                and third.host.run("curl -sf -o /dev/null http://127.0.0.1:8000/health").rc == 0
                and third.environ().get("NCCL_PROTO") == "LL128")

    try:
        # The third host's main PID right after its own restart, healthy on the change.
        wait_for(lambda: not run.running or third_on_the_change(), "the third host healthy on the change", 900)
        pid_after_restart = third.main_pid() if third_on_the_change() else None
        rc = run.wait(timeout_s=900)
    finally:
        run.kill()
    output = run.output
    assert pid_after_restart, f"the third host never ran the change healthy:\n{output[-6000:]}"
    assert rc != 0, output[-4000:]
    (report_file,) = (tmp_path / "rollout").glob("*/report.json")
    entries = by_host(json.loads(report_file.read_text()))
    # The canary and the healthy peer on the change, the peer still the process of its own one load.
    assert entries[FIRST]["status"] == entries[THIRD]["status"] == "changed"
    assert first.environ()["NCCL_PROTO"] == third.environ()["NCCL_PROTO"] == "LL128"
    assert third.main_pid() == pid_after_restart, "the healthy peer was restarted after its own restart"
    loads = json.loads((Path(entries[THIRD]["job_dir"]) / "job.json").read_text())["loads"]
    assert len(loads) == 1, loads
    # The host whose load died is back on its last-known-good (the healthy_after fixture: healthy).
    assert (entries[SECOND]["outcome"], entries[SECOND]["status"]) == ("did not load", "rolled back")
    assert second.environ()["NCCL_PROTO"] == "LL" and not second.host.file(switch).exists
    # One message names the host that failed, and what each host of the batch runs now.
    message = (f"The rollout stops here: it failed on {SECOND} (its error is above), and no later batch starts. "
               f"What each host of this batch runs now: {SECOND} is back on its last-known-good (the change did "
               f"not load), vLLM 0.33.0 (/opt/vllm/0.33.0/bin/vllm), healthy; {THIRD} runs the change (")
    assert message in output, output[-4000:]
    assert f"The change did not load on {THIRD}" not in output and f"failed on {THIRD}" not in output


def test_deploy_in_a_batch_of_two_rolls_back_only_the_host_whose_change_does_not_load(hosts, tmp_path):
    """deploy.yml with vllm_ops_serial=2, from where the test above leaves the hosts: the first batch
    (a, b) changes at once, b's load dies, b alone goes back to its last-known-good; a keeps the change
    from its one load; c, of the next batch, is never touched; one message says so."""
    first, second, third = hosts[FIRST], hosts[SECOND], hosts[THIRD]
    switch = f"{FAULT_DIR}/engine-dies-during-load"
    second.host.check_output(f"echo once > {switch} && chown vllm {switch}")
    untouched = (third.main_pid(), third.sha(UNIT_FILE))
    second_argv = second.argv()
    # The inventory's settings as the tests above left them, with a shorter context: a change on each host.
    change = {"vllm_version": "0.33.0", "vllm_extra_args": ARGS_FOR_0_33, "vllm_versions_keep": 1,
              "vllm_max_model_len": 8192, "vllm_ops_serial": 2}
    play = run_playbook("playbooks/deploy.yml", "-e", json.dumps(change))
    assert play.rc != 0, play.output[-4000:]
    assert "--max-model-len 8192" in " ".join(first.argv())
    assert second.argv() == second_argv, "the second host runs its last-known-good again, as before"
    assert not second.host.file(switch).exists, "the switch fired: the second host's load of the change died"
    assert_untouched(third, *untouched)
    said = play.result("Stop the play where a host of this batch failed")["msg"]
    assert said.startswith(f"The deploy stops here: it failed on {SECOND} (its error is above), and no later batch "
                           f"starts. What each host of this batch runs now: {FIRST} ")
    assert f"{SECOND} runs its last-known-good again (" in said and said.endswith(f" Not reached: {THIRD}.")
    assert f"The change did not load on {FIRST}" not in play.output and f"failed on {FIRST}" not in play.output


def test_restore_in_a_batch_of_two_stops_after_the_host_whose_last_known_good_does_not_load(hosts):
    """restore.yml with vllm_ops_serial=2, both hosts of the first batch stopped: a's last-known-good
    comes back healthy; b's does not load (the fault fires at every load), so b is down and the message
    says why and the one command that brings it back; c, of the next batch, is never touched."""
    first, second, third = hosts[FIRST], hosts[SECOND], hosts[THIRD]
    untouched = (third.main_pid(), third.sha(UNIT_FILE))
    for box in (first, second):
        box.host.check_output(f"systemctl stop {UNIT}")
    switch = f"{FAULT_DIR}/engine-dies-during-load"
    second.host.check_output(f"touch {switch} && chown vllm {switch}")
    try:
        play = run_playbook("playbooks/restore.yml", "-e", '{"vllm_ops_serial": 2}')
        assert play.rc != 0, play.output[-4000:]
        assert first.host.run("curl -sf -o /dev/null http://127.0.0.1:8000/health").rc == 0
        assert "--max-model-len 8192" in " ".join(first.argv())  # its last-known-good: the deploy test's change
        assert second.host.run("curl -sf -o /dev/null http://127.0.0.1:8000/health").rc != 0
        assert_untouched(third, *untouched)
        said = play.result("Stop the play where a host of this batch failed")["msg"]
        assert said.startswith(f"The restore stops here: it failed on {SECOND} (its error is above), and no later "
                               f"batch starts. What each host of this batch runs now: {FIRST} runs its "
                               "last-known-good (")
        assert f"; {SECOND} runs nothing healthy: its last-known-good (" in said and " did not load." in said
        assert said.endswith(f" Not reached: {THIRD}.")
        assert (f"The last-known-good of {SECOND} (" in play.output
                and "Once that is fixed, ansible-playbook playbooks/restore.yml brings the last-known-good back"
                in play.output), play.output[-4000:]
    finally:
        second.host.run(f"rm -f {switch}")
    # Fixed (the switch gone): the command the message gave brings b back.
    back = run_playbook("playbooks/restore.yml", "--limit", SECOND)
    assert back.rc == 0, back.output[-3000:]
