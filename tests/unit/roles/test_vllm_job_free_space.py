"""plugins/modules/vllm_job_free_space.py: the directory a job writes, measured where it will be."""

from __future__ import annotations

import os

from ansible_collections.vllm_ops.serving.plugins.modules import vllm_job_free_space as free_space


def test_a_directory_that_does_not_exist_yet_is_measured_at_its_nearest_existing_parent(tmp_path):
    (tmp_path / "a").mkdir()
    assert free_space.nearest_existing(str(tmp_path / "a/b/c")) == str(tmp_path / "a")
    assert free_space.nearest_existing(str(tmp_path / "a")) == str(tmp_path / "a")
    stats = os.statvfs(tmp_path)
    assert free_space.free_mib(str(tmp_path)) == stats.f_bavail * stats.f_frsize // 2**20


def test_the_refusal_names_the_directory_its_free_space_and_the_need():
    said = free_space.shortfall("/srv/a/new", "/srv/a", 7, 2048, "the traces", "the capture needs about 900 MiB",
                                "the controller", "set X to a larger volume")
    assert said == ("Not enough free space for the traces: the capture needs about 900 MiB; 7 MiB are free under "
                    "/srv/a on the controller (/srv/a/new does not exist yet: its nearest existing parent was "
                    "measured). Free room there, or set X to a larger volume.")
    assert free_space.shortfall("/srv/a", "/srv/a", 7, 8, "x", "", "h1", "") == (
        "Not enough free space for x: 8 MiB are needed; 7 MiB are free under /srv/a on h1. Free room there.")
    assert free_space.shortfall("/srv/a", "/srv/a", 8, 8, "x", "", "h1", "") == ""
