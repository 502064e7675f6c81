"""plugins/modules/vllm_job_lock.py, run as Ansible runs a module: one lock for every job."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

import run_module

BOOT = Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def run(tmp_path: Path, check_mode: bool = False, **args) -> dict:
    """The module's JSON answer for ``args`` (its exit status is in ``failed``)."""
    got = run_module.run("vllm_job_lock", tmp_path, check_mode=check_mode, **args)
    # Warnings as the play shows them: their text (ansible-core 2.19 returns them structured).
    warnings = got.get("warnings") or []
    warnings = warnings if isinstance(warnings, list) else [warnings]
    got["warnings"] = [w["event"]["msg"] if isinstance(w, dict) else w for w in warnings]
    return got


def old_lock(path: Path, expires_epoch: float, **extra) -> dict:
    """A lock as the campaign lock of earlier releases wrote it (campaign_id, no kind)."""
    lock = {"campaign_id": "20261130T010000Z", "started_at": "2026-11-30T01:00:00Z",
            "expires_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires_epoch)),
            "expires_epoch": expires_epoch, "boot_id": BOOT,
            "owner": {"controller": "ops-laptop", "controller_pid": 4242, "user": "alice"}, **extra}
    path.write_text(json.dumps(lock))
    return lock


def test_acquire_then_release(tmp_path):
    lock = tmp_path / "run/job.lock"
    got = run(tmp_path, path=str(lock), job_id="j1", kind="experiment", ttl_s=60, owner={"user": "bob"})
    assert got["changed"] and not got.get("failed")
    content = json.loads(lock.read_text())
    assert (content["job_id"], content["kind"], content["owner"], content["boot_id"]) == ("j1", "experiment",
                                                                                           {"user": "bob"}, BOOT)
    assert content["expires_epoch"] == pytest.approx(time.time() + 60, abs=30)
    # The same job again changes nothing; another job is refused, naming the holder.
    assert run(tmp_path, path=str(lock), job_id="j1")["changed"] is False
    other = run(tmp_path, path=str(lock), job_id="j2")
    assert other["failed"] and f"Another job holds {lock}: experiment j1, started " in other["msg"]
    # Another job's release leaves the lock alone; the holder's removes it.
    assert run(tmp_path, path=str(lock), job_id="j2", state="released")["changed"] is False and lock.exists()
    assert run(tmp_path, path=str(lock), job_id="j1", state="released")["changed"] and not lock.exists()


def test_a_live_lock_of_the_old_name_is_honoured(tmp_path):
    lock, legacy = tmp_path / "job.lock", tmp_path / "campaign.lock"
    old_lock(legacy, time.time() + 3600)
    seen = run(tmp_path, path=str(lock), legacy_paths=[str(legacy)], job_id="j1", state="inspect")
    assert seen["owner"] == {"controller": "ops-laptop", "controller_pid": 4242, "user": "alice"}
    got = run(tmp_path, path=str(lock), legacy_paths=[str(legacy)], job_id="j1")
    assert got["failed"]
    assert got["msg"].startswith(f"Another job holds {legacy}: campaign 20261130T010000Z, started "
                                 "2026-11-30T01:00:00Z from ops-laptop (PID 4242, user alice)")
    assert legacy.exists() and not lock.exists()


@pytest.mark.parametrize(("why", "extra", "dead"), [
    ("it expired at ", {}, None),
    ("the host rebooted since it was taken", {"boot_id": "another-boot"}, None),
    ("its controller process 4242 is gone", {}, 4242),
])
def test_a_stale_lock_of_the_old_name_is_removed_with_a_warning(tmp_path, why, extra, dead):
    lock, legacy = tmp_path / "job.lock", tmp_path / "campaign.lock"
    expires = time.time() - 10 if why.startswith("it expired") else time.time() + 3600
    old_lock(legacy, expires, **extra)
    args = dict(path=str(lock), legacy_paths=[str(legacy)], job_id="j1", kind="campaign")
    if dead is not None:
        args["dead_owner_pid"] = dead
    # Check mode says what it would replace and changes nothing.
    checked = run(tmp_path, check_mode=True, **args)
    assert checked["changed"] and checked["replaced"]["path"] == str(legacy) and legacy.exists()
    got = run(tmp_path, **args)
    assert got["changed"] and not got.get("failed")
    assert not legacy.exists() and json.loads(lock.read_text())["job_id"] == "j1"
    (warning,) = got["warnings"]
    assert warning.startswith(f"Replaced a stale job lock ({why}")
    assert warning.endswith("campaign 20261130T010000Z, started 2026-11-30T01:00:00Z, "
                            f"left under its old name {legacy}.")


def test_an_unreadable_lock_is_stale(tmp_path):
    lock = tmp_path / "job.lock"
    lock.write_text("{not json")
    got = run(tmp_path, path=str(lock), job_id="j1")
    assert got["changed"] and got["warnings"] == ["Replaced a stale job lock (the lock file is not valid JSON)."]
    assert json.loads(lock.read_text())["job_id"] == "j1"
