"""profile.yml on two hosts at once, one of which fails mid-campaign."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import testinfra

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))

from testlib import UNIT, run_playbook

GOOD, BAD = "vllm-mol-multi-a", "vllm-mol-multi-b"


def test_one_failing_host_leaves_the_other_to_finish_and_both_restored(tmp_path):
    hosts = {name: testinfra.get_host(f"podman://{name}") for name in (GOOD, BAD)}
    hosts[BAD].check_output("touch /run/vllm-standin/truncate-trace-rank-0")
    try:
        play = run_playbook("profile.yml", "-e", json.dumps({"vllm_campaign_artifacts_dir": str(tmp_path)}))
    finally:
        hosts[BAD].run("rm -f /run/vllm-standin/* /var/lib/vllm/traces/vllm-ops-*")
    assert play.rc != 0
    assert play.data["stats"][GOOD]["failures"] == 0
    assert play.data["stats"][BAD]["failures"] == 1
    (good_dir,) = [d for d in (tmp_path / GOOD).iterdir() if d.is_dir()]
    assert (good_dir / "report.md").exists() and (good_dir / "decode.png").exists()
    assert len((tmp_path / GOOD / "history.csv").read_text().splitlines()) == 2
    assert not (tmp_path / BAD / "history.csv").exists()
    for name, host in hosts.items():
        assert host.run(f"systemctl is-active {UNIT}").stdout.strip() == "active", name
        assert not host.file(f"/etc/systemd/system/{UNIT}.service.d/50-variant.conf").exists, name
        assert host.run("curl -sf -o /dev/null http://127.0.0.1:8000/health").rc == 0, name
