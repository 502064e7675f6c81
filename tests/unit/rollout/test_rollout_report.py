"""A rollout's report (vllm_ops.rollout.report and the vllm-rollout-report command)."""

import json
from pathlib import Path

import pytest

from vllm_ops.rollout import RolloutInputError, build_report, load_rollout
from vllm_ops.rollout.cli import main
from vllm_ops.rollout.render import render_markdown
from vllm_ops.rollout.report import reason_line
from vllm_ops_host import loads

from rollout_helpers import host_record, same, write_canary

GATE_LINE = "canary a: TPOT +0.5% (noise ±2.0%) at concurrency 1, ...: passed (at most 5% worse)"


def gate_doc(passed=True, regressions=()):
    return {"schema": "vllm-ops/rollout-gate/1", "host": "a", "passed": passed, "line": GATE_LINE,
            "regressions": list(regressions), "warnings": [], "points": [], "load": {}, "max_regression_pct": 5.0,
            "noise_floor_pct": 1.0}


def test_every_host_changed_says_what_runs_where_and_the_downtime(rollout_dir):
    d = rollout_dir(host_record("a", "canary", "kept", downtime_s=9.25), host_record("b", "fleet", "kept",
                                                                                     downtime_s=8.5), gate=gate_doc())
    report = build_report(load_rollout(d), ["a", "b"])
    assert not report["stopped"] and report["counts"] == {"changed": 2}
    assert [(e["host"], e["status"], e["after"]["version"], e["downtime_s"]) for e in report["entries"]] == [
        ("a", "changed", "0.33.0", 9.25), ("b", "changed", "0.33.0", 8.5)]
    assert report["headline"] == (
        "rollout 20261201T100000Z: 2/2 hosts on the change (vLLM 0.33.0 (/opt/vllm/0.33.0/bin/vllm)); "
        f"{GATE_LINE}; downtime a 9.2 s, b 8.5 s")


def test_what_each_host_runs_is_its_start_s_read_back_where_it_has_one(rollout_dir):
    """A host's last start read back (the vllm role's vllm_readback) says what it runs: the release of
    the executable's own distribution over /version, the executable's real path; a host with no start in
    the job (nothing to read back) keeps /version and ExecStart, without "read back"."""
    read = host_record("a", "canary", "kept")
    read["readback"] = {"pid": 4242, "executable": "/opt/vllm/0.33.0/bin/vllm", "served_version": "0.33.0rc1",
                        "release": {"name": "vllm", "version": "0.33.0", "path": "/x"}, "matches": True,
                        "differences": []}
    served = host_record("b", "fleet", "kept")
    served["readback"] = {"pid": 7, "executable": "/srv/v/bin/vllm", "served_version": "0.33.0", "release": None}
    d = rollout_dir(read, served, host_record("c", "fleet", "kept"), gate=gate_doc())
    report = build_report(load_rollout(d), ["a", "b", "c"])
    assert [e["after"] for e in report["entries"]] == [
        {"version": "0.33.0", "executable": "/opt/vllm/0.33.0/bin/vllm", "read_back": True, "pid": 4242},
        {"version": "0.33.0", "executable": "/srv/v/bin/vllm", "read_back": True, "pid": 7},
        {"version": "0.33.0", "executable": "/opt/vllm/0.33.0/bin/vllm"}]
    assert report["headline"].startswith(
        "rollout 20261201T100000Z: 3/3 hosts on the change (vLLM 0.33.0 (/opt/vllm/0.33.0/bin/vllm); "
        "vLLM 0.33.0 (/opt/vllm/0.33.0/bin/vllm), read back; vLLM 0.33.0 (/srv/v/bin/vllm), read back); ")
    page = render_markdown(report)
    assert "| a | canary | changed | vLLM 0.32.0 (`/opt/vllm/0.32.0/bin/vllm`) | vLLM 0.33.0 " \
           "(`/opt/vllm/0.33.0/bin/vllm`), read back from PID 4242 |" in page
    assert "| c | fleet | changed | vLLM 0.32.0 (`/opt/vllm/0.32.0/bin/vllm`) | vLLM 0.33.0 " \
           "(`/opt/vllm/0.33.0/bin/vllm`) |" in page


def test_a_change_every_host_already_ran_says_nothing_to_change(rollout_dir):
    d = rollout_dir(host_record("a", "canary", "kept", restarted=False, after="0.32.0", downtime_s=0.0),
                    host_record("b", "fleet", "kept", restarted=False, after="0.32.0", downtime_s=0.0))
    report = build_report(load_rollout(d), ["a", "b"])
    assert report["counts"] == {"unchanged": 2}
    assert report["headline"] == ("rollout 20261201T100000Z: nothing to change: 2/2 hosts already ran it, none "
                                  "restarted (vLLM 0.32.0 (/opt/vllm/0.32.0/bin/vllm)); downtime a 0.0 s, b 0.0 s")
    d = rollout_dir(host_record("a", "canary", "kept"), host_record("b", "fleet", "kept", restarted=False),
                    gate=gate_doc(), root="second")
    assert build_report(load_rollout(d), ["a", "b"])["headline"].startswith(
        "rollout 20261201T100000Z: 2/2 hosts on the change (vLLM 0.33.0 (/opt/vllm/0.33.0/bin/vllm)), "
        "1 of them already ran it; ")


