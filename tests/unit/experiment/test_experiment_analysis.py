"""The figures and the noise rule, checked against values re-derived here from the fixture's numbers."""

import json
import statistics

import pytest

from vllm_ops.experiment import build_report, compare, load_experiment


def by_name(report, name, host="h1"):
    for e in [*report["baselines"], *report["variants"]]:
        if e["name"] == name and e["host"] == host:
            return e
    raise KeyError(name)


def point(entry, conc):
    return next(p for p in entry["points"] if p["concurrency"] == conc)


def rule(base, var, floor_pct, lower_is_better):
    """The noise rule, written again from its definition: change, band, verdict."""
    cb, cv = statistics.median(base), statistics.median(var)
    change = cv / cb - 1
    band = (max(abs(b - cb) for b in base) + max(abs(v - cv) for v in var)) / cb
    band = max(band, floor_pct / 100)
    if abs(change) <= band:
        verdict = "no change"
    elif (change < 0) == lower_is_better:
        verdict = "better"
    else:
        verdict = "worse"
    return 100 * change, 100 * band, verdict


@pytest.fixture
def report(fixture_dir):
    return build_report([load_experiment(fixture_dir)])


def test_baseline_pools_both_rounds(report, fx):
    b = by_name(report, "baseline")
    p1 = point(b, 1)
    pooled = fx.BASE_TPOT_1[0] + fx.BASE_TPOT_1[1]
    assert p1["runs"] == 6 and p1["completed"] == 6 * 32 and p1["failed_requests"] == 0
    tpot = p1["metrics"]["median_tpot_ms"]
    assert sorted(tpot["values"]) == sorted(pooled)
    assert tpot["center"] == statistics.median(pooled) == 10.0
    assert (tpot["min"], tpot["max"]) == (9.9, 10.1)
    thr = point(b, 8)["metrics"]["output_throughput"]
    assert thr["center"] == statistics.median(fx.BASE_THR_8[0] + fx.BASE_THR_8[1])
    assert point(b, 1)["metrics"]["p99_tpot_ms"]["center"] == pytest.approx(statistics.median(
        [1.5 * v for v in pooled]))
    assert b["category"] == "baseline" and b["measured"] is True


@pytest.mark.parametrize("name", ["NCCL_PROTO=LL128", "max-num-seqs=64", "tradeoff", "inside-noise", "worse"])
def test_headline_comparisons_follow_the_noise_rule(report, fx, name):
    _env, _args, tpot, thr, _counters = fx.VARIANTS[name]
    v = by_name(report, name)
    for key, base, var, lower in (("tpot", fx.BASE_TPOT_1[0] + fx.BASE_TPOT_1[1], tpot, True),
                                  ("throughput", fx.BASE_THR_8[0] + fx.BASE_THR_8[1], thr, False)):
        change, band, verdict = rule(base, var, 1.0, lower)
        got = v["headline"][key]
        assert got["change_pct"] == pytest.approx(change, abs=1e-4)
        assert got["noise_pct"] == pytest.approx(band, abs=1e-4)
        assert got["verdict"] == verdict


def test_hand_figures_of_the_winner(report):
    v = by_name(report, "NCCL_PROTO=LL128")
    # TPOT 9.0 against 10.0: -10 %; band (0.1 + 0.1) / 10 = 2 %; throughput 1100 against 1000, band 20 / 1000.
    assert v["headline"]["tpot"] == {"change_pct": -10.0, "noise_pct": 2.0, "verdict": "better", "concurrency": 1}
    assert v["headline"]["throughput"] == {"change_pct": 10.0, "noise_pct": 2.0, "verdict": "better",
                                           "concurrency": 8}
    # the other metrics are compared too: TTFT is 3 x TPOT in the fixture, so -10 % again
    assert point(v, 1)["comparison"]["median_ttft_ms"]["verdict"] == "better"
    assert point(v, 8)["comparison"]["median_tpot_ms"]["verdict"] == "no change"


