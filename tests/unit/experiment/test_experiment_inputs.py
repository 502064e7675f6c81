"""Input checks: each bad input is one clear ExperimentInputError naming the file and field."""

import json

import pytest

from vllm_ops.experiment import ExperimentInputError, load_experiment


def edit(d, change):
    path = d / "experiment.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_loads_the_fixture(fixture_dir):
    exp = load_experiment(fixture_dir)
    assert exp["id"] == "20261201T142500Z" and exp["host"] == "h1" and exp["noise_floor_pct"] == 1.0
    assert len(exp["runs"]) == 12 + 5 * 6 and exp["runs"][0]["result"]["completed"] == 32


def test_missing_directory(tmp_path):
    with pytest.raises(ExperimentInputError, match=r"experiment .*experiment.json: no such file"):
        load_experiment(tmp_path / "nowhere")


def test_invalid_json(tmp_path):
    (tmp_path / "experiment.json").write_text("{")
    with pytest.raises(ExperimentInputError, match=r"experiment.json: invalid JSON"):
        load_experiment(tmp_path)


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d.pop("id"), r"'id' must be a non-empty string"),
    (lambda d: d["load"].update(concurrencies=[]), r"'load.concurrencies' must be a non-empty list"),
    (lambda d: d["load"].update(concurrencies=[1, 1]), r"lists a concurrency twice"),
    (lambda d: d.update(noise_floor_pct=-1), r"'noise_floor_pct' must be a non-negative number"),
    (lambda d: d["variants"][0].update(name="baseline"), r"variants\[0\]: the name 'baseline' is reserved"),
    (lambda d: d["variants"][1].update(name="NCCL_PROTO=LL128"), r"variant names must be unique"),
    (lambda d: d["variants"][0].update(status="maybe"), r"'status' must be one of"),
    (lambda d: d["runs"][0].update(variant="nope"), r"runs\[0\]: variant 'nope' is not 'baseline' nor listed"),
    (lambda d: d["runs"][-1].update(round=2), r"'round' must be 1 or 2 for the baseline and 1 for a variant"),
    (lambda d: d["runs"][0].update(concurrency=3), r"'concurrency' 3 is not one of load.concurrencies"),
    (lambda d: d["runs"][0].update(metrics={"num_preemptions_total": "x"}), r"'metrics.num_preemptions_total'"),
    (lambda d: d["runs"][0].update(file="bench/missing.json"), r"runs\[0\]: bench result .*missing.json: no such file"),
])
def test_bad_experiment(fixture_dir, tmp_path, change, message):
    edit(tmp_path / "exp", change)
    with pytest.raises(ExperimentInputError, match=message):
        load_experiment(fixture_dir)


def test_bad_bench_result(fixture_dir, tmp_path):
    exp = json.loads((tmp_path / "exp" / "experiment.json").read_text())
    bench = tmp_path / "exp" / exp["runs"][3]["file"]
    bench.write_text(json.dumps({"completed": "32", "failed": 0}))
    with pytest.raises(ExperimentInputError, match=r"runs\[3\]: bench result .*'completed' must be a non-negative"):
        load_experiment(fixture_dir)
    bench.write_text(json.dumps({"completed": 32, "failed": 0, "median_tpot_ms": "fast"}))
    with pytest.raises(ExperimentInputError, match=r"'median_tpot_ms' must be a non-negative number"):
        load_experiment(fixture_dir)


def test_missing_metric_keys_are_not_measured(fixture_dir, tmp_path):
    """An e2el percentile vllm bench serve was not asked for is null, never zero."""
    exp = json.loads((tmp_path / "exp" / "experiment.json").read_text())
    for run in exp["runs"]:
        path = tmp_path / "exp" / run["file"]
        res = json.loads(path.read_text())
        res.pop("p99_e2el_ms")
        path.write_text(json.dumps(res))
    from vllm_ops.experiment import build_report

    r = build_report([load_experiment(fixture_dir)])
    p = r["variants"][0]["points"][0]
    assert p["metrics"]["p99_e2el_ms"] == {"values": [], "center": None, "min": None, "max": None}
    assert p["comparison"]["p99_e2el_ms"]["verdict"] == "not compared"


def test_a_variable_the_variant_unsets_reads_as_unset_not_as_none(make_dir, tmp_path):
    from vllm_ops.experiment import build_report

    variants = {"nccl-default-algo": ({"NCCL_ALGO": None, "NCCL_PROTO": "LL128"}, [], [9.0, 9.1, 8.9],
                                      [1100.0, 1110.0, 1090.0], {})}
    directory = make_dir(tmp_path / "exp", variants=variants, failed_variant=False)
    exp = load_experiment(directory)
    assert exp["variants"][0]["environment"] == {"NCCL_ALGO": None, "NCCL_PROTO": "LL128"}
    (variant,) = build_report([exp])["variants"]
    assert variant["settings"] == "-NCCL_ALGO NCCL_PROTO=LL128"
