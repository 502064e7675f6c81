"""vllm-experiment-report analyze / combine: files written, headline last, exit 2 on bad input."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_ops.experiment.cli import main
from vllm_ops.render import template_path

TEMPLATE = template_path("experiment_report.md.j2")  # the one shipped in the package
SCRIPT = Path(sys.executable).parent / "vllm-experiment-report"
PNG = b"\x89PNG\r\n\x1a\n"


def test_analyze(fixture_dir, tmp_path, capsys):
    history = tmp_path / "artifacts" / "h1" / "experiments.csv"
    assert main(["analyze", fixture_dir, "--history", str(history), "--template", str(TEMPLATE)]) == 0
    out = capsys.readouterr().out.splitlines()
    report = json.loads((tmp_path / "exp" / "report.json").read_text())
    assert out[-1] == report["headline"] and out[-1].startswith("best: NCCL_PROTO=LL128: TPOT -10.0% (+/-2.0%)")
    assert report["schema"] == "vllm-ops/experiment-report/1" and report["kind"] == "host"
    assert set(report) >= {"id", "hosts", "load", "noise_rule", "headline_metrics", "experiments", "baselines",
                           "variants", "ranking", "counts", "failures", "warnings", "cost", "charts", "headline"}
    for png in ("throughput.png", "tpot.png"):
        assert (tmp_path / "exp" / png).read_bytes()[:8] == PNG
    assert report["headline"] in (tmp_path / "exp" / "report.md").read_text()
    assert len(list(csv.DictReader(history.open()))) == 14


def test_bad_input_exits_2(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vllm-experiment-report: error: experiment ") and "no such file" in err


def test_header_mismatch_exits_2(fixture_dir, tmp_path, capsys):
    history = tmp_path / "x.csv"
    history.write_text("a,b\n1,2\n")
    assert main(["analyze", fixture_dir, "--history", str(history)]) == 2
    assert "its header differs" in capsys.readouterr().err and history.read_text() == "a,b\n1,2\n"


def test_combine_compares_each_variant_with_its_own_hosts_baseline(make_dir, tmp_path, capsys):
    # h2's baseline is 20 % slower; its variant is 5 % faster than h2's baseline but slower than h1's
    slow = ([12.0, 12.12, 11.88], [12.0, 12.06, 11.94])
    h1 = make_dir(tmp_path / "h1", host="h1", variants={
        "NCCL_PROTO=LL128": ({"NCCL_PROTO": "LL128"}, [], [9.0, 9.1, 8.9], [1100.0, 1110.0, 1090.0], {})},
        failed_variant=False)
    h2 = make_dir(tmp_path / "h2", host="h2", base_tpot=slow, variants={
        "NCCL_ALGO=Tree": ({"NCCL_ALGO": "Tree"}, [], [11.4, 11.45, 11.35], [1000.0, 1005.0, 995.0], {})})
    out = tmp_path / "fleet"
    history = tmp_path / "fleet.csv"
    assert main(["combine", "--out", str(out), "--history", str(history), h2, h1]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["kind"] == "fleet" and report["hosts"] == ["h2", "h1"]
    tree = next(v for v in report["variants"] if v["name"] == "NCCL_ALGO=Tree")
    assert tree["host"] == "h2" and tree["label"] == "NCCL_ALGO=Tree @ h2"
    # against h2's own baseline (median 12.0): 11.4 / 12 - 1 = -5 %, band (0.12 + 0.05) / 12
    assert tree["headline"]["tpot"]["change_pct"] == pytest.approx(-5.0)
    assert tree["headline"]["tpot"]["noise_pct"] == pytest.approx(100 * 0.17 / 12, abs=1e-4)
    assert tree["headline"]["tpot"]["verdict"] == "better"
    assert [r["label"] for r in report["ranking"]] == ["NCCL_PROTO=LL128 @ h1", "NCCL_ALGO=Tree @ h2", "draft @ h2"]
    assert [b["label"] for b in report["baselines"]] == ["baseline @ h2", "baseline @ h1"]
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == report["headline"] == (
        "best: NCCL_PROTO=LL128 @ h1: TPOT -10.0% (+/-2.0%) at concurrency 1; throughput +10.0% (+/-2.0%) at 8; "
        "1 more better; 1 failed")
    rows = list(csv.DictReader(history.open()))
    assert {(r["variant"], r["host"], r["baseline_host"]) for r in rows} == {
        ("baseline", "h2", "h2"), ("baseline", "h1", "h1"), ("NCCL_ALGO=Tree", "h2", "h2"),
        ("NCCL_PROTO=LL128", "h1", "h1"), ("draft", "h2", "h2")}
    assert (out / "tpot.png").read_bytes()[:8] == PNG


def test_combine_refuses_different_experiments(make_dir, tmp_path, capsys):
    a = make_dir(tmp_path / "a", host="h1")
    b = make_dir(tmp_path / "b", host="h2", exp_id="other")
    assert main(["combine", "--out", str(tmp_path / "o"), a, b]) == 2
    assert "experiment id 'other' differs" in capsys.readouterr().err
    c = make_dir(tmp_path / "c", host="h1")
    assert main(["combine", "--out", str(tmp_path / "o"), a, c]) == 2
    assert "each host may appear once" in capsys.readouterr().err


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed (pip install -e .)")
def test_console_script(fixture_dir):
    done = subprocess.run([str(SCRIPT), "analyze", fixture_dir], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("best: NCCL_PROTO=LL128")
    # no --template: the report from the template shipped in the package, as with it
    text = (Path(fixture_dir) / "report.md").read_text()
    assert main(["analyze", fixture_dir, "--template", str(TEMPLATE)]) == 0
    assert (Path(fixture_dir) / "report.md").read_text() == text and done.stdout.splitlines()[-1] in text
    bad = subprocess.run([str(SCRIPT), "analyze"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2