def test_categories_and_ranking(report):
    cats = {v["name"]: v["category"] for v in report["variants"]}
    assert cats == {"NCCL_PROTO=LL128": "better", "max-num-seqs=64": "better", "tradeoff": "trade-off",
                    "inside-noise": "no change", "worse": "worse", "draft": "failed"}
    assert [r["name"] for r in report["ranking"]] == [
        "NCCL_PROTO=LL128", "max-num-seqs=64", "tradeoff", "inside-noise", "worse", "draft"]
    assert [r["rank"] for r in report["ranking"]] == [1, 2, 3, 4, 5, 6]
    assert report["counts"] == {"better": 2, "trade-off": 1, "no change": 1, "worse": 1, "not compared": 0,
                                "failed": 1, "not run": 0}


def test_better_variants_rank_by_tpot_then_throughput(make_dir, tmp_path, fx):
    same_tpot = [9.0, 9.1, 8.9]
    variants = {"small-gain": ({}, [], same_tpot, [1030.0, 1031.0, 1029.0], {}),
                "big-gain": ({}, [], same_tpot, [1100.0, 1101.0, 1099.0], {}),
                "thr-only": ({}, [], [10.0, 10.0, 10.0], [1200.0, 1201.0, 1199.0], {})}
    r = build_report([load_experiment(make_dir(tmp_path / "e", variants=variants, failed_variant=False))])
    assert [x["name"] for x in r["ranking"]] == ["big-gain", "small-gain", "thr-only"]


def test_spec_decoding_and_preemptions(report):
    p = point(by_name(report, "max-num-seqs=64"), 1)
    # 3 runs of 100 drafts, 300 draft tokens, 150 accepted: 450 / 900 and 1 + 450 / 300
    assert p["spec_decode"] == {"drafts": 300, "draft_tokens": 900, "accepted_tokens": 450, "acceptance": 0.5,
                                "mean_accepted_length": 2.5}
    assert p["preemptions"] == 0
    none = point(by_name(report, "worse"), 1)["spec_decode"]
    assert none["acceptance"] is None and none["mean_accepted_length"] is None and none["drafts"] is None
    assert report["spec_decode"] is True


def test_failed_variant(report, fx):
    v = by_name(report, "draft")
    assert v["status"] == "failed" and v["category"] == "failed"
    assert all(p["status"] == "not measured" and p["runs"] == 0 for p in v["points"])
    assert point(v, 1)["comparison"]["median_tpot_ms"]["verdict"] == "failed"
    assert report["failures"] == [{"label": "draft @ h1", "name": "draft", "host": "h1", "stage": "load",
                                   "message": "vllm-x.service did not become healthy: exited",
                                   "journal": fx.JOURNAL}]


def test_failed_requests_warn_and_a_point_without_completions_fails(make_dir, tmp_path, fx):
    variants = {"flaky": ({}, [], [9.0, 9.1, 8.9], [1100.0, 1110.0, 1090.0], {})}
    d = make_dir(tmp_path / "e", variants=variants, failed_variant=False)
    exp = json.loads((tmp_path / "e" / "experiment.json").read_text())
    for run in exp["runs"]:  # at 8 every run of flaky completed nothing; at 1 one run lost 2 requests
        if run["variant"] == "flaky":
            res = json.loads((tmp_path / "e" / run["file"]).read_text())
            if run["concurrency"] == 8:
                res.update(completed=0, failed=32)
            elif run["repeat"] == 2:
                res.update(completed=30, failed=2)
            (tmp_path / "e" / run["file"]).write_text(json.dumps(res))
    r = build_report([load_experiment(d)])
    v = by_name(r, "flaky")
    assert point(v, 8)["status"] == "failed" and point(v, 8)["metrics"]["output_throughput"]["center"] is None
    assert v["headline"]["throughput"]["verdict"] == "failed" and v["category"] == "failed"
    assert point(v, 1)["failed_requests"] == 2 and point(v, 1)["completed"] == 94
    assert "flaky on h1: 2 failed requests at concurrency 1 (3 runs)" in r["warnings"]
    assert "flaky on h1: 96 failed requests at concurrency 8 (3 runs)" in r["warnings"]


def test_drift(make_dir, tmp_path):
    end = [10.5, 10.55, 10.45]  # +5 % at the end: outside (0.1 + 0.05) / 10
    r = build_report([load_experiment(make_dir(tmp_path / "e", base_tpot=([10.0, 10.1, 9.9], end)))])
    d = r["experiments"][0]["drift"][0]
    assert d["concurrency"] == 1
    assert d["tpot"]["round1"] == 10.0 and d["tpot"]["round2"] == 10.5
    assert d["tpot"]["change_pct"] == pytest.approx(5.0) and d["tpot"]["noise_pct"] == pytest.approx(1.5)
    assert d["tpot"]["drifted"] is True and d["throughput"]["drifted"] is False
    assert r["experiments"][0]["drifted"] == "baseline drifted +5.0% (TPOT at 1)"