def test_a_canary_that_regressed_stops_the_rollout_before_the_others(rollout_dir):
    d = rollout_dir(host_record("a", "canary", "regressed", after="0.32.0", error="the gate"),
                    gate=gate_doc(False, ["TPOT rose 200.0% at concurrency 1 (noise ±1.0%)"]))
    report = build_report(load_rollout(d), ["a", "b"])
    assert report["stopped"] and report["stopped_at"] == "a"
    assert [(e["host"], e["status"]) for e in report["entries"]] == [("a", "rolled back"), ("b", "not reached")]
    assert report["headline"].startswith(
        "rollout 20261201T100000Z stopped at the canary a "
        "(regressed: TPOT rose 200.0% at concurrency 1 (noise ±1.0%)): "
        "a rolled back, runs vLLM 0.32.0 (/opt/vllm/0.32.0/bin/vllm); not reached: b; ")


def test_an_inconclusive_canary_stops_the_rollout_naming_the_band(rollout_dir):
    band = "the TPOT noise band at concurrency 1 (±80.0%) is wider than the largest regression allowed (5%)"
    gate = {**gate_doc(False), "verdict": "inconclusive", "inconclusive": [band]}
    d = rollout_dir(host_record("a", "canary", "inconclusive", after="0.32.0", error="the gate"), gate=gate)
    report = build_report(load_rollout(d), ["a", "b"])
    assert [(e["host"], e["status"]) for e in report["entries"]] == [("a", "rolled back"), ("b", "not reached")]
    assert report["headline"].startswith(
        f"rollout 20261201T100000Z stopped at the canary a (inconclusive: {band}): a rolled back, runs vLLM 0.32.0")


def test_the_table_says_why_in_one_line():
    error = "Fail: The change did not load on a; rolled back. What failed - x. Last journal lines:\nINFO: ..."
    assert reason_line(error) == "Fail: The change did not load on a; rolled back. What failed - x."
    assert reason_line("y" * 300).endswith("...") and len(reason_line("y" * 300)) == 240
    assert reason_line(None) is None


def test_a_refused_canary_has_no_gate(rollout_dir):
    d = rollout_dir(host_record("a", "canary", "refused", restarted=False, after="0.32.0"))
    report = build_report(load_rollout(d), ["a", "b"])
    assert report["entries"][0]["status"] == "refused (nothing stopped)" and report["canary"]["gate"] is None


def test_a_bad_record_is_named(rollout_dir):
    d = rollout_dir(host_record("a", "canary", "exploded"))
    with pytest.raises(RolloutInputError, match=r"hosts/a\.json: 'outcome' must be one of"):
        load_rollout(d)


def test_the_command_writes_the_gate_and_the_report(canary_dir, rollout_dir, capsys):
    canary = canary_dir({1: same(5.0, 100.0)}, {1: same(15.0, 34.0)})
    assert main(["gate", canary, "--max-regression-pct", "5"]) == 0
    gate = json.loads(Path(canary, "gate.json").read_text())
    assert gate["passed"] is False
    assert capsys.readouterr().out.strip().splitlines()[-1] == gate["line"]
    d = rollout_dir(host_record("a", "canary", "regressed", after="0.32.0"), gate=gate)
    assert main(["analyze", str(d), "--hosts", "a,b"]) == 0
    report = json.loads((d / "report.json").read_text())
    assert capsys.readouterr().out.strip().splitlines()[-1] == report["headline"]
    markdown = (d / "report.md").read_text()
    assert "| a | canary | rolled back |" in markdown and "| b | - | not reached |" in markdown
    assert "| 1 | 5.00 -> 15.00: +200.0% (noise +/-1.0%) worse, **regressed** |" in markdown


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["analyze", str(tmp_path)]) == 2
    assert "no such directory" in capsys.readouterr().err


def test_each_host_shows_its_loads_from_its_job_record(rollout_dir, tmp_path):
    # The canary's job.json as the skeleton writes it: one load (the change's), the disk not measured.
    job_dir = tmp_path / "art" / "a" / "20261201T100000Z"
    job_dir.mkdir(parents=True)
    lines = [(100.0, "INFO [gpu_model_runner.py:5040] Starting to load model /m..."),
             (106.5, "INFO [default_loader.py:501] Loading weights took 6.50 seconds"),
             (109.0, "INFO:     Application startup complete.")]
    load = dict(loads.parse_load(lines, t0=100.0, checkpoint_bytes=13_000_000_000), variant=None)
    (job_dir / "job.json").write_text(json.dumps({
        "id": "20261201T100000Z", "kind": "rollout", "host": "a", "started_at": "2026-12-01T10:00:00Z",
        "finished_at": "2026-12-01T10:30:00Z", "loads": [load], "disk": {"gbps": None, "why": "sparse files"}}))
    canary = dict(host_record("a", "canary", "kept"), job_dir=str(job_dir))
    d = rollout_dir(canary, host_record("b", "fleet", "kept"), gate=gate_doc())
    (tmp_path / "art" / "b").mkdir()  # b's job directory holds no job.json
    report = build_report(load_rollout(d), ["a", "b"])
    by_host = {e["host"]: e for e in report["entries"]}
    ml = by_host["a"]["model_loads"]
    # 13 GB in the 6.5 s the weights line states: 2.00 GB/s; ready 9.0 s after the start
    assert ml["count"] == 1 and ml["ready_s"] == [9.0]
    assert ml["clause"] == "1 load, ready in 9.0 s, weights 6.5 s at 2.00 GB/s; disk floor not measured"
    assert by_host["b"]["model_loads"] is None
    assert main(["analyze", str(d), "--hosts", "a,b"]) == 0
    md = (d / "report.md").read_text()
    assert "## Model loads" in md and f"a: **{ml['clause']}.**" in md


