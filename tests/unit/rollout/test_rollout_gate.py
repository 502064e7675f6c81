"""The canary's gate (vllm_ops.rollout.gate): expected figures computed here from the runs."""

import json
import statistics
from pathlib import Path

import pytest

from vllm_ops.experiment import load_experiment
from vllm_ops.rollout import RolloutInputError, gate

from rollout_helpers import same


def band(before, after, floor_pct=1.0):
    """The experiment's noise band, percent: the largest distances from each side's median over the baseline's."""
    cb, ca = statistics.median(before), statistics.median(after)
    spread = max(abs(b - cb) for b in before) + max(abs(a - ca) for a in after)
    return max(100 * spread / cb, floor_pct)


def test_a_change_inside_the_noise_passes(canary_dir):
    before = {1: [(10.0, 100.0, 16, 0), (10.2, 99.0, 16, 0), (9.8, 101.0, 16, 0)], 4: same(20.0, 400.0)}
    after = {1: [(10.1, 100.0, 16, 0), (10.3, 99.0, 16, 0), (9.9, 101.0, 16, 0)], 4: same(20.1, 399.0)}
    verdict = gate(load_experiment(canary_dir(before, after)), 5.0)
    assert verdict["passed"] and verdict["regressions"] == []
    p1 = verdict["points"][0]
    assert p1["tpot"]["change_pct"] == pytest.approx(100 * (10.1 / 10.0 - 1), abs=1e-4)
    assert p1["tpot"]["noise_pct"] == pytest.approx(band([10.0, 10.2, 9.8], [10.1, 10.3, 9.9]), abs=1e-4)
    assert p1["tpot"]["verdict"] == "no change" and not p1["tpot"]["regressed"]
    assert verdict["line"].startswith("canary a: TPOT +1.0% (noise ±4.0%) at concurrency 1, throughput -0.2% "
                                      "(noise ±1.0%) at concurrency 4, failed requests 0.0% -> 0.0%: passed")


def test_a_slower_change_regresses_beyond_the_threshold_and_the_noise(canary_dir):
    before = {1: same(5.0, 100.0), 4: same(5.0, 400.0)}
    after = {1: same(15.0, 34.0), 4: same(15.0, 140.0)}
    verdict = gate(load_experiment(canary_dir(before, after)), 5.0)
    assert not verdict["passed"]
    assert verdict["regressions"] == [
        "TPOT rose 200.0% at concurrency 1 (noise ±1.0%)", "throughput fell 66.0% at concurrency 1 (noise ±1.0%)",
        "TPOT rose 200.0% at concurrency 4 (noise ±1.0%)", "throughput fell 65.0% at concurrency 4 (noise ±1.0%)"]
    assert "regressed: TPOT rose 200.0% at concurrency 1" in verdict["line"]


def test_worse_but_within_the_threshold_passes(canary_dir):
    verdict = gate(load_experiment(canary_dir({1: same(10.0, 100.0)}, {1: same(10.3, 97.0)})), 5.0)
    assert verdict["passed"]
    assert verdict["points"][0]["tpot"]["verdict"] == "worse"  # outside the 1% floor, inside the 5% allowed


def test_a_band_wider_than_the_regression_allowed_is_inconclusive_and_fails_closed(canary_dir):
    # TPOT 10/14/6 before, 11/15/7 after: median 10 -> 11, band (4 + 4) / 10 = 80%, far above the 5% allowed.
    before = {1: [(10.0, 100.0, 16, 0), (14.0, 80.0, 16, 0), (6.0, 120.0, 16, 0)]}
    after = {1: [(11.0, 95.0, 16, 0), (15.0, 75.0, 16, 0), (7.0, 115.0, 16, 0)]}
    verdict = gate(load_experiment(canary_dir(before, after)), 5.0)
    assert not verdict["passed"] and verdict["verdict"] == "inconclusive" and verdict["regressions"] == []
    tpot_band, thr_band = band([10.0, 14.0, 6.0], [11.0, 15.0, 7.0]), band([100.0, 80.0, 120.0], [95.0, 75.0, 115.0])
    assert verdict["inconclusive"] == [
        f"the TPOT noise band at concurrency 1 (±{tpot_band:.1f}%) is wider than the largest regression allowed (5%)",
        f"the throughput noise band at concurrency 1 (±{thr_band:.1f}%) is wider than the largest regression "
        "allowed (5%)"]
    assert verdict["line"].endswith(
        f"(±{thr_band:.1f}%) is wider than the largest regression allowed (5%): the gate cannot see a regression of "
        "5% through that noise. More repeats or requests narrow the band (the load's repeats and num_prompts, "
        "vllm_rollout_bench_load); -e vllm_rollout_accept_inconclusive=true lets it pass")
    assert verdict["warnings"][0].startswith(
        "the TPOT noise band at concurrency 1 (±80.0%) is wider than the largest regression allowed (5%): a regression "
        "of that size would read as no change")


