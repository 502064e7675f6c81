"""experiments.csv: fixed columns, one row per variant (baseline too) and concurrency, refusal of another header."""

import csv
import statistics

import pytest

from vllm_ops.experiment import (
    COLUMN_DOCS,
    COLUMNS,
    ExperimentInputError,
    append_experiment,
    build_report,
    load_experiment,
)
from vllm_ops.experiment.history import rows

EXPECTED_COLUMNS = (
    "experiment_id", "finished_at", "host", "variant", "settings", "status", "category", "concurrency", "runs",
    "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms",
    "median_e2el_ms", "p99_e2el_ms", "output_throughput", "completed", "failed_requests",
    "tpot_change_pct", "tpot_noise_pct", "tpot_verdict", "throughput_change_pct", "throughput_noise_pct",
    "throughput_verdict", "spec_acceptance", "preemptions", "baseline_host", "load_ready_s", "load",
)


@pytest.fixture
def report(fixture_dir):
    return build_report([load_experiment(fixture_dir)])


def test_columns_are_fixed_and_documented():
    assert COLUMNS == EXPECTED_COLUMNS
    assert all(COLUMN_DOCS[c] for c in COLUMNS)


def test_rows_are_written(tmp_path, report, fx):
    path = tmp_path / "artifacts" / "h1" / "experiments.csv"
    assert append_experiment(path, report) == 7 * 2  # baseline + 6 variants, 2 concurrencies
    text = path.read_text()
    assert text.splitlines()[0] == ",".join(EXPECTED_COLUMNS)
    got = list(csv.DictReader(text.splitlines()))
    assert [(r["variant"], r["concurrency"]) for r in got[:4]] == [
        ("baseline", "1"), ("baseline", "8"), ("NCCL_PROTO=LL128", "1"), ("NCCL_PROTO=LL128", "8")]
    base1, win1, win8 = got[0], got[2], got[3]
    assert base1["settings"] == "NCCL_PROTO=LL --trust-remote-code" and base1["category"] == "baseline"
    assert float(base1["median_tpot_ms"]) == statistics.median(fx.BASE_TPOT_1[0] + fx.BASE_TPOT_1[1])
    assert base1["tpot_verdict"] == "" and base1["runs"] == "6" and base1["baseline_host"] == "h1"
    assert (win1["tpot_change_pct"], win1["tpot_noise_pct"], win1["tpot_verdict"]) == ("-10.0", "2.0", "better")
    assert (win8["throughput_change_pct"], win8["throughput_verdict"]) == ("10.0", "better")
    assert win1["category"] == "better" and win1["status"] == "ok" and win1["completed"] == "96"
    assert win1["spec_acceptance"] == "" and win1["preemptions"] == "0" and win1["load"] == "random"
    spec = next(r for r in got if r["variant"] == "max-num-seqs=64")
    assert spec["spec_acceptance"] == "0.5"
    draft = [r for r in got if r["variant"] == "draft"]
    assert [(r["status"], r["tpot_verdict"], r["runs"], r["median_tpot_ms"]) for r in draft] == [
        ("failed", "failed", "0", "")] * 2
    assert draft[0]["settings"] == """--speculative-config '{"method": "draft_model", "model": "/m/d"}'"""


def test_appends_under_the_same_header(tmp_path, report):
    path = tmp_path / "experiments.csv"
    append_experiment(path, report)
    append_experiment(path, report)
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + 2 * 14 and lines.count(",".join(COLUMNS)) == 1


@pytest.mark.parametrize("missing", [1, 2])
def test_a_file_of_a_release_before_the_load_columns_is_migrated(tmp_path, report, missing):
    # two releases back: neither load_ready_s nor load; one back: no load
    path = tmp_path / "experiments.csv"
    old_header = ",".join(EXPECTED_COLUMNS[:-missing])
    old_row = ",".join(["old"] + [""] * (len(EXPECTED_COLUMNS) - missing - 1))
    path.write_text(f"{old_header}\n{old_row}\n")
    append_experiment(path, report)
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(EXPECTED_COLUMNS) and lines[1] == old_row + "," * missing
    assert len(lines) == 2 + 14


def test_refuses_another_header(tmp_path, report):
    path = tmp_path / "experiments.csv"
    before = "experiment_id,host,variant\nold,h1,x\n"
    path.write_text(before)
    with pytest.raises(ExperimentInputError, match=r"experiments.csv: its header differs .* move the file aside"):
        append_experiment(path, report)
    assert path.read_text() == before


def test_a_row_per_point_for_each_baseline_and_variant(report):
    assert len(rows(report)) == (1 + len(report["variants"])) * len(report["load"]["concurrencies"])