@pytest.mark.parametrize("again, words", [
    # 20.0 -> 22.0 ms: +10%, beyond the band (0 spread, the 1% floor): the host itself moved
    ([(22.0, 100.0, 16, 0)] * 3, "measured again after the rollback, the baseline drifted +10.0% (TPOT at 1): the "
                                 "regression may be the host's own drift; run the rollout again"),
    ([(20.0, 100.0, 16, 0)] * 3, "measured again after the rollback, the baseline held within its noise: the "
                                 "regression is the change's"),
])
def test_after_a_rollback_the_canary_s_baseline_measured_again_says_whether_the_host_drifted(
        rollout_dir, tmp_path, again, words):
    job = write_canary(tmp_path / "job", {1: same(20.0, 100.0)}, {1: same(60.0, 100.0)}, again={1: again})
    record = dict(host_record("a", "canary", "regressed", after="0.32.0", error="the gate"), job_dir=job)
    d = rollout_dir(record, gate=gate_doc(False, ["TPOT rose 200.0% at concurrency 1 (noise ±1.0%)"]))
    report = build_report(load_rollout(d), ["a", "b"])
    assert report["canary"]["drift"]["words"] == words
    assert f"{GATE_LINE}; {words}; downtime a 9.5 s" in report["headline"]


def test_a_canary_that_passed_has_no_drift_to_say(rollout_dir, tmp_path):
    job = write_canary(tmp_path / "job", {1: same(20.0, 100.0)}, {1: same(20.0, 100.0)})
    d = rollout_dir(dict(host_record("a", "canary", "kept"), job_dir=job), gate=gate_doc())
    assert build_report(load_rollout(d), ["a"])["canary"]["drift"] is None
    # regressed, but the old service was not measured again: the report says the regression stands unchecked
    job2 = write_canary(tmp_path / "job2", {1: same(20.0, 100.0)}, {1: same(60.0, 100.0)})
    rec = dict(host_record("a", "canary", "regressed", after="0.32.0", error="the gate"), job_dir=job2)
    drift = build_report(load_rollout(rollout_dir(rec, root="second")), ["a"])["canary"]["drift"]
    assert drift["measured"] is False and "cannot be told from the host's drift" in drift["words"]


def test_a_canary_group_reports_every_canary_s_gate_and_the_one_that_stopped_it(rollout_dir, tmp_path):
    """Canaries a and b (a canary group): both pass, every gate is in the headline and the page; when
    b regresses, the headline gives b's gate, not a's."""
    line_b = "canary b: TPOT +1.0% (noise ±2.0%) at concurrency 1, ...: passed (at most 5% worse)"
    good = {"a": gate_doc(), "b": {**gate_doc(), "host": "b", "line": line_b}}
    d = rollout_dir(host_record("a", "canary", "kept"), host_record("b", "canary", "kept"),
                    host_record("c", "fleet", "kept"), gates=good)
    report = build_report(load_rollout(d), ["a", "b", "c"])
    assert [c["host"] for c in report["canaries"]] == ["a", "b"] and report["canary"]["host"] == "a"
    assert f"; {GATE_LINE}; {line_b}; downtime " in report["headline"]
    assert main(["analyze", str(d), "--hosts", "a,b,c"]) == 0
    md = (d / "report.md").read_text()
    assert "## The canary's gate on a" in md and "## The canary's gate on b" in md and line_b in md

    regressed_b = {**gate_doc(False, ["TPOT rose 40.0% at concurrency 1 (noise ±1.0%)"]), "host": "b",
                   "line": "canary b: TPOT +40.0% ...: regressed"}
    d2 = rollout_dir(host_record("a", "canary", "kept"),
                     host_record("b", "canary", "regressed", after="0.32.0", error="the gate"),
                     host_record("c", "fleet", "kept"), gates={"a": good["a"], "b": regressed_b}, root="second")
    stopped = build_report(load_rollout(d2), ["a", "b", "c"])
    assert stopped["canary"]["host"] == "b" and stopped["stopped_at"] == "b"
    assert "canary b: TPOT +40.0% ...: regressed" in stopped["headline"] and GATE_LINE not in stopped["headline"]
