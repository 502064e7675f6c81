"""experiment_report.md.j2 (shipped in vllm_ops/templates/) renders with plain Jinja2 from report.json."""

import json

import jinja2
import pytest

from vllm_ops.experiment import build_report, load_experiment
from vllm_ops.experiment.render import render_markdown
from vllm_ops.render import template_path

TEMPLATE = template_path("experiment_report.md.j2")  # the one shipped in the package


@pytest.fixture
def report(fixture_dir):
    # through JSON, as the playbook reads report.json
    return json.loads(json.dumps(build_report([load_experiment(fixture_dir)])))


def test_renders_with_plain_jinja2(report, fx):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True)
    text = env.from_string(TEMPLATE.read_text()).render(report=report)
    assert report["headline"] in text
    assert "```\n" + "\n".join(fx.JOURNAL) + "\n```" in text
    assert "| 1 | NCCL_PROTO=LL128 | better | `NCCL_PROTO=LL128` | -10.0% (+/-2.0%) better | " \
           "+10.0% (+/-2.0%) better |" in text
    assert "![Output throughput against concurrency](throughput.png)" in text
    assert "![Median TPOT per variant](tpot.png)" in text
    assert "| max-num-seqs=64 | 1 | 300 | 0.500 | 2.50 |" in text  # speculative decoding
    assert "no drift outside the noise" in text
    assert "7 model loads (about 210 minutes of loading" in text
    assert report["noise_rule"] in text


def test_render_markdown_is_the_same_text(report):
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, trim_blocks=True, keep_trailing_newline=True)
    assert render_markdown(report, TEMPLATE) == env.from_string(TEMPLATE.read_text()).render(report=report)
    assert render_markdown(report) == render_markdown(report, TEMPLATE)  # the shipped one by default


def test_renders_a_fleet_and_an_unmeasured_baseline(make_dir, tmp_path):
    a = load_experiment(make_dir(tmp_path / "h1", host="h1", base_tpot=None))
    b = load_experiment(make_dir(tmp_path / "h2", host="h2", variants={}, failed_variant=False))
    report = json.loads(json.dumps(build_report([a, b])))
    text = render_markdown(report, TEMPLATE)
    assert report["headline"] in text and "NCCL_PROTO=LL128 @ h1" in text and "baseline @ h2" in text
    assert "no baseline run completed a request" in text


def test_a_profiled_variant_links_its_campaign_report(make_dir, tmp_path):
    directory = make_dir(tmp_path / "exp")
    path = tmp_path / "exp" / "experiment.json"
    data = json.loads(path.read_text())
    data["variants"][0].update(profile=True, profile_report="profile/01/report.md",
                               profile_headline="h1: host-bound on rank 0: decode step 16.46 ms")
    path.write_text(json.dumps(data))
    report = build_report([load_experiment(directory)])
    assert report["variants"][0]["profile_report"] == "profile/01/report.md"
    text = render_markdown(report, TEMPLATE)
    assert ("Profiled (the campaign's capture of this variant as it ran): h1: host-bound on rank 0: decode step "
            "16.46 ms; [its report](profile/01/report.md).") in text


def test_the_report_says_what_downtime_the_experiment_cost(make_dir, tmp_path):
    directory = make_dir(tmp_path / "exp")
    path = tmp_path / "exp" / "experiment.json"
    data = json.loads(path.read_text())
    data["downtime"] = {"seconds_not_ready": 95.0, "gaps": 4, "longest_gap_s": 31.0}
    path.write_text(json.dumps(data))
    report = build_report([load_experiment(directory)])
    assert report["experiments"][0]["downtime"] == "downtime 95.0 s in 4 gaps (longest 31.0 s)"
    assert "; downtime 95.0 s in 4 gaps (longest 31.0 s); noise floor 1.0%" in render_markdown(report, TEMPLATE)
    data["downtime"] = None
    path.write_text(json.dumps(data))
    assert build_report([load_experiment(directory)])["experiments"][0]["downtime"] is None
