"""The two PNG charts are written (PNG signature) and say what they drew."""

from vllm_ops.experiment import build_report, load_experiment
from vllm_ops.experiment.chart import write_throughput_chart, write_tpot_chart

PNG = b"\x89PNG\r\n\x1a\n"


def test_charts(fixture_dir, tmp_path):
    report = build_report([load_experiment(fixture_dir)])
    t = write_throughput_chart(report, tmp_path / "throughput.png")
    b = write_tpot_chart(report, tmp_path / "tpot.png")
    assert (tmp_path / "throughput.png").read_bytes()[:8] == PNG and (tmp_path / "tpot.png").read_bytes()[:8] == PNG
    assert t["lines"] == 6 and t["points"] == 12  # baseline + 5 measured variants; the failed one not drawn
    assert b["bars"] == 12 and b["failed"] == 2  # the failed variant marked at both concurrencies


def test_charts_without_any_measurement(make_dir, tmp_path):
    report = build_report([load_experiment(make_dir(tmp_path / "e", base_tpot=None, variants={}))])
    t = write_throughput_chart(report, tmp_path / "t.png")
    b = write_tpot_chart(report, tmp_path / "b.png")
    assert t["lines"] == 0 and b["bars"] == 0 and (tmp_path / "t.png").read_bytes()[:8] == PNG
