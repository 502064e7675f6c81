"""profile.yml end to end, and the faults it must survive, on the sandbox."""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
import subprocess

import pytest

from conftest import assert_campaign_loads
from testlib import (
    FAULT_DIR,
    LOCK,
    OLD_LOCK,
    UNIT,
    holders,
    incident_names,
    read_incident,
    run_playbook,
    start_playbook,
    start_traffic,
    stop_traffic,
    wait_for,
)

TRACE_DIR = "/var/lib/vllm/traces"
DECODE = re.compile(r"^execute_context_0\(0\)_generation_\d+\(\d+\)$")
# The sandbox's checkpoint: the toy decoder of the traces it serves (docs/sandbox.md), per rank of 2,
# read at the H200's datasheet bandwidth (the sandbox measures no copy).
TOY_BYTES = 61 * (2 * 7168 * 28672 + 7168) * 2
WEIGHT_FLOOR_MS = TOY_BYTES / 2 / 4800e9 * 1e3


def failed_campaign(campaign, *args):
    """Run a campaign that must fail after restoring the host; return (play, its message)."""
    play, _ = campaign(*args)
    assert play.rc != 0
    message = play.result("Fail with the job's original error, now that the host is restored")["msg"]
    assert "the normal service is back and healthy" in message
    return play, message


def allreduce_shares(trace_path) -> float:
    """All-reduce share of decode CUDA time for one rank, computed plainly."""
    with gzip.open(trace_path, "rt") as handle:
        events = json.load(handle)["traceEvents"]
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("cat") == "gpu_user_annotation" and DECODE.match(e.get("name", ""))]
    total = allreduce = 0.0
    for event in events:
        if event.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        if any(start <= event["ts"] < end for start, end in spans):
            total += event["dur"]
            if "AllReduce" in event["name"]:
                allreduce += event["dur"]
    return allreduce / total


def campaign_files(host) -> list[str]:
    return [n for n in host.run(f"ls {TRACE_DIR}").stdout.split() if n.startswith(("vllm-ops-", "profiler_out"))]


