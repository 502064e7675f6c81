"""Every load decomposed on the sandbox (issue 24): the stand-in logs vLLM 0.32's load lines, the health
wait splits each load into phases, and the job keeps them in job.json beside the disk's floor; check
mode states the downtime from them; the page-cache warm-up is refused when it does not fit; an
experiment of two load formats reports each one's time to ready.

Expected values come from here: the stand-in's configured load (inventory/sandbox: VLLM_STANDIN_LOAD_S
8 s, of which its shards take 85%: molecule/resources/standin/lib/vllm_standin/worker.py), the
checkpoint's file sizes as stat reads them on the host, the job's own totals. No duration is asserted
but as the lower bound a sleep guarantees.
"""

from __future__ import annotations

import json
import re
import statistics

import pytest

from testlib import run_playbook

MODEL = "/srv/models/kimi-k25-int4"
LOAD_S = 8.0  # the sandbox's VLLM_STANDIN_LOAD_S
SHARDS_SHARE = 0.85  # the stand-in's share of a load spent in the shards
# The phases the stand-in logs a line for, in vLLM's order, on a host with GPUs and without --enforce-eager.
PHASES = ["start", "weights", "post_load", "compile", "kv_cache", "cuda_graphs", "engine_init", "api_start"]


def checkpoint_bytes(host) -> int:
    sizes = host.check_output(f"stat -c %s {MODEL}/*.safetensors").split()
    return sum(int(s) for s in sizes)


def only_dir(path):
    (directory,) = [d for d in path.iterdir() if d.is_dir()]
    return directory


def test_a_campaigns_loads_phase_by_phase_and_the_downtime_check_mode_expects(host, campaign):
    play, artifacts = campaign()
    assert play.rc == 0, play.output[-4000:]
    directory = only_dir(artifacts / host.backend.hostname)
    job = json.loads((directory / "job.json").read_text())
    nbytes = checkpoint_bytes(host)

    # The restart path: the profiling variant's load, then the normal service's.
    assert [x["variant"] for x in job["loads"]] == ["profiling", None]
    for load in job["loads"]:
        assert load["ready"] and load["failed_in"] is None
        assert [p["name"] for p in load["phases"]] == PHASES
        assert all(p["status"] == "measured" for p in load["phases"]), load["phases"]
        assert sum(p["seconds"] for p in load["phases"]) == pytest.approx(load["total_s"], abs=0.01)
        assert load["weights"]["bytes"] == nbytes
        assert load["weights"]["seconds"] >= LOAD_S * SHARDS_SHARE  # the stand-in sleeps at least that long
        assert load["weights"]["gbps"] == pytest.approx(nbytes / load["weights"]["seconds"] / 1e9,
                                                                      abs=1e-3)
    # Both loads share one compile cache key (model, TP, max length): the second reads it back.
    assert job["loads"][1]["compile"]["cache"] == "hit"

    # The disk's floor: the sandbox's checkpoint is sparse, so every sampled range is a hole and the floor
    # is not measured (never a rate timed on holes); its size and residency are still there.
    disk = job["disk"]
    assert disk["checkpoint_bytes"] == nbytes and disk["files"] == 64
    assert disk["gbps"] is None and "hole" in disk["why"]

    report = (directory / "report.md").read_text()
    section = report.split("## Model loads", 1)[1].split("\n## ", 1)[0]
    assert "| 1 | profiling | ready in " in section and "| 2 | the normal service | ready in " in section
    assert "disk-bound or not: unknown (the disk's floor was not measured" in section

    # Check mode: the campaign's two loads at the median of the loads just measured.
    median = statistics.median(x["total_s"] for x in job["loads"])
    play, _ = campaign("--check")
    assert play.rc == 0, play.output[-4000:]
    said = play.result("Say what a real run would do")["msg"]
    words = f"{median / 60:.1f} min" if median >= 90 else f"{median:.1f} s"
    assert "Expected downtime: 2 model load(s), about " in said
    assert f" of downtime at {words} a load (the 2 load(s) of campaign {job['id']})" in said


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
    settings = {"vllm_experiment_artifacts_dir": str(artifacts), "vllm_experiment_variants": variants,
                "vllm_experiment_concurrencies": [1], "vllm_experiment_repeats": 1, "vllm_experiment_warmups": 1,
                "vllm_experiment_num_prompts": 4, "vllm_experiment_input_len": 32, "vllm_experiment_output_len": 8}
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
