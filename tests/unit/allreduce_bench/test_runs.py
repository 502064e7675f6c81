"""vllm_ops.allreduce: the command lines the allreduce_bench role runs on a host, and its failures."""

from __future__ import annotations

import shlex

from vllm_ops.allreduce import bench_runs, failures

SETTINGS = {
    "script": "/usr/local/libexec/vllm-ops/allreduce_bench.py", "python": "/opt/vllm/venv/bin/python",
    "user": "vllm", "group": "vllm", "gpu_group": "video", "env_file": "/etc/vllm/unit.env",
    "home_dir": "/var/lib/vllm", "host_dir": "/run/vllm-ops/allreduce-bench", "world_size": "8", "backend": "auto",
    "model_config": "/models/k/config.json", "batch_sizes": [1, 8], "ladder": [1024, 4096], "warmup": 20,
    "iters": 50, "reps": 20, "timeout_s": 600, "job_id": "20261201T000000Z",
    "variants": [{"name": "LL128", "environment": {"NCCL_PROTO": "LL128", "NCCL_MAX_NCHANNELS": 8}}],
}


def _props(argv):
    return [argv[i + 1] for i, a in enumerate(argv) if a == "-p"]


def test_the_unit_environment_runs_first_then_each_variant():
    runs = bench_runs(SETTINGS)
    assert [r["name"] for r in runs] == ["unit", "LL128"]
    assert [r["out"] for r in runs] == ["/run/vllm-ops/allreduce-bench/allreduce-unit.json",
                                        "/run/vllm-ops/allreduce-bench/allreduce-LL128.json"]
    assert runs[0]["unit"] != runs[1]["unit"]


def test_a_run_is_a_transient_unit_with_the_services_user_and_environment_file():
    argv = bench_runs(SETTINGS)[0]["argv"]
    assert argv[:5] == ["systemd-run", "--quiet", "--wait", "--pipe", "--collect"]
    props = _props(argv)
    for want in ("User=vllm", "Group=vllm", "SupplementaryGroups=video", "EnvironmentFile=/etc/vllm/unit.env",
                 "WorkingDirectory=/var/lib/vllm", "LimitMEMLOCK=infinity", "KillMode=control-group"):
        assert want in props
    # systemd's hard stop comes after the script's own budget, never before it
    runtime = int(next(p for p in props if p.startswith("RuntimeMaxSec=")).split("=")[1])
    assert runtime > 600
    command = argv[argv.index("--") + 1:]
    assert command[:2] == ["/opt/vllm/venv/bin/python", "/usr/local/libexec/vllm-ops/allreduce_bench.py"]
    text = shlex.join(command)
    for want in ("--world-size 8", "--backend auto", "--batch-sizes 1,8", "--ladder 1024,4096", "--warmup 20",
                 "--iters 50", "--reps 20", "--timeout-s 600", "--label unit",
                 "--out /run/vllm-ops/allreduce-bench/allreduce-unit.json", "--model-config /models/k/config.json"):
        assert want in text


def test_a_variant_lays_its_environment_over_the_files_with_env():
    argv = bench_runs(SETTINGS)[1]["argv"]
    command = argv[argv.index("--") + 1:]
    # EnvironmentFile= wins over Environment=, so the override must come after systemd, from env(1)
    assert command[:3] == ["/usr/bin/env", "NCCL_MAX_NCHANNELS=8", "NCCL_PROTO=LL128"]
    assert "EnvironmentFile=/etc/vllm/unit.env" in _props(argv)
    assert not any(p.startswith("Environment=NCCL") for p in _props(argv))


def test_without_a_model_config_only_the_ladder_is_asked_for():
    argv = bench_runs(dict(SETTINGS, model_config="", variants=[], kill_mode="process"))[0]["argv"]
    assert "--model-config" not in argv and "KillMode=process" in _props(argv)


def test_failures_name_the_run_and_the_scripts_last_line():
    results = [
        {"item": {"name": "unit"}, "rc": 0, "stderr_lines": []},
        {"item": {"name": "LL128"}, "rc": 3,
         "stderr_lines": ["Traceback ...", "allreduce_bench: measurement failed: rank 1 died (exit code 1)", ""]},
        {"item": {"name": "Simple"}, "rc": 1, "stderr_lines": [], "msg": "non-zero return code"},
    ]
    assert failures(results) == ["LL128=allreduce_bench: measurement failed: rank 1 died (exit code 1)",
                                 "Simple=non-zero return code"]
