"""Fixtures for the profile suite (helpers and the autouse healthy_after: molecule/resources/testlib.py)."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))

from testlib import SHARDS_SHARE, checkpoint_bytes, healthy_after, run_playbook, standin_load_s  # noqa: F401


@pytest.fixture
def campaign(tmp_path):
    """Run profile.yml with artifacts under tmp_path; returns (play, artifacts dir)."""

    def run(*args: str):
        artifacts = tmp_path / "artifacts"
        play = run_playbook("profile.yml", "-e", json.dumps({"vllm_job_artifacts_dir": str(artifacts)}), *args)
        return play, artifacts

    return run


# ------------------------------------------------------------------ the loads of a campaign (issue 24)
# Expected values from the scenario's own settings: its host's VLLM_STANDIN_LOAD_S (host_vars'
# sandbox_standin_load_s), of which the stand-in's shards take 85%
# (molecule/resources/standin/lib/vllm_standin/worker.py), and the checkpoint's file sizes as stat
# reads them on the host. No duration but the lower bound a sleep guarantees.

LOAD_S = standin_load_s(Path(__file__).parent)
# The phases the stand-in logs a line for, in vLLM's order, on a host with GPUs and without --enforce-eager.
PHASES = ["start", "weights", "post_load", "compile", "kv_cache", "cuda_graphs", "engine_init", "api_start"]


def assert_campaign_loads(host, campaign, directory):
    """A restart campaign's loads in its job.json, report and check mode (called by the end-to-end campaign test)."""
    job = json.loads((directory / "job.json").read_text())
    nbytes = checkpoint_bytes(host)

    # The restart path: the profiling variant's load, then the normal service's.
    assert [x["variant"] for x in job["loads"]] == ["profiling", None]
    for load in job["loads"]:
        assert load["ready"] and load["failed_in"] is None
        assert [p["name"] for p in load["phases"]] == PHASES
        assert all(p["status"] == "measured" for p in load["phases"]), load["phases"]
        assert sum(p["seconds"] for p in load["phases"]) == pytest.approx(load["total_s"], abs=0.01)
        assert load["weights"]["bytes"] == nbytes
        assert load["weights"]["seconds"] >= LOAD_S * SHARDS_SHARE  # the stand-in sleeps at least that long
        assert load["weights"]["gbps"] == pytest.approx(nbytes / load["weights"]["seconds"] / 1e9,
                                                                      abs=1e-3)
    # Both loads share one compile cache key (model, TP, max length): the second reads it back.
    assert job["loads"][1]["compile"]["cache"] == "hit"

    # The disk's floor: the sandbox's checkpoint is sparse, so every sampled range is a hole and the floor
    # is not measured (never a rate timed on holes); its size and residency are still there.
    disk = job["disk"]
    assert disk["checkpoint_bytes"] == nbytes and disk["files"] == 64
    assert disk["gbps"] is None and "hole" in disk["why"]

    report = (directory / "report.md").read_text()
    section = report.split("## Model loads", 1)[1].split("\n## ", 1)[0]
    assert "| 1 | profiling | ready in " in section and "| 2 | the normal service | ready in " in section
    assert "disk-bound or not: unknown (the disk's floor was not measured" in section

    # Check mode: the campaign's two loads at the median of the loads just measured.
    median = statistics.median(x["total_s"] for x in job["loads"])
    play, _ = campaign("--check")
    assert play.rc == 0, play.output[-4000:]
    said = play.result("Say what a real run would do")["msg"]
    words = f"{median / 60:.1f} min" if median >= 90 else f"{median:.1f} s"
    assert "Expected downtime: 2 model load(s), about " in said
    assert f" of downtime at {words} a load (the 2 load(s) of campaign {job['id']})" in said
