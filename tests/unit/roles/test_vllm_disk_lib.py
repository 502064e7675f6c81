"""The vllm_disk role's host library on real files written here: residency from mincore, the floor read with
O_DIRECT (leaving the page cache as it was), the sample's spread and its refusal of holes, the pacing, the
buffered fallback where O_DIRECT is refused, and the warm-up's fit with both figures. Rates are measured,
never asserted."""

from __future__ import annotations

import errno
import os

import pytest
from ansible_collections.vllm_ops.serving.plugins.module_utils import vllm_disk_lib as disk

MIB = 1 << 20


def dense(path, mib):
    with open(path, "wb") as fh:
        fh.write(os.urandom(mib * MIB))
        fh.flush()
        os.fsync(fh.fileno())
    return str(path)


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.fixture
def checkpoint(tmp_path):
    return [dense(tmp_path / f"model-{i}.safetensors", 24) for i in range(3)]


def test_residency_follows_the_page_cache(checkpoint):
    for path in checkpoint:
        evict(path)
    cold = disk.residency(checkpoint)
    assert cold["files"] == 3 and cold["bytes"] == 3 * 24 * MIB
    assert cold["resident_fraction"] <= 0.05, "a clean file dropped with DONTNEED leaves the cache"
    with open(checkpoint[0], "rb") as fh:
        fh.read()
    warm = disk.residency(checkpoint)
    assert warm["resident_bytes"] >= 24 * MIB * 0.95
    assert warm["resident_fraction"] == pytest.approx(warm["resident_bytes"] / (3 * 24 * MIB), abs=1e-4)


def test_the_floor_reads_the_disk_and_leaves_the_cache_as_it_was(checkpoint):
    for path in checkpoint:
        evict(path)
    before = disk.residency(checkpoint)["resident_bytes"]
    floor = disk.measure_floor(checkpoint, 64 * MIB, 8 * MIB, 0, 30)
    assert floor["method"] == "O_DIRECT" and floor["why"] is None
    assert floor["chunks"] == 8 and floor["bytes"] == 8 * 8 * MIB
    assert floor["gbps"] == pytest.approx(floor["bytes"] / floor["seconds"] / 1e9, rel=0.01)
    assert disk.residency(checkpoint)["resident_bytes"] <= before + MIB, "O_DIRECT bypasses the page cache"


def test_the_sample_is_spread_over_the_files_and_aligned(checkpoint):
    ranges, holes = disk.sample_ranges(checkpoint, 9 * 4 * MIB, 4 * MIB)
    assert holes == 0 and len(ranges) == 9
    assert {p for p, _, _ in ranges} == set(checkpoint)  # dealt round-robin: 3 ranges each
    for path in checkpoint:
        offsets = sorted(o for p, o, _ in ranges if p == path)
        assert offsets == [1 * 4 * MIB, 3 * 4 * MIB, 5 * 4 * MIB]  # slots 1, 3, 5 of 6: spread evenly
    assert all(o % (4 * MIB) == 0 and n == 4 * MIB for _, o, n in ranges)


def test_a_sparse_checkpoint_has_no_floor(tmp_path):
    files = []
    for i in range(2):
        path = tmp_path / f"model-{i}.safetensors"
        with open(path, "wb") as fh:
            fh.write(b"header" * 100)
            fh.truncate(256 * MIB)  # a hole: what the sandbox's toy checkpoint is made of
        files.append(str(path))
    floor = disk.measure_floor(files, 64 * MIB, 16 * MIB, 0, 30)
    assert floor["gbps"] is None and floor["bytes"] == 0
    assert floor["holes_skipped"] == 4 and "sparse" in floor["why"]


def test_too_small_a_sample_is_not_a_floor(tmp_path):
    files = [dense(tmp_path / "a.safetensors", 8)]
    floor = disk.measure_floor(files, 8 * MIB, 4 * MIB, 0, 30)
    assert floor["gbps"] is None and floor["bytes"] == 8 * MIB and "at least" in floor["why"]


def test_reads_are_paced_to_the_average_rate(monkeypatch):
    clock = {"now": 100.0}
    slept = []
    monkeypatch.setattr(disk.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(disk.time, "sleep", slept.append)
    # 50 MiB done one second after the start, at most 10 MiB/s: sleep until 5 s have passed
    clock["now"] = 101.0
    assert disk._pace(100.0, 50 * MIB, 10 * MIB) == pytest.approx(4.0)
    assert slept == [pytest.approx(4.0)]
    assert disk._pace(100.0, 5 * MIB, 10 * MIB) == 0.0  # already below the rate
    assert disk._pace(100.0, 50 * MIB, 0) == 0.0  # unpaced


def test_where_o_direct_is_refused_only_uncached_ranges_are_read_then_dropped(checkpoint, monkeypatch):
    real_open = os.open

    def no_direct(path, flags, *args):
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args)

    monkeypatch.setattr(disk.os, "open", no_direct)
    for path in checkpoint:
        evict(path)
    with open(checkpoint[1], "rb") as fh:  # one file cached: its ranges are not read
        fh.read()
    floor = disk.measure_floor(checkpoint, 6 * 4 * MIB, 4 * MIB, 0, 30)
    assert floor["method"].startswith("buffered")
    assert floor["chunks"] == 4 and floor["bytes"] == 4 * 4 * MIB  # 2 ranges of each cold file
    after = disk.residency([checkpoint[0], checkpoint[2]])
    assert after["resident_bytes"] <= MIB, "the ranges read are dropped again"


def test_the_warm_up_fits_or_is_refused_with_both_figures(checkpoint):
    for path in checkpoint:
        evict(path)
    total = 3 * 24 * MIB
    plan = disk.warm_plan(checkpoint, {"MemAvailable": total + 2 * MIB}, 1 * MIB)
    assert plan["fits"] and plan["checkpoint_bytes"] == total
    assert plan["needed_bytes"] == total - plan["resident_bytes"] and plan["read_s"] is None  # unpaced
    # at 8 MiB/s, the bytes still to read take needed / 8 MiB seconds: what the job's lock adds
    paced = disk.warm_plan(checkpoint, {"MemAvailable": total + 2 * MIB}, 1 * MIB, 8 * MIB)
    assert paced["read_s"] == round(paced["needed_bytes"] / (8 * MIB), 1)
    refused = disk.warm_plan(checkpoint, {"MemAvailable": 40 * MIB}, 8 * MIB)
    assert not refused["fits"]
    assert f"({total} bytes in 3 file(s))" in refused["message"]
    assert f"(MemAvailable {40 * MIB} bytes)" in refused["message"]


def test_the_warm_up_reads_everything_into_the_cache(checkpoint):
    for path in checkpoint:
        evict(path)
    done = disk.warm(checkpoint, 0)
    assert done["bytes"] == 3 * 24 * MIB
    assert disk.residency(checkpoint)["resident_fraction"] >= 0.95


def test_meminfo_is_in_bytes(tmp_path):
    path = tmp_path / "meminfo"
    path.write_text("MemTotal:       24683652 kB\nMemAvailable:   23191984 kB\nHugePages_Total:       0\n")
    assert disk.meminfo(str(path)) == {"MemTotal": 24683652 * 1024, "MemAvailable": 23191984 * 1024,
                                       "HugePages_Total": 0}
