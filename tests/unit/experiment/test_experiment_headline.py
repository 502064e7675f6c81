"""Headline strings, asserted exactly."""

import pytest

from vllm_ops.experiment import build_report, headline, load_experiment

FIXTURE_HEADLINE = ("best: NCCL_PROTO=LL128: TPOT -10.0% (+/-2.0%) at concurrency 1; throughput +10.0% (+/-2.0%) "
                    "at 8; 1 more better; 1 trade-off; 1 variant no change; 1 worse; 1 failed")


def cmp(change, noise, verdict, conc):
    return {"change_pct": change, "noise_pct": noise, "verdict": verdict, "concurrency": conc}


def entry(name, category, tpot=None, thr=None):
    return {"name": name, "label": f"{name} @ h1", "category": category,
            "headline": {"tpot": tpot or cmp(None, None, "failed", 1),
                         "throughput": thr or cmp(None, None, "failed", 32)}}


BASE = [{"host": "h1", "measured": True}]
NO_DRIFT = {"h1": []}


def test_the_fixture_headline(fixture_dir):
    assert build_report([load_experiment(fixture_dir)])["headline"] == FIXTURE_HEADLINE


def test_the_brief_example():
    ranked = [entry("NCCL_PROTO=LL128", "better", cmp(-7.3, 1.1, "better", 1), cmp(4.0, 0.8, "better", 32)),
              entry("a", "no change", cmp(0.2, 1.0, "no change", 1), cmp(0.1, 1.0, "no change", 32)),
              entry("b", "no change", cmp(0.2, 1.0, "no change", 1), cmp(0.1, 1.0, "no change", 32)),
              entry("c", "failed")]
    assert headline(ranked, BASE, NO_DRIFT) == ("best: NCCL_PROTO=LL128: TPOT -7.3% (+/-1.1%) at concurrency 1; "
                                                "throughput +4.0% (+/-0.8%) at 32; 2 variants no change; 1 failed")


def test_a_best_metric_inside_the_noise_says_no_change():
    ranked = [entry("x", "better", cmp(-7.3, 1.1, "better", 1), cmp(0.5, 0.8, "no change", 32))]
    assert headline(ranked, BASE, NO_DRIFT) == ("best: x: TPOT -7.3% (+/-1.1%) at concurrency 1; "
                                                "throughput no change (+/-0.8%) at 32")


def test_no_better_variant():
    ranked = [entry(n, "no change", cmp(0.1, 1.0, "no change", 1), cmp(0.1, 1.0, "no change", 32))
              for n in "abc"] + [entry("d", "failed")]
    assert headline(ranked, BASE, NO_DRIFT) == "no variant beat the baseline: 3 variants no change; 1 failed"
    one = [entry("a", "no change"), entry("w", "worse"), entry("t", "trade-off"), entry("u", "trade-off")]
    assert headline(one, BASE, NO_DRIFT) == ("no variant beat the baseline: 2 trade-offs; 1 variant no change; "
                                             "1 worse")
    assert headline([], BASE, NO_DRIFT) == "no variant beat the baseline: no variants"


def test_drift_is_appended():
    drift = {"h1": [{"concurrency": 1, "tpot": {"drifted": True, "change_pct": 3.1},
                     "throughput": {"drifted": False, "change_pct": 0.5}},
                    {"concurrency": 32, "tpot": {"drifted": False, "change_pct": 0.2},
                     "throughput": {"drifted": True, "change_pct": -2.0}}]}
    ranked = [entry("a", "no change")]
    assert headline(ranked, BASE, drift) == ("no variant beat the baseline: 1 variant no change; "
                                             "baseline drifted +3.1% (TPOT at 1)")


def test_drift_in_the_fixture(make_dir, tmp_path):
    r = build_report([load_experiment(make_dir(tmp_path / "e", base_tpot=([10.0, 10.1, 9.9], [10.5, 10.55, 10.45])))])
    assert r["headline"].endswith("; baseline drifted +5.0% (TPOT at 1)")


def test_baseline_not_measured(make_dir, tmp_path):
    r = build_report([load_experiment(make_dir(tmp_path / "e", base_tpot=None))])
    assert r["headline"] == ("the baseline could not be measured on h1 (no baseline run completed a request), "
                             "so no variant was compared; 1 failed")


@pytest.mark.parametrize(("category", "n", "text"), [
    ("worse", 2, "2 worse"), ("failed", 3, "3 failed"), ("trade-off", 1, "1 trade-off"),
    ("no change", 1, "1 variant no change"),
])
def test_counts(category, n, text):
    assert headline([entry(f"v{i}", category) for i in range(n)], BASE, NO_DRIFT) == (
        f"no variant beat the baseline: {text}")
