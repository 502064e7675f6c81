"""Fixtures for the campaign suite (helpers: molecule/resources/testlib.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))

from testlib import assert_normal_service, run_playbook

FAULT_DIR = "/run/vllm-standin"
LOCK = "/run/vllm-ops/job.lock"
# The lock of releases before the job lock, honoured until stale.
OLD_LOCK = "/run/vllm-ops/campaign.lock"


@pytest.fixture
def campaign(tmp_path):
    """Run profile.yml with artifacts under tmp_path; returns (play, artifacts dir)."""

    def run(*args: str):
        artifacts = tmp_path / "artifacts"
        play = run_playbook("profile.yml", "-e", json.dumps({"vllm_campaign_artifacts_dir": str(artifacts)}), *args)
        return play, artifacts

    return run


@pytest.fixture(autouse=True)
def healthy_after(host):
    """Every test must leave the normal service active and healthy, with no fault left."""
    yield
    host.run(f"rm -f {FAULT_DIR}/* {LOCK} {OLD_LOCK}")
    assert_normal_service(host)
