"""Every load decomposed on the sandbox (issue 24): the page-cache warm-up is refused when it does not
fit; an experiment of two load formats reports each one's time to ready. The campaign's loads, phase by
phase in job.json beside the disk's floor, and check mode's downtime from them, are checked on the
end-to-end campaign's own run (test_campaign.py: assert_campaign_loads), which a second campaign would
only repeat.

Expected values come from here: the stand-in's configured load (this scenario's host_vars: VLLM_STANDIN_LOAD_S
3 s, of which its shards take 85%: molecule/resources/standin/lib/vllm_standin/worker.py), the
checkpoint's file sizes as stat reads them on the host, the job's own totals. No duration is asserted
but as the lower bound a sleep guarantees.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from testlib import SHARDS_SHARE, checkpoint_bytes, run_playbook, standin_load_s

LOAD_S = standin_load_s(Path(__file__).parent)


def only_dir(path):
    (directory,) = [d for d in path.iterdir() if d.is_dir()]
    return directory


def test_the_warm_up_is_refused_with_both_figures_when_it_does_not_fit(host):
    nbytes = checkpoint_bytes(host)
    # A reserve larger than any host's memory: whatever MemAvailable is, the checkpoint cannot fit.
    play = run_playbook("playbooks/warm_page_cache.yml", "-e", json.dumps({"vllm_disk_warm_reserve_mib": 1 << 30}))
    assert play.rc != 0
    message = play.result("Warm the page cache with the checkpoint")["msg"]
    assert f"({nbytes} bytes in 64 file(s))" in message
    available = re.search(r"MemAvailable (\d+) bytes", message)
    assert available and int(available.group(1)) > 0
    assert "less the reserve 1048576.0 GiB" in message


def test_an_experiment_of_two_load_formats_reports_each_ones_time_to_ready(host, tmp_path):
    artifacts = tmp_path / "artifacts"
    formats = {"safetensors": 1.0, "fastsafetensors": 0.5}
    variants = [{"name": f"format={fmt}", "extra_args": ["--load-format", fmt],
                 "environment": {"VLLM_STANDIN_LOAD_FORMAT_FACTORS": "fastsafetensors:0.5"}} for fmt in formats]
    settings = {"vllm_job_artifacts_dir": str(artifacts), "vllm_experiment_variants": variants,
                "vllm_experiment_bench_load": {"concurrencies": [1], "repeats": 1, "warmups": 1, "num_prompts": 4,
                                               "input_len": 32, "output_len": 8}}
    play = run_playbook("experiment.yml", "-e", json.dumps(settings))
    assert play.rc == 0, play.output[-5000:]
    directory = only_dir(artifacts / host.backend.hostname)
    job = json.loads((directory / "job.json").read_text())
    by_variant = {x["variant"]: x for x in job["loads"]}
    assert set(by_variant) == {"format=safetensors", "format=fastsafetensors", None}
    for fmt, factor in formats.items():
        load = by_variant[f"format={fmt}"]
        assert load["ready"] and load["load_format"] == fmt
        assert load["weights"]["seconds"] >= LOAD_S * SHARDS_SHARE * factor
    report = json.loads((directory / "report.json").read_text())
    ready = {v["name"]: v["load"]["total_s"] for v in report["variants"]}
    assert ready == {name: x["total_s"] for name, x in by_variant.items() if name}
    text = (directory / "report.md").read_text()
    section = text.split("## Model loads", 1)[1].split("\n## ", 1)[0]
    for name, total in ready.items():
        assert f"| {name} | {total:.1f} s |" in section