def test_an_inconclusive_gate_passes_only_when_accepted_and_says_so(canary_dir):
    before = {1: [(10.0, 100.0, 16, 0), (14.0, 80.0, 16, 0), (6.0, 120.0, 16, 0)]}
    after = {1: [(11.0, 95.0, 16, 0), (15.0, 75.0, 16, 0), (7.0, 115.0, 16, 0)]}
    verdict = gate(load_experiment(canary_dir(before, after)), 5.0, accept_inconclusive=True)
    assert verdict["passed"] and verdict["verdict"] == "passed, inconclusive accepted"
    assert ": passed (at most 5% worse), inconclusive accepted (vllm_rollout_accept_inconclusive): the TPOT noise " \
           "band at concurrency 1 (±80.0%)" in verdict["line"]
    # A regression beyond a wide band is a regression, accepted or not.
    slower = {1: [(30.0, 40.0, 16, 0), (34.0, 30.0, 16, 0), (26.0, 50.0, 16, 0)]}
    verdict = gate(load_experiment(canary_dir(before, slower)), 5.0, accept_inconclusive=True)
    assert not verdict["passed"] and verdict["verdict"] == "regressed"


def test_more_failed_requests_than_allowed_regress(canary_dir):
    before = {1: same(10.0, 100.0, completed=16, failed=0)}
    after = {1: same(10.0, 100.0, completed=14, failed=2)}
    verdict = gate(load_experiment(canary_dir(before, after)), 5.0)
    assert not verdict["passed"]
    assert verdict["points"][0]["errors"] == {"baseline_pct": 0.0, "change_pct": 12.5, "regressed": True}
    assert verdict["regressions"] == ["failed requests rose from 0.0% to 12.5% at concurrency 1"]


def test_a_change_that_completes_nothing_regresses(canary_dir):
    verdict = gate(load_experiment(canary_dir({1: same(10.0, 100.0)}, {1: same(0.0, 0.0, completed=0, failed=16)})),
                   5.0)
    assert not verdict["passed"]
    assert verdict["regressions"][0] == "the change completed no request at concurrency 1"


def test_an_unmeasured_baseline_cannot_pass(canary_dir):
    verdict = gate(load_experiment(canary_dir({1: same(0.0, 0.0, completed=0, failed=16)}, {1: same(10.0, 100.0)})),
                   5.0)
    assert not verdict["passed"]
    assert verdict["regressions"] == ["the baseline completed no request at concurrency 1: nothing to compare with"]


def test_a_negative_threshold_is_refused(canary_dir):
    with pytest.raises(RolloutInputError, match="0 or more"):
        gate(load_experiment(canary_dir({1: same(10.0, 100.0)}, {1: same(10.0, 100.0)})), -1)


def test_a_replay_that_did_not_reproduce_the_recording_cannot_pass(canary_dir):
    # The canary measured on the users' replayed traffic (one point, concurrency 0): the change's replays
    # sent other prompts than recorded, so its faster figures measure something else and cannot pass.
    directory = Path(canary_dir({0: same(10.0, 100.0)}, {0: same(5.0, 200.0)}))
    path = directory / "experiment.json"
    record = json.loads(path.read_text())
    record["load"].update(traffic="artifacts/traffic/a", traffic_speed=1.0)
    why = "the server saw 96 input tokens against the recording's 3072"
    for run in record["runs"]:
        valid = run["variant"] == "baseline"
        run["fidelity"] = {"valid": valid, "message": "the replay reproduced the recording" if valid else why,
                           "checks": []}
    path.write_text(json.dumps(record))
    (directory / "bench").mkdir(exist_ok=True)
    (directory / "bench/replay.json").write_text(json.dumps({"requests": 2, "span_s": 1.0, "block": 512}))
    verdict = gate(load_experiment(directory), 5.0)
    assert not verdict["passed"] and verdict["verdict"] == "regressed"
    assert verdict["regressions"] == [f"the change's replays did not reproduce the recording, so the gate cannot "
                                      f"judge the change: {why}"]
    assert "TPOT not compared on the replayed traffic" in verdict["line"]
