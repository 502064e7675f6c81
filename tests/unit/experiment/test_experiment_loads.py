"""An experiment's model loads in its report: each server's time to ready, read from the job's job.json, so
that lever variants (a load format, the compile cache) compare by their loads. The load records are built
here from lines the test times itself; the expected seconds are the test's own, not the code's."""

import csv
import json
from pathlib import Path

from vllm_ops.experiment import append_experiment
from vllm_ops.experiment.cli import main
from vllm_ops_host import loads

T0 = 1000.0
FORMATS = {  # variant name -> (--load-format, seconds to ready, weights seconds)
    "format=safetensors": ("safetensors", 40.0, 30.0),
    "format=fastsafetensors": ("fastsafetensors", 25.0, 15.0),
}
RESTORE_S = 41.0


def a_load(total, weights, variant):
    lines = [(T0 + 2.0, "(EngineCore pid=7) INFO [gpu_model_runner.py:5040] Starting to load model /m..."),
             (T0 + 2.0 + weights, f"(Worker pid=9) INFO [default_loader.py:501] Loading weights took {weights:.2f} "
                                  "seconds"),
             (T0 + total, "(APIServer pid=5) INFO:     Application startup complete.")]
    return dict(loads.parse_load(lines, t0=T0, checkpoint_bytes=6_000_000_000), variant=variant)


def test_each_load_format_reports_its_time_to_ready(make_dir, tmp_path, capsys):
    variants = {name: ({}, ["--load-format", fmt], [10.0, 10.1, 9.9], [1000.0, 1010.0, 990.0], {})
                for name, (fmt, _, _) in FORMATS.items()}
    d = Path(make_dir(tmp_path / "exp", variants=variants, failed_variant=False))
    job = {"id": "20261201T142500Z", "kind": "experiment", "host": "h1", "started_at": "2026-12-01T14:25:00Z",
           "finished_at": "2026-12-01T15:25:00Z",
           "loads": [*(a_load(total, w, name) for name, (_, total, w) in FORMATS.items()),
                     a_load(RESTORE_S, 30.0, None)],
           "disk": {"gbps": None, "why": "the files are sparse"}}
    (d / "job.json").write_text(json.dumps(job))
    assert main(["analyze", str(d)]) == 0
    capsys.readouterr()
    report = json.loads((d / "report.json").read_text())
    got = {v["name"]: v["load"]["total_s"] for v in report["variants"]}
    assert got == {name: total for name, (_, total, _) in FORMATS.items()}
    assert report["baselines"][0]["load"]["total_s"] == RESTORE_S
    assert report["experiments"][0]["model_loads"]["count"] == 3
    text = (d / "report.md").read_text()
    section = text.split("## Model loads", 1)[1].split("\n## ", 1)[0]
    for name, (_, total, _) in FORMATS.items():
        assert f"| {name} | {total:.1f} s |" in section
    assert f"| baseline (the normal service) | {RESTORE_S:.1f} s |" in section
    assert "the disk's floor was not measured: the files are sparse" in section
    # experiments.csv: each row of a server carries its time to ready
    append_experiment(tmp_path / "experiments.csv", report)
    csv_rows = list(csv.DictReader((tmp_path / "experiments.csv").open()))
    ready = {r["variant"]: r["load_ready_s"] for r in csv_rows}
    assert ready == {**{name: str(total) for name, (_, total, _) in FORMATS.items()}, "baseline": str(RESTORE_S)}


def test_without_job_json_no_load_is_recorded(fixture_dir, capsys):
    assert main(["analyze", fixture_dir]) == 0
    capsys.readouterr()
    report = json.loads((Path(fixture_dir) / "report.json").read_text())
    assert report["experiments"][0]["model_loads"] is None
    assert all(v["load"] is None for v in report["variants"])
    assert "h1: no model load recorded." in (Path(fixture_dir) / "report.md").read_text()
