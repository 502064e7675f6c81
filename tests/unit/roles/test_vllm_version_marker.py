"""plugins/modules/vllm_version_marker.py, run as Ansible runs a module: the role's mark on a version directory,
which is what lets vllm_versions remove that directory later."""

from __future__ import annotations

import json

import run_module


def test_the_mark_says_the_version_and_who_installed_it_and_is_written_once(tmp_path):
    venv = tmp_path / "0.33.0"
    venv.mkdir()
    answer = run_module.run("vllm_version_marker", tmp_path, path=str(venv), version="0.33.0", mode="0644")
    mark = venv / ".vllm-ops-version"
    assert answer["changed"] is True and answer["marker"] == str(mark)
    assert json.loads(mark.read_text()) == {"version": "0.33.0", "installed_by": "vllm-ops vllm role"}
    assert oct(mark.stat().st_mode & 0o777) == "0o644"
    again = run_module.run("vllm_version_marker", tmp_path, path=str(venv), version="0.33.0", mode="0644")
    assert again["changed"] is False


def test_a_mark_as_earlier_releases_wrote_it_is_left_as_it_is(tmp_path):
    venv = tmp_path / "0.32.0"
    venv.mkdir()
    # what the role's copy task wrote before the module (Ansible's to_nice_json: sorted keys, four spaces)
    earlier = '{\n    "installed_by": "vllm-ops vllm role",\n    "version": "0.32.0"\n}\n'
    (venv / ".vllm-ops-version").write_text(earlier)
    answer = run_module.run("vllm_version_marker", tmp_path, path=str(venv), version="0.32.0")
    assert answer["changed"] is False


def test_a_version_not_installed_yet_is_marked_in_check_mode_only(tmp_path):
    venv = tmp_path / "0.34.0"
    checked = run_module.run("vllm_version_marker", tmp_path, check_mode=True, path=str(venv), version="0.34.0")
    assert checked["changed"] is True and not venv.exists()
    failed = run_module.run("vllm_version_marker", tmp_path, path=str(venv), version="0.34.0")
    assert failed["failed"] and failed["msg"] == f"{venv} is not a directory: install vLLM 0.34.0 there first."
