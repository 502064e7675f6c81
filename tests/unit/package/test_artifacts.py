"""vllm_ops.artifacts: atomic writes, JSON as the playbooks wrote it, the newest floor under a host's
artifacts as ansible.builtin.find (recurse, depth 3) and `| sort | last` chose it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.plugins.filter.core import to_nice_json

from vllm_ops.artifacts import atomic_path, find_newest, nice_json, write_json, write_text

NAME = "allreduce-unit.json"


def test_writes_are_atomic_and_leave_nothing_behind(tmp_path):
    target = tmp_path / "new" / "report.md"
    write_text(target, "one\n")
    assert target.read_text() == "one\n"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        with open(tmp, "w") as fh:
            fh.write("half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "one\n"  # the previous version, whole
    assert os.listdir(target.parent) == ["report.md"]


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_a_written_file_has_the_mode_a_plain_write_gives_it_not_0600(tmp_path, umask):
    """Reports and records are read by whoever reads the artifacts, as files Ansible wrote were."""
    old = os.umask(umask)
    try:
        write_json(tmp_path / "job.json", {})
        (tmp_path / "plain.txt").write_text("")  # what a plain open gives, for the same umask
    finally:
        os.umask(old)
    assert (tmp_path / "job.json").stat().st_mode & 0o777 == (tmp_path / "plain.txt").stat().st_mode & 0o777
    assert os.umask(old) == old  # the umask is left as it was


def test_json_as_ansibles_to_nice_json(tmp_path):
    data = {"b": [1, 2.5, None, True], "a": {"z": "µs", "y": {}}, "c": "x\ny"}
    assert nice_json(data) == to_nice_json(data) + "\n"
    write_json(tmp_path / "d.json", data)
    assert json.loads((tmp_path / "d.json").read_text()) == data


def _put(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}")
    return path


def test_the_newest_floor_is_the_last_path_at_most_three_levels_down(tmp_path):
    host = tmp_path / "h1"
    _put(host / "20261130T090000Z" / NAME)  # level 2
    newest = _put(host / "20261201T080000Z" / "allreduce" / NAME)  # level 3
    _put(host / "20261231T000000Z" / "a" / "b" / NAME)  # level 4: too deep
    _put(host / "20261231T000000Z" / "allreduce" / "allreduce-LL128.json")  # another name
    assert find_newest(host, NAME, 3) == str(newest)
    assert find_newest(host, NAME, 2) == str(host / "20261130T090000Z" / NAME)
    assert find_newest(str(host) + "/", NAME, 3) == str(newest)  # normalized paths, as find gives them
    # last by path, not by time: "h1/allreduce-unit.json" sorts after "h1/2026..."
    top = _put(host / NAME)
    assert find_newest(host, NAME, 3) == str(top) and find_newest(host, NAME, 1) == str(top)


def test_links_are_not_followed_nor_found_and_nothing_is_none(tmp_path):
    real = _put(tmp_path / "elsewhere" / "99999999T000000Z" / NAME)
    host = tmp_path / "h1"
    kept = _put(host / "20261130T090000Z" / NAME)
    (host / "zz-link").symlink_to(real.parent, target_is_directory=True)
    (host / "zz-file").mkdir()
    (host / "zz-file" / NAME).symlink_to(real)
    assert find_newest(host, NAME) == str(kept)
    assert find_newest(tmp_path / "none", NAME) is None
    assert find_newest(tmp_path / "elsewhere" / "99999999T000000Z" / NAME, NAME) is None  # a file, no directory
    (tmp_path / "empty").mkdir()
    assert find_newest(tmp_path / "empty", NAME) is None


def test_the_same_choice_as_ansibles_find(tmp_path):
    """What report.yml did: find (recurse, depth 3), then the last path by sort."""
    tool = Path(sys.executable).parent / "ansible"
    if not tool.exists():
        pytest.skip(f"{tool} not installed")
    host = tmp_path / "h1"
    for rel in ("20261130T090000Z/allreduce", "20261201T080000Z/allreduce", "20261202T000000Z/.hidden",
                "20261231T000000Z/a/b", "20261203T000000Z"):
        _put(host / rel / NAME)
    (host / "zz").symlink_to(host / "20261231T000000Z" / "a", target_is_directory=True)
    proc = subprocess.run(
        [str(tool), "localhost", "-c", "local", "-i", "localhost,", "-o",
         "-e", f"ansible_python_interpreter={sys.executable}",
         "-m", "ansible.builtin.find", "-a", f"paths={host} patterns={NAME} recurse=true depth=3"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, ANSIBLE_NOCOLOR="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = json.loads(proc.stdout.split("=>", 1)[1])["files"]
    assert find_newest(host, NAME, 3) == sorted(f["path"] for f in found)[-1]
