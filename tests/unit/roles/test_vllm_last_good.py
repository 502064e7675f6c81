"""The last-known-good store (plugins/module_utils/vllm_last_good_lib.py) on real files in a tmp dir."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from ansible_collections.vllm_ops.serving.plugins.module_utils import vllm_last_good_lib as lkg

RECORD = {"version": "0.32.0", "served_version": "0.32.0", "executable": "/opt/vllm/0.32.0/bin/vllm",
          "venv_dir": "/opt/vllm/0.32.0", "unit": "vllm-kimi-k25-int4.service"}


@pytest.fixture
def host(tmp_path):
    """A unit, its environment file, its drop-in directory (empty) and a store, as the role lays them out."""
    etc = tmp_path / "etc"
    (etc / "unit.service.d").mkdir(parents=True)
    unit = etc / "unit.service"
    unit.write_text("[Service]\nExecStart=/opt/vllm/0.32.0/bin/vllm serve /m\n")
    env = etc / "unit.env"
    env.write_text("NCCL_PROTO=LL\n")
    env.chmod(0o640)
    variant_env = etc / "unit.variant.env"  # absent in the normal service
    return {"store": str(tmp_path / "store"), "unit": unit, "env": env, "variant_env": variant_env,
            "dropins": etc / "unit.service.d", "files": [str(unit), str(env), str(variant_env)],
            "dirs": [str(etc / "unit.service.d")]}


def save(host, record=RECORD, when="2026-12-01T10:00:00Z", check_mode=False):
    return lkg.save(host["store"], host["files"], host["dirs"], record, when, check_mode)


def test_a_save_keeps_contents_modes_and_absences(host):
    changed, manifest = save(host)
    assert changed
    files = manifest["files"]
    unit_text = host["unit"].read_bytes()
    assert files[str(host["unit"])]["sha256"] == hashlib.sha256(unit_text).hexdigest()
    assert files[str(host["env"])]["mode"] == 0o640
    assert files[str(host["variant_env"])] == {"present": False}
    on_disk = json.loads(Path(host["store"], "manifest.json").read_text())
    assert on_disk == manifest and on_disk["schema"] == "vllm-ops/last-good/1"
    assert on_disk["record"] == RECORD and on_disk["saved_at"] == "2026-12-01T10:00:00Z"
    # The store is root-only: it holds the secrets file.
    assert os.stat(host["store"]).st_mode & 0o777 == 0o700


def test_saving_the_same_again_changes_nothing(host):
    save(host)
    before = Path(host["store"], "manifest.json").read_text()
    changed, manifest = save(host, when="2026-12-02T10:00:00Z")
    assert not changed
    assert Path(host["store"], "manifest.json").read_text() == before
    assert manifest["saved_at"] == "2026-12-01T10:00:00Z"


def test_a_check_mode_save_says_it_would_change_and_writes_nothing(host):
    changed, _ = save(host, check_mode=True)
    assert changed and not Path(host["store"]).exists()


def test_restore_puts_back_content_and_mode_and_removes_what_the_good_state_did_not_have(host):
    _, manifest = save(host)
    good_unit = host["unit"].read_text()
    host["unit"].write_text("[Service]\nExecStart=/opt/vllm/0.33.0/bin/vllm serve /m\n")
    host["env"].chmod(0o644)
    host["variant_env"].write_text("NCCL_PROTO=LL128\n")
    (host["dropins"] / "50-variant.conf").write_text("[Service]\n")
    now = lkg.snapshot(host["files"], host["dirs"])
    assert lkg.differences(manifest, now) == sorted(
        [str(host["unit"]), str(host["env"]), str(host["variant_env"]), str(host["dropins"] / "50-variant.conf")])

    changed = lkg.restore(host["store"], lkg.load(host["store"]))
    assert len(changed) == 4
    assert host["unit"].read_text() == good_unit
    assert host["env"].stat().st_mode & 0o777 == 0o640
    assert not host["variant_env"].exists()
    assert list(host["dropins"].iterdir()) == []
    assert lkg.differences(manifest, lkg.snapshot(host["files"], host["dirs"])) == []
    assert lkg.restore(host["store"], manifest) == []


def test_a_check_mode_restore_names_the_paths_and_changes_none(host):
    _, manifest = save(host)
    host["unit"].write_text("changed\n")
    assert lkg.restore(host["store"], manifest, check_mode=True) == [str(host["unit"])]
    assert host["unit"].read_text() == "changed\n"


def test_a_drop_in_the_good_state_had_is_saved_and_comes_back(host):
    dropin = host["dropins"] / "10-limits.conf"
    dropin.write_text("[Service]\nLimitNOFILE=4096\n")
    save(host)
    dropin.unlink()
    assert lkg.restore(host["store"], lkg.load(host["store"])) == [str(dropin)]
    assert dropin.read_text() == "[Service]\nLimitNOFILE=4096\n"


def test_a_save_killed_before_its_manifest_leaves_the_previous_good_state_whole(host, monkeypatch):
    save(host)
    good = host["unit"].read_text()
    host["unit"].write_text("the change that never came up\n")
    real_write = lkg._write_atomic

    def killed(path, data, mode, uid=None, gid=None):
        if path.endswith("manifest.json"):
            raise KeyboardInterrupt("SIGKILL stand-in")
        real_write(path, data, mode, uid, gid)

    monkeypatch.setattr(lkg, "_write_atomic", killed)
    with pytest.raises(KeyboardInterrupt):
        save(host, record=dict(RECORD, version="0.33.0"))
    monkeypatch.setattr(lkg, "_write_atomic", real_write)
    manifest = lkg.load(host["store"])
    assert manifest["record"]["version"] == "0.32.0"
    lkg.restore(host["store"], manifest)
    assert host["unit"].read_text() == good
    # The next save drops the blob that no manifest names.
    save(host, when="2026-12-03T00:00:00Z")
    blobs = set(os.listdir(Path(host["store"], "blobs")))
    assert blobs == {s["sha256"] for s in lkg.load(host["store"])["files"].values() if s["present"]}


def test_the_history_adds_a_version_when_the_executable_changes(host):
    save(host, when="2026-12-01T00:00:00Z")
    new = dict(RECORD, version="0.33.0", served_version="0.33.0", executable="/opt/vllm/0.33.0/bin/vllm",
               venv_dir="/opt/vllm/0.33.0")
    host["unit"].write_text("[Service]\nExecStart=/opt/vllm/0.33.0/bin/vllm serve /m\n")
    save(host, record=new, when="2026-12-02T00:00:00Z")
    host["env"].write_text("NCCL_PROTO=LL128\n")
    _, manifest = save(host, record=new, when="2026-12-03T00:00:00Z")
    assert [(h["version"], h["first_saved_at"], h["last_saved_at"]) for h in manifest["history"]] == [
        ("0.32.0", "2026-12-01T00:00:00Z", "2026-12-01T00:00:00Z"),
        ("0.33.0", "2026-12-02T00:00:00Z", "2026-12-03T00:00:00Z")]


def test_a_damaged_store_is_refused_saying_what_to_do(host):
    Path(host["store"]).mkdir()
    Path(host["store"], "manifest.json").write_text("{not json")
    with pytest.raises(lkg.LastGoodError, match=r"cannot be read .* remove the directory"):
        lkg.load(host["store"])


def test_a_damaged_blob_is_refused_before_anything_is_written(host):
    _, manifest = save(host)
    host["unit"].write_text("changed\n")
    blob = Path(host["store"], "blobs", manifest["files"][str(host["unit"])]["sha256"])
    blob.write_text("tampered\n")
    with pytest.raises(lkg.LastGoodError, match="is damaged"):
        lkg.restore(host["store"], manifest)
    assert host["unit"].read_text() == "changed\n"


@pytest.mark.parametrize("damage", ["tampered", "missing"])
def test_a_damaged_second_copy_leaves_the_first_file_unwritten(host, damage):
    _, manifest = save(host)
    # Two changed files; restore() goes in path order: unit.env first, then unit.service.
    host["env"].write_text("NCCL_PROTO=LL128\n")
    host["unit"].write_text("changed\n")
    changed = lkg.differences(manifest, lkg.snapshot(host["files"], host["dirs"]))
    assert changed == [str(host["env"]), str(host["unit"])]
    blob = Path(host["store"], "blobs", manifest["files"][str(host["unit"])]["sha256"])
    if damage == "tampered":
        blob.write_text("tampered\n")
    else:
        blob.unlink()
    with pytest.raises(lkg.LastGoodError) as raised:
        lkg.restore(host["store"], manifest)
    message = str(raised.value)
    assert f"the saved copy of {host['unit']} ({blob})" in message and "nothing was restored" in message
    assert str(host["env"]) not in message
    assert host["env"].read_text() == "NCCL_PROTO=LL128\n", "the first file was rewritten before the error"
    assert host["unit"].read_text() == "changed\n"


def test_no_store_means_no_last_known_good(host):
    assert lkg.load(host["store"]) is None


def test_the_description_names_the_version_the_server_gave(host):
    _, manifest = save(host)
    assert lkg.describe(manifest) == "vLLM 0.32.0 (/opt/vllm/0.32.0/bin/vllm), kept 2026-12-01T10:00:00Z"


def history(*entries):
    return [{"version": v, "venv_dir": f"/opt/vllm/{v}", "last_saved_at": at} for v, at in entries]


def test_the_versions_kept_are_the_last_ones_run_the_rest_the_role_installed_removed():
    ran = history(("0.30.0", "2026-10-01T00:00:00Z"), ("0.31.0", "2026-11-01T00:00:00Z"),
                  ("0.32.0", "2026-12-01T00:00:00Z"))
    installed = ["/opt/vllm/0.30.0", "/opt/vllm/0.31.0", "/opt/vllm/0.32.0", "/opt/vllm/0.34.0"]
    assert lkg.kept_versions(ran, 2) == ["/opt/vllm/0.32.0", "/opt/vllm/0.31.0"]
    # 0.34.0 was installed and has not run yet: it stays, as does the running one.
    assert lkg.prune_plan(installed, ran, 2, protect=["/opt/vllm/0.32.0"]) == ["/opt/vllm/0.30.0"]
    assert lkg.prune_plan(installed, ran, 1, protect=["/opt/vllm/0.31.0"]) == ["/opt/vllm/0.30.0"]
    assert lkg.prune_plan(installed, ran, 1) == ["/opt/vllm/0.30.0", "/opt/vllm/0.31.0"]
    # A directory the role did not install (no mark: not a candidate) is never removed.
    assert lkg.prune_plan(["/opt/vllm/0.32.0"], ran, 1) == []


def test_a_rollback_makes_the_older_version_the_most_recent_again():
    ran = history(("0.31.0", "2026-12-03T00:00:00Z"), ("0.32.0", "2026-12-02T00:00:00Z"),
                  ("0.30.0", "2026-11-01T00:00:00Z"))
    assert lkg.prune_plan(["/opt/vllm/0.30.0", "/opt/vllm/0.31.0", "/opt/vllm/0.32.0"], ran, 2) == ["/opt/vllm/0.30.0"]


def test_nothing_is_removed_without_a_history_or_with_keep_0():
    installed = ["/opt/vllm/0.31.0"]
    assert lkg.prune_plan(installed, [], 2) == []
    assert lkg.prune_plan(installed, history(("0.31.0", "2026-11-01T00:00:00Z"),
                                             ("0.32.0", "2026-12-01T00:00:00Z")), 0) == []
    assert lkg.prune_plan(installed, history(("0.32.0", "2026-12-01T00:00:00Z")), 0) == []