@pytest.mark.parametrize(("base", "var", "direction", "verdict"), [
    ([100.0], [101.0], "lower", "no change"),  # exactly the 1 % floor: inside the band
    ([100.0], [101.5], "lower", "worse"),
    ([100.0], [98.0], "higher", "worse"),
    ([100.0], [102.0], "higher", "better"),
    ([100.0, 104.0, 96.0], [107.0], "lower", "worse"),  # band (4 + 0) / 100 = 4 %, change +7 %
    ([100.0, 104.0, 96.0], [103.0], "lower", "no change"),  # +3 % inside 4 %
    ([100.0, 104.0, 96.0], [90.0, 95.0, 100.0], "lower", "no change"),  # -5 % inside (4 + 5) / 100
])
def test_compare(base, var, direction, verdict):
    got = compare({"values": base, "center": statistics.median(base)},
                  {"values": var, "center": statistics.median(var)}, direction, 1.0)
    change, band, _ = rule(base, var, 1.0, direction == "lower")
    assert got["verdict"] == verdict
    assert got["change_pct"] == pytest.approx(change, abs=1e-4) and got["noise_pct"] == pytest.approx(band, abs=1e-4)


def test_compare_without_figures():
    assert compare(None, {"values": [1.0], "center": 1.0}, "lower", 1.0)["verdict"] == "not compared"
    assert compare({"values": [0.0], "center": 0.0}, {"values": [1.0], "center": 1.0}, "lower", 1.0) == {
        "change_pct": None, "noise_pct": None, "verdict": "not compared"}


def test_baseline_without_runs(make_dir, tmp_path):
    r = build_report([load_experiment(make_dir(tmp_path / "e", base_tpot=None))])
    b = r["baselines"][0]
    assert b["measured"] is False and b["status"] == "failed"
    assert {v["category"] for v in r["variants"]} == {"not compared", "failed"}
    assert r["failures"][0]["message"] == "no baseline run completed a request"


def test_a_variant_the_experiment_never_reached(make_dir, tmp_path):
    d = make_dir(tmp_path / "e", variants={}, failed_variant=False)
    path = tmp_path / "e" / "experiment.json"
    exp = json.loads(path.read_text())
    exp["variants"].append({"name": "late", "environment": {"NCCL_PROTO": "LL128"}, "extra_args": [],
                            "profile": False, "status": "not run", "failure": None})
    path.write_text(json.dumps(exp))
    r = build_report([load_experiment(d)])
    assert r["variants"][0]["category"] == "not run" and r["failures"] == []
    assert r["headline"] == "no variant beat the baseline: 1 not run"


def test_a_variant_that_failed_at_the_benchmark_keeps_its_figures(make_dir, tmp_path):
    variants = {"oom": ({}, ["--max-num-seqs", "1024"], [9.0, 9.1, 8.9], [1100.0, 1110.0, 1090.0], {})}
    d = make_dir(tmp_path / "e", variants=variants, failed_variant=False)
    path = tmp_path / "e" / "experiment.json"
    exp = json.loads(path.read_text())
    exp["variants"][0].update(status="failed", failure={"stage": "benchmark", "message": "engine died at 8",
                                                        "journal": ["CUDA out of memory"]})
    exp["runs"] = [r for r in exp["runs"] if not (r["variant"] == "oom" and r["concurrency"] == 8)]
    path.write_text(json.dumps(exp))
    r = build_report([load_experiment(d)])
    v = r["variants"][0]
    assert v["category"] == "failed" and v["status"] == "failed"
    assert point(v, 1)["metrics"]["median_tpot_ms"]["center"] == 9.0  # measured, shown, not compared
    assert point(v, 1)["comparison"]["median_tpot_ms"]["verdict"] == "failed"
    assert point(v, 8)["status"] == "not measured"
    assert r["headline"] == "no variant beat the baseline: 1 failed"