def test_campaign_end_to_end(host, campaign):
    play, artifacts = campaign()
    assert play.rc == 0, play.output[-4000:]
    (campaign_dir,) = [d for d in (artifacts / host.backend.hostname).iterdir() if d.is_dir()]
    summary = json.loads((campaign_dir / "summary.json").read_text())
    report = (campaign_dir / "report.md").read_text()
    assert (campaign_dir / "decode.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (campaign_dir / "steps.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The stand-in's nvidia-smi says PCIe, and the verdict's advisor was told so.
    assert "GPU0\t X \tPIX" in (campaign_dir / "topology.txt").read_text()
    assert summary["context"]["interconnect"] == "pcie"
    # The sandbox serves the real H200 traces: rank 0 is the straggler, but rank 1's host limits the
    # run, and the capture is not steady (issue 20).
    assert (summary["verdict"]["kind"], summary["verdict"]["rank"]) == ("host-bound", 1)
    assert summary["collectives"]["straggler"]["rank"] == 0
    assert f"> {host.backend.hostname}: host-bound on rank 1, not steady: decode step " in report
    assert "| GPU interconnect (nvidia-smi topo -m) | pcie |" in report
    # The decode ledger, from the checkpoint's headers the capture read on the host (issue 21): the GEMMs
    # against the weight floor at the labelled spec bandwidth, the all-reduce floor not measured (no GPUs).
    assert json.loads((campaign_dir / "capture.json").read_text())["checkpoint"]["bytes"] == TOY_BYTES
    for rank, led in zip(summary["ranks"], summary["ledger"]["ranks"], strict=True):
        assert led["floors"]["weights"] == pytest.approx(WEIGHT_FLOOR_MS, abs=1e-4)
        assert led["bandwidth"]["source"] == "spec" and led["floors"]["allreduce"] is None
        share = WEIGHT_FLOOR_MS / rank["decomposition"]["compute_ms"]["gemm"]
        assert led["gemm"]["kind"] == "memory-bound" and led["gemm"]["hbm_share"] == pytest.approx(share, abs=1e-3)
    share = summary["verdict"]["evidence"]["hbm_share"]
    assert (f"GEMMs at {100 * share:.0f}% of HBM bandwidth (4800 GB/s, spec): memory-bound; headroom at most "
            in report)
    assert "## The steady decode step against its floor (the decode ledger)" in report
    assert (campaign_dir / "ledger.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    history = (artifacts / host.backend.hostname / "history.csv").read_text().splitlines()
    assert len(history) == 2 and campaign_dir.name in history[1]
    traces = sorted(campaign_dir.glob("*.pt.trace.json.gz"))
    assert [re.search(r"rank(\d+)\.", t.name).group(1) for t in traces] == ["0", "1"]
    # The summary carries the numbers of the traces the server wrote.
    for rank in summary["ranks"]:
        trace = next(t for t in traces if f"rank{rank['rank']}." in t.name)
        share = allreduce_shares(trace)
        assert rank["categories"]["allreduce"]["share"] == pytest.approx(share, abs=1e-3)
        # The report's per-rank row of kernel-time sums: | rank | device | steps | CUDA ms | wall ms | all-reduce
        # ms | share | ...
        lines = report.splitlines()
        table = next(i for i, line in enumerate(lines) if line.startswith("| rank | device | steps | CUDA ms/step"))
        row = next(line for line in lines[table:] if line.startswith(f"| {rank['rank']} | "))
        shown = float(re.search(r"\| (\d+\.\d)% \|", row).group(1))
        assert shown == pytest.approx(100 * share, abs=0.1)
    # The downtime record: /health polled throughout, not ready during each of the two loads (the
    # profiling variant's and the normal service's), and back at the end.
    record = json.loads((campaign_dir / "campaign.json").read_text())["downtime"]
    assert record["gaps"] == 2 and record["ready_at_end"] is True, record
    assert record["seconds_not_ready"] == pytest.approx(sum(g["seconds"] for g in record["gap_list"]), abs=1e-3)
    said = re.search(r"; downtime (\d+\.\d) s in 2 gaps \(longest (\d+\.\d) s\) -> ",
                     play.result("Print the headline")["msg"])
    assert said and float(said.group(1)) == pytest.approx(record["seconds_not_ready"], abs=0.051)
    assert f"**downtime {said.group(1)} s in 2 gaps" in report
    (row,) = csv.DictReader(history)
    assert (row["downtime_s"], row["longest_gap_s"]) == (str(record["seconds_not_ready"]), str(record["longest_gap_s"]))
    # Nothing left on the host, the lock released, the poller gone, the normal service's workers on the GPUs.
    assert campaign_files(host) == []
    assert not host.file(LOCK).exists
    assert host.run("ls /run/vllm-ops/health-*.json").rc != 0
    assert "vllm-ops-health-" not in host.check_output("systemctl list-units --all --no-legend 'vllm-ops-health-*'")
    for device in ("/dev/nvidia0", "/dev/nvidia1"):
        (pid,) = holders(host, device)
        assert f"{UNIT}.service" in host.file(f"/proc/{pid}/cgroup").content_string
        main_pid = host.check_output(f"systemctl show {UNIT} -p MainPID --value")
        assert "--profiler-config" not in host.file(f"/proc/{main_pid}/cmdline").content_string
    again = run_playbook("playbooks/restore.yml")
    assert again.rc == 0 and again.changed == 0
    # Its two loads, phase by phase, against the disk; check mode's downtime from them (issue 24).
    assert_campaign_loads(host, campaign, campaign_dir)


def test_a_degraded_link_is_named_in_the_verdict_and_the_report(host, campaign):
    # The stand-in's fault switch: GPU 1 (rank 1's, and the rank the verdict is on) trained at x4.
    host.check_output(f"echo 1 > {FAULT_DIR}/pcie-link-degraded")
    play, artifacts = campaign()
    assert play.rc == 0, play.output[-4000:]
    (campaign_dir,) = [d for d in (artifacts / host.backend.hostname).iterdir() if d.is_dir()]
    summary = json.loads((campaign_dir / "summary.json").read_text())
    report = (campaign_dir / "report.md").read_text()
    said = ("PCIe link of GPU 1 (00000000:2A:00.0, rank 1) at x4 of x16, Gen5 of Gen5 (25% of its bandwidth), read "
            "during the profiled requests")
    verdict = summary["verdict"]
    assert (verdict["kind"], verdict["rank"]) == ("host-bound", 1)
    (link,) = verdict["evidence"]["pcie_link"]
    width = (link["evidence"]["width_current"], link["evidence"]["width_max"])
    assert (link["gpu"], link["rank"], width) == (1, 1, (4, 16))
    assert verdict["next"][0].startswith("check GPU 1's link: nvidia-smi -q -i 1 (GPU Link Info)")
    assert f"{said}." in summary["warnings"]
    assert "(2 warnings)" in play.result("Print the headline")["msg"]
    for line in (f"| pcie_link | {said} |", f"- {said}.", "| 1 | 00000000:2A:00.0 | 1 | x4 of x16 | Gen5 of Gen5 |",
                 "1. check GPU 1's link: "):
        assert line in report, line
    record = json.loads((campaign_dir / "campaign.json").read_text())
    assert [(f["kind"], f["gpu"], f["rank"]) for f in record["fabric"]["findings"]] == [("pcie-link-degraded", 1, 1)]


def test_a_second_campaign_is_refused_while_another_holds_the_lock(host, campaign):
    invocation = host.check_output(f"systemctl show {UNIT} -p InvocationID --value")
    boot = host.check_output("cat /proc/sys/kernel/random/boot_id")
    lock = {"campaign_id": "20261130T010000Z", "started_at": "2026-11-30T01:00:00Z",
            "expires_at": "2099-01-01T00:00:00Z", "expires_epoch": 4070908800, "boot_id": boot,
            "owner": {"controller": "ops-laptop", "controller_pid": 4242, "user": "alice"}}
    host.check_output(f"mkdir -p /run/vllm-ops && echo '{json.dumps(lock)}' > {LOCK}")
    play, _ = campaign()
    assert play.rc != 0
    message = play.result("Take the host's job lock")["msg"]
    assert "campaign 20261130T010000Z, started 2026-11-30T01:00:00Z from ops-laptop (PID 4242, user alice)" in message
    assert host.check_output(f"systemctl show {UNIT} -p InvocationID --value") == invocation, "nothing may be stopped"
    assert json.loads(host.file(LOCK).content_string)["campaign_id"] == "20261130T010000Z"


def test_a_capture_too_big_for_the_disk_is_refused_before_anything_stops(host, campaign):
    invocation = host.check_output(f"systemctl show {UNIT} -p InvocationID --value")
    # No earlier campaign in this artifacts directory: the documented default of 1 MiB per step
    # and rank; 10^4 requests of 10^5 tokens on two ranks cannot fit in the sandbox.
    play, _ = campaign("-e", json.dumps({"vllm_campaign_requests": 10000, "vllm_campaign_output_tokens": 100000}))
    assert play.rc != 0
    message = play.result("Check the free space the job needs")["msg"]
    steps = 10000 * 100001
    need = -(-(2**20 * steps * 2 * 3 // 2) // 2**20)  # 1 MiB x steps x 2 ranks x 1.5, in MiB rounded up
    assert message.startswith(f"Not enough free space for the traces: the capture needs about {need} MiB "
                              f"({steps} steps x 2 rank(s) x 1048576 bytes per step and rank, from default")
    assert re.search(r"; \d+ MiB are free under /var/lib/vllm/traces on vllm-mol-profile", message)
    assert host.check_output(f"systemctl show {UNIT} -p InvocationID --value") == invocation, "nothing may be stopped"
    assert not host.file(LOCK).exists


def test_an_artifacts_directory_on_a_full_volume_is_refused_before_anything_stops(host, tmp_path):
    # The artifacts on a volume of their own (a 1 MiB tmpfs), the playbooks on a roomy one: the
    # check measures the volume the traces will go to, before anything stops.
    volume = tmp_path / "volume"
    volume.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(volume)], check=True)
    try:
        pid = host.check_output(f"systemctl show {UNIT} -p MainPID --value")
        artifacts = volume / "artifacts"
        play = run_playbook("profile.yml", "-e", json.dumps({"vllm_job_artifacts_dir": str(artifacts)}))
        stats = os.statvfs(volume)
        free = stats.f_bavail * stats.f_frsize // 2**20
    finally:
        subprocess.run(["umount", str(volume)], check=True)
    assert play.rc != 0
    message = play.result("Check the free space the job needs")["msg"]
    assert message.startswith("Not enough free space for the traces: the capture needs about ")
    assert "and at least vllm_job_traces_min_free_mib 2048 MiB" in message
    assert (f"; {free} MiB are free under {volume} on the controller ({artifacts} does not exist yet: its nearest "
            "existing parent was measured). Free room there, or set vllm_job_artifacts_dir to a larger volume.") \
        in message
    assert host.check_output(f"systemctl show {UNIT} -p MainPID --value") == pid, "nothing may be stopped"
    assert not host.file(LOCK).exists


def test_a_lock_left_under_the_old_name_is_honoured(host, campaign):
    # Taken by a run of an earlier release, whose lock was /run/vllm-ops/campaign.lock.
    boot = host.check_output("cat /proc/sys/kernel/random/boot_id")
    lock = {"campaign_id": "20261130T020000Z", "started_at": "2026-11-30T02:00:00Z",
            "expires_at": "2099-01-01T00:00:00Z", "expires_epoch": 4070908800, "boot_id": boot,
            "owner": {"controller": "ops-laptop", "controller_pid": 4242, "user": "alice"}}
    host.check_output(f"mkdir -p /run/vllm-ops && echo '{json.dumps(lock)}' > {OLD_LOCK}")
    try:
        pid = host.check_output(f"systemctl show {UNIT} -p MainPID --value")
        play, _ = campaign()
        assert play.rc != 0
        message = play.result("Take the host's job lock")["msg"]
        assert message.startswith(f"Another job holds {OLD_LOCK}: campaign 20261130T020000Z, started "
                                  "2026-11-30T02:00:00Z from ops-laptop (PID 4242, user alice)")
        assert host.check_output(f"systemctl show {UNIT} -p MainPID --value") == pid, "nothing may be stopped"
        assert not host.file(LOCK).exists
    finally:
        host.run(f"rm -f {OLD_LOCK}")


def test_an_expired_lock_is_replaced(host, campaign):
    lock = {"campaign_id": "20261129T010000Z", "started_at": "2026-11-29T01:00:00Z",
            "expires_at": "2026-11-29T05:00:00Z", "expires_epoch": 1,
            "owner": {"controller": "ops-laptop", "controller_pid": 4242, "user": "alice"}}
    host.check_output(f"mkdir -p /run/vllm-ops && echo '{json.dumps(lock)}' > {LOCK}")
    play, _ = campaign()
    assert play.rc == 0, play.output[-4000:]
    warnings = play.result("Take the host's job lock").get("warnings", [])
    assert any("Replaced a stale job lock (it expired at 2026-11-29T05:00:00Z)" in w for w in warnings)


def test_a_truncated_rank_fails_the_campaign_and_keeps_the_traces(host, campaign):
    host.check_output(f"touch {FAULT_DIR}/truncate-trace-rank-1")
    _, message = failed_campaign(campaign)
    assert "rank 1:" in message and "damaged" in message
    kept = campaign_files(host)
    assert any("rank0." in n for n in kept) and any("rank1." in n for n in kept), "nothing unfetched may be deleted"
    host.run(f"rm -f {TRACE_DIR}/vllm-ops-* {TRACE_DIR}/profiler_out_*")


def test_a_stop_profile_timeout_fails_the_campaign_clearly(host, campaign):
    host.check_output(f"touch {FAULT_DIR}/stop-profile-hangs")
    _, message = failed_campaign(campaign, "-e", "vllm_campaign_stop_timeout_s=3")
    assert "/stop_profile did not answer within 3" in message


def test_a_campaign_killed_midway_is_rerun_to_completion(host, tmp_path):
    artifacts = tmp_path / "artifacts"
    first = start_playbook("profile.yml", "-e", json.dumps({"vllm_job_artifacts_dir": str(artifacts)}),
                           log=tmp_path / "campaign.log")
    try:
        wait_for(lambda: host.file(f"/etc/systemd/system/{UNIT}.service.d/50-variant.conf").exists,
                 "the profiling variant to be installed", timeout_s=120)
    finally:
        first.kill()
    assert host.file(LOCK).exists, "the killed run leaves its lock behind"
    play = run_playbook("profile.yml", "-e", json.dumps({"vllm_job_artifacts_dir": str(artifacts)}))
    assert play.rc == 0, play.output[-4000:]
    warnings = play.result("Take the host's job lock").get("warnings", [])
    assert any("is gone" in w for w in warnings)
    again = run_playbook("playbooks/restore.yml")
    assert again.rc == 0 and again.changed == 0


def test_an_engine_death_during_the_profiling_load_fails_fast_and_restores(host, campaign):
    # "once": the profiling variant's load dies; the restore's load goes through. The server
    # removes the switch when it fires, so it must own it (the directory is sticky).
    switch = f"{FAULT_DIR}/engine-dies-during-load"
    host.check_output(f"echo once > {switch} && chown vllm {switch}")
    play, message = failed_campaign(campaign)
    assert "Switch to the profiling variant" in message or "Wait for /health" in message
    assert "Engine core initialization failed" in play.output


def test_an_armed_host_is_profiled_as_it_runs_with_zero_downtime(host, campaign):
    armed = json.dumps({"vllm_profiler_armed": True})
    deploy = run_playbook("playbooks/deploy.yml", "-e", armed)
    assert deploy.rc == 0, deploy.output[-3000:]
    try:
        pid = host.check_output(f"systemctl show {UNIT} -p MainPID --value")
        # Under the users' traffic, each rank's flush holds the engine 20 s, past the watch's stall
        # time (10 s, host_vars): the watch keeps the evidence and, the campaign holding the host's
        # lock, restarts nothing.
        before = incident_names(host)
        host.check_output(f"echo 20 > {FAULT_DIR}/stop-profile-slow")
        start_traffic(host, "kimi-k2.5")  # inventory/sandbox's served name
        try:
            play, artifacts = campaign("-e", armed)
        finally:
            stop_traffic(host)
            host.run(f"rm -f {FAULT_DIR}/stop-profile-slow")
        assert play.rc == 0, play.output[-4000:]
        wait_for(lambda: incident_names(host) - before, "the watch's incident of the slow flush", timeout_s=60)
        (name,) = incident_names(host) - before
        incident = read_incident(host, name)
        assert incident["stall"]["reading"]["busy"] > 0 and incident["stall"]["stalled_s"] >= 10
        assert incident["action"]["taken"] == "none", incident["action"]
        assert re.fullmatch(rf"campaign \S+ holds the host's lock \({LOCK}\)", incident["action"]["why"])
        (campaign_dir,) = [d for d in (artifacts / host.backend.hostname).iterdir() if d.is_dir()]
        record = json.loads((campaign_dir / "campaign.json").read_text())
        assert record["path"].startswith("live")
        down = record["downtime"]
        assert down["polls"] > 0 and down["failed_polls"] == 0 and down["gaps"] == 0, down
        assert play.result("Print the headline")["msg"].startswith(
            f"{host.backend.hostname}: host-bound on rank 1, not steady: ")
        assert "; downtime 0 s -> " in play.result("Print the headline")["msg"]
        # The same report as the restart path, from the server that kept running.
        summary = json.loads((campaign_dir / "summary.json").read_text())
        assert (summary["verdict"]["kind"], summary["verdict"]["rank"]) == ("host-bound", 1)
        assert len(list(campaign_dir.glob("*.pt.trace.json.gz"))) == 2 and campaign_files(host) == []
        assert host.check_output(f"systemctl show {UNIT} -p MainPID --value") == pid
        assert not host.file(LOCK).exists
    finally:
        disarm = run_playbook("playbooks/deploy.yml")
        assert disarm.rc == 0, disarm.output[-3000:]
