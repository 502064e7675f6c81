"""src/vllm_ops/loadcost.py: a job's loads read from job.json, the host's last measured load (the newest job's
loads first), the downtime a plan expects, the reports' summary and the vllm-load-report command."""

from __future__ import annotations

import json

import pytest

from vllm_ops import loadcost
from vllm_ops_host import loads

T0 = 100.0


def a_load(total, weights=None, variant=None, ready=True, nbytes=52_600_000_000):
    """A load record as the health wait writes it, from lines timed by the test."""
    weights = weights if weights is not None else total * 0.8
    lines = [(T0 + 1.0, "INFO [gpu_model_runner.py:5040] Starting to load model /m..."),
             (T0 + 1.0 + weights, f"INFO [default_loader.py:501] Loading weights took {weights:.2f} seconds")]
    if ready:
        lines.append((T0 + total, "INFO:     Application startup complete."))
    return dict(loads.parse_load(lines, t0=T0, checkpoint_bytes=nbytes), variant=variant)


# What every job.json holds besides the figures a test gives (vllm_ops.records.job).
JOB = {"host": "h1", "started_at": "2026-12-01T08:00:00Z", "finished_at": "2026-12-01T08:30:00Z"}


def write(path, name, data):
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_text(json.dumps({**JOB, **data} if name == "job.json" else data))


def test_the_newest_jobs_loads_are_the_hosts_measured_load(tmp_path):
    host = tmp_path / "h1"
    write(host / "20261201T080000Z", "job.json", {"kind": "experiment", "id": "E1",
                                                  "loads": [a_load(50.0), a_load(70.0)]})
    # newer, but from a release before the loads: it has only gaps, so the loads above win
    write(host / "20261201T090000Z", "job.json", {"kind": "campaign", "id": "C", "downtime": {"gap_list": [
        {"seconds": 30.0, "open": False}]}})
    assert loadcost.last_load(host) == {"seconds": 60.0, "source": "the 2 load(s) of experiment E1"}
    # a newer job whose loads never got ready has no measured load either
    write(host / "20261201T100000Z", "job.json", {"kind": "tune", "id": "T", "loads": [a_load(9.0, ready=False)]})
    assert loadcost.last_load(host)["seconds"] == 60.0
    write(host / "20261201T110000Z", "job.json", {"kind": "campaign", "id": "C2",
                                                  "loads": [a_load(8.0), a_load(9.0), a_load(30.0)]})
    assert loadcost.last_load(host) == {"seconds": 9.0, "source": "the 3 load(s) of campaign C2"}


def test_without_loads_the_older_sources_remain(tmp_path):
    host = tmp_path / "h1"
    assert loadcost.last_load(host)["seconds"] is None
    write(host / "20261201T100000Z", "job.json", {"kind": "campaign", "id": "A", "downtime": {"gap_list": [
        {"seconds": 30.0, "open": False}, {"seconds": 40.0, "open": False}, {"seconds": 500.0, "open": True}]}})
    assert loadcost.last_load(host) == {"seconds": 35.0, "source": "the downtime gaps of campaign A"}
    assert loadcost.last_load(None)["seconds"] is None


def test_the_expected_downtime():
    got = loadcost.expected(3, {"seconds": 600.0, "source": "the 2 load(s) of experiment E1"})
    assert (got["loads"], got["load_s"], got["downtime_s"]) == (3, 600.0, 1800.0)
    assert got["words"] == ("3 model load(s), about 30.0 min of downtime at 10.0 min a load "
                            "(the 2 load(s) of experiment E1)")
    assert loadcost.expected(0, {"seconds": 600.0})["words"] == "no model load (the service is not restarted)"
    assert "minutes unknown" in loadcost.expected(2, {"seconds": None, "source": "none yet"})["words"]


def test_the_summary_sets_each_load_against_the_disk():
    items = [a_load(10.0, weights=8.0, variant="profiling"), a_load(12.0, weights=8.0)]
    disk = {"gbps": 2.0, "bytes": 2**30, "seconds": 0.5, "method": "O_DIRECT", "resident_fraction": 0.0}
    s = loadcost.summary(items, disk)
    assert s["count"] == 2 and s["ready_s"] == [10.0, 12.0]
    first = s["loads"][0]
    assert first["variant"] == "profiling" and first["ready"]
    rate = 52.6e9 / 8.0 / 1e9  # the checkpoint's bytes over the stated weights time
    assert first["weights"]["gbps"] == pytest.approx(rate, abs=5e-4)
    assert first["against"]["bound"] == "page cache"  # 6.6 GB/s from a disk of 2: it was cached
    assert s["clause"] == ("2 loads, ready in 11.0 s (median), weights 8.0 s at 6.58 GB/s; this disk reads "
                           "2.00 GB/s: read from the page cache")
    assert loadcost.summary([], None)["clause"] is None
    untimed_disk = loadcost.summary(items[:1], {"gbps": None, "why": "sparse files"})
    assert untimed_disk["clause"].endswith("; disk floor not measured")
    assert untimed_disk["loads"][0]["against"]["bound"] == "unknown"


def test_the_command(tmp_path, capsys):
    host = tmp_path / "h1"
    job = host / "20261201T080000Z"
    write(job, "job.json", {"kind": "experiment", "id": "E1", "loads": [a_load(10.0, variant="v1")],
                            "disk": {"gbps": None, "why": "the files are sparse"}})
    assert loadcost.main(["expect", "--loads", "2", "--under", str(host)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["load_s"], got["downtime_s"]) == (10.0, 20.0)
    assert loadcost.main(["show", str(job)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("load 1 (v1): ready in 10.0 s: start 1.0 s, weights 8.0 s (52.6 GB at 6.58 GB/s)")
    assert out[1] == "the disk's floor was not measured: the files are sparse"
    assert loadcost.main(["expect", "--loads", "-1"]) == 2
    assert "give the number of model loads" in capsys.readouterr().err


def test_a_rollbacks_load_says_what_it_was():
    # The health wait's record of a rollback (roles/vllm/tasks/rollback.yml): the normal service, and what.
    rollback = dict(a_load(9.0), what="the rollback to the last-known-good")
    s = loadcost.summary([a_load(5.0, ready=False), rollback], None)
    assert [x["server"] for x in s["loads"]] == [
        "the normal service", "the normal service, the rollback to the last-known-good"]
    assert loadcost.server_words({"variant": "profiling", "what": None}) == "profiling"


def test_each_load_says_what_ran_read_back_where_it_was():
    # The health wait's record with the vllm role's read-back (roles/vllm/tasks/health.yml), a record
    # from before it, and one whose start differed from what was asked.
    read = dict(a_load(9.0), readback={"pid": 4242, "matches": True,
                                      "words": "runs what was asked: vLLM 0.32.0 (/opt/vllm/0.32.0/bin/vllm), "
                                               "20 arguments, 3 variables checked"})
    differed = dict(a_load(9.0), readback={"pid": 7, "matches": False, "words": "NCCL_PROTO: asked NCCL_PROTO=LL, "
                                                                              "runs NCCL_PROTO=Simple"})
    s = loadcost.summary([read, a_load(9.0), differed], None)
    assert [x["read_back"] for x in s["loads"]] == [
        "PID 4242: runs what was asked: vLLM 0.32.0 (/opt/vllm/0.32.0/bin/vllm), 20 arguments, 3 variables checked",
        None, "PID 7: NCCL_PROTO: asked NCCL_PROTO=LL, runs NCCL_PROTO=Simple"]
