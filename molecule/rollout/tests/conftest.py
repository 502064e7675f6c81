"""Fixtures for the rollout suite (helpers: molecule/resources/testlib.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import testinfra

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))

from testlib import UNIT, assert_normal_service, run_playbook

FIRST, SECOND, THIRD = "vllm-mol-rollout-a", "vllm-mol-rollout-b", "vllm-mol-rollout-c"
FAULT_DIR = "/run/vllm-standin"


class Box:
    """One sandbox host, read as an operator would: systemd, /proc, files."""

    def __init__(self, name: str):
        self.name = name
        self.host = testinfra.get_host(f"podman://{name}")

    def prop(self, name: str) -> str:
        return self.host.check_output(f"systemctl show {UNIT} -p {name} --value")

    def main_pid(self) -> int:
        return int(self.prop("MainPID"))

    def argv(self) -> list[str]:
        return self.host.file(f"/proc/{self.main_pid()}/cmdline").content_string.split("\0")[:-1]

    def environ(self) -> dict[str, str]:
        text = self.host.file(f"/proc/{self.main_pid()}/environ").content_string
        return dict(item.split("=", 1) for item in text.split("\0") if "=" in item)

    def sha(self, path: str) -> str:
        return self.host.check_output(f"sha256sum {path} 2>/dev/null | cut -c1-64 || true")


@pytest.fixture
def hosts():
    return {name: Box(name) for name in (FIRST, SECOND, THIRD)}


@pytest.fixture(autouse=True)
def healthy_after(hosts):
    """Every test leaves every host on the normal, healthy service, with no fault switch left."""
    yield
    for box in hosts.values():
        box.host.run(f"rm -f {FAULT_DIR}/*")
        assert_normal_service(box.host)


def rollout(tmp_path, change=None, *args: str):
    """rollout.yml with its artifacts under tmp_path; returns (play, the rollout's report.json or None)."""
    extra = {"vllm_job_artifacts_dir": str(tmp_path)}
    if change is not None:
        extra["vllm_rollout_change"] = change
    play = run_playbook("rollout.yml", "-e", json.dumps(extra), *args)
    reports = sorted((tmp_path / "rollout").glob("*/report.json"))
    return play, json.loads(reports[-1].read_text()) if reports else None
