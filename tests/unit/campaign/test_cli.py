"""vllm-campaign-report: chart, history and headline; exit 2 with one line on bad input."""

import csv
import json
import subprocess

import pytest

from vllm_ops.campaign.cli import main

from campaign_helpers import BIN, write_json

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _one_error_line(capsys, message):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("vllm-campaign-report: error: ") and message in err, err


def test_chart(tmp_path, two_ranks, capsys):
    summary = write_json(tmp_path / "summary.json", two_ranks)
    out = tmp_path / "decode.png"
    assert main(["chart", summary, str(out), "--host", "vllm-sandbox", "--campaign-id", "c1"]) == 0
    assert capsys.readouterr().out == f"wrote {out} (8 bars, 2 ranks)\n"
    assert out.read_bytes()[:8] == PNG_SIGNATURE


def test_steps_chart(tmp_path, h200_summary, capsys):
    summary = write_json(tmp_path / "summary.json", h200_summary)
    out = tmp_path / "steps.png"
    assert main(["steps", summary, str(out), "--host", "vllm-sandbox", "--campaign-id", "c1"]) == 0
    assert capsys.readouterr().out == f"wrote {out} (24 steps, 2 ranks, 2 left out)\n"
    assert out.read_bytes()[:8] == PNG_SIGNATURE


def test_history(tmp_path, two_ranks, campaign, capsys):
    summary = write_json(tmp_path / "summary.json", two_ranks)
    campaign.pop("summary")
    meta = write_json(tmp_path / "meta.json", campaign)
    path = tmp_path / "vllm-sandbox" / "history.csv"
    assert main(["history", summary, meta, str(path)]) == 0
    assert main(["history", summary, meta, str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"created {path}: campaign c20250131T120000", f"appended to {path}: campaign c20250131T120000"]
    rows = list(csv.DictReader(path.read_text().splitlines()))
    assert len(rows) == 2 and rows[0]["allreduce_ms_per_step"] == "12.0"


def test_headline(tmp_path, two_ranks, capsys):
    summary = write_json(tmp_path / "summary.json", two_ranks)
    assert main(["headline", summary, "--host", "h", "--report", "r.md"]) == 0
    assert capsys.readouterr().out == ("h: all-reduce 57.1% of decode CUDA time (12.00 of 21.00 ms/step; "
                                       "skew-corrected 3.50 ms) -> r.md\n")


@pytest.mark.parametrize(("content", "message"), [
    (None, "summary {path}: No such file or directory"),
    ("{nope", "summary {path}: invalid JSON"),
    ("[1, 2]", "{path}: a trace summary must be a JSON object, not list"),
    ('{"ranks": [3]}', "{path}: 'ranks' entry 0 must be an object, not int"),
])
def test_bad_summary(tmp_path, capsys, content, message):
    path = tmp_path / "summary.json"
    if content is not None:
        path.write_text(content)
    assert main(["chart", str(path), str(tmp_path / "x.png")]) == 2
    _one_error_line(capsys, message.format(path=path))
    assert not (tmp_path / "x.png").exists()


def test_bad_meta_and_other_header(tmp_path, two_ranks, capsys):
    summary = write_json(tmp_path / "summary.json", two_ranks)
    meta = write_json(tmp_path / "meta.json", {"host": "h"})
    assert main(["history", summary, meta, str(tmp_path / "h.csv")]) == 2
    _one_error_line(capsys, "campaign.id must be a non-empty string")
    assert main(["history", summary, str(tmp_path / "nope.json"), str(tmp_path / "h.csv")]) == 2
    _one_error_line(capsys, "metadata ")
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    meta = write_json(tmp_path / "meta.json", {"id": "c", "host": "h"})
    assert main(["history", summary, meta, str(other)]) == 2
    _one_error_line(capsys, "its header differs")
    assert other.read_text() == "a,b\n1,2\n"


def test_unwritable_output(tmp_path, two_ranks, capsys):
    summary = write_json(tmp_path / "summary.json", two_ranks)
    (tmp_path / "file").write_text("")
    assert main(["chart", summary, str(tmp_path / "file" / "x.png")]) == 2
    _one_error_line(capsys, "file")


def test_usage_errors_exit_2(capsys):
    for argv in ([], ["chart"], ["bogus"], ["headline", "s.json"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    assert "vllm-campaign-report" in capsys.readouterr().err


def test_installed_console_script(tmp_path, two_ranks):
    tool = BIN / "vllm-campaign-report"
    if not tool.exists():
        pytest.skip(f"{tool} not installed (pip install -e .)")
    summary = write_json(tmp_path / "summary.json", two_ranks)
    ok = subprocess.run([str(tool), "headline", summary, "--host", "h"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.startswith("h: all-reduce 57.1%")
    bad = subprocess.run([str(tool), "history", summary, summary, str(tmp_path / "h.csv")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip() == (
        "vllm-campaign-report: error: campaign.id must be a non-empty string, got None")
    assert json.loads((tmp_path / "summary.json").read_text()) == two_ranks
