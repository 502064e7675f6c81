"""The stand-in's all-reduce model (nccl.py): NCCL settings scale the served decode step, the
traces the workers write and the floor benchmark's double alike, so a tune on the sandbox can see a
setting pay off the same way in the pre-screen and in the served latency.

Expected figures are computed here from the knobs, never read back from the code under test.
"""

import gzip
import importlib
import importlib.util
import json
import subprocess
import sys

import pytest

from standin_support import ROOT, STANDIN_DIR, STANDIN_LIB, WAIT_S, wait_for

FACTORS = "NCCL_PROTO=LL128:0.5 NCCL_MAX_NCHANNELS=8:1.3,NCCL_PROTO=Simple:0.9"
PYTHON = STANDIN_DIR / "bin" / "python"
REAL_SCRIPT = ROOT / "roles" / "allreduce_bench" / "files" / "allreduce_bench.py"
KIMI_CONFIG = ROOT / "tests" / "data" / "models" / "kimi-k2.5-text-config.json"


def standin(module):
    if str(STANDIN_LIB) not in sys.path:
        sys.path.insert(0, str(STANDIN_LIB))
    return importlib.import_module(f"vllm_standin.{module}")


@pytest.mark.parametrize(("environment", "expected"), [
    ({}, 1.0), ({"NCCL_PROTO": "LL"}, 1.0), ({"NCCL_PROTO": "LL128"}, 0.5),
    ({"NCCL_PROTO": "LL128", "NCCL_MAX_NCHANNELS": "8"}, 0.5 * 1.3), ({"NCCL_PROTO": "Simple"}, 0.9),
    ({"NCCL_MAX_NCHANNELS": "16"}, 1.0),
])
def test_a_setting_s_factor_is_the_product_of_the_entries_it_matches(environment, expected):
    assert standin("nccl").factor(environment, FACTORS) == pytest.approx(expected)


def test_a_bad_factor_entry_is_named():
    with pytest.raises(ValueError, match="'NCCL_PROTO=LL128' is not VAR=VALUE:FACTOR"):
        standin("nccl").factors("NCCL_PROTO=LL128")


def test_the_decode_step_adds_the_all_reduce_as_the_settings_scale_it(monkeypatch):
    monkeypatch.setenv("VLLM_STANDIN_TPOT_MS", "5")
    monkeypatch.setenv("VLLM_STANDIN_ALLREDUCE_MS", "10")
    monkeypatch.setenv("VLLM_STANDIN_NCCL_FACTORS", FACTORS)
    generation = standin("generation")
    app = {"spec": (0, 0, 1.0)}
    monkeypatch.setenv("NCCL_PROTO", "LL")
    assert generation.Generation(app, {}, ["p"], [1], 8).step_s == pytest.approx((5 + 10) / 1000)
    monkeypatch.setenv("NCCL_PROTO", "LL128")
    assert generation.Generation(app, {}, ["p"], [1], 8).step_s == pytest.approx((5 + 10 * 0.5) / 1000)
    monkeypatch.delenv("VLLM_STANDIN_ALLREDUCE_MS")  # the knob off: the stand-in as before
    assert generation.Generation(app, {}, ["p"], [1], 8).step_s == pytest.approx(5 / 1000)


def test_the_model_s_trace_is_communication_bound_with_the_all_reduce_it_models(tmp_path):
    from vllm_ops.traces import summarize

    traces = standin("traces")
    for rank in (0, 1):
        trace = traces.model_trace(rank, 2, 1_700_000_000_000_000_000, f"VLLM::Worker_TP{rank}", 5.0, 10.0)
        with gzip.open(tmp_path / f"dp0_pp0_tp{rank}_dcp0_ep0_rank{rank}.1.pt.trace.json.gz", "wt") as fh:
            json.dump({**trace, "vllm_version": "0.32.0"}, fh)
    v = summarize([str(tmp_path)])["verdict"]
    assert v["kind"] == "communication-bound"
    assert v["evidence"]["allreduce_transfer_ms"] == pytest.approx(10.0, abs=0.01)
    assert v["evidence"]["gpu_ms_per_step"] == pytest.approx(15.0, abs=0.01)
    assert [t["test"] for t in v["next_tests"]] == ["nccl-sweep", "speculative"]


def test_a_worker_writes_the_model_s_trace_under_its_settings(server, sandbox):
    env = {"VLLM_STANDIN_ALLREDUCE_MS": "10", "VLLM_STANDIN_TPOT_MS": "5", "VLLM_STANDIN_NCCL_FACTORS": FACTORS,
           "NCCL_PROTO": "LL128"}
    server.start("--profiler-config", json.dumps({"profiler": "torch", "torch_profiler_dir": str(sandbox.traces)}),
                 tp=2, env=env)
    server.wait_ready()
    assert server.post("/start_profile").status_code == 200
    assert server.post("/stop_profile").status_code == 200
    path = wait_for(lambda: sorted(sandbox.traces.glob("*rank0.*.pt.trace.json.gz")), what="rank 0's trace")[0]
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    allreduce = [e["dur"] for e in events if e.get("cat") == "kernel" and "AllReduce" in e["name"]]
    steps = [e for e in events if e.get("cat") == "gpu_user_annotation"]
    # 12 steps of 4 all-reduce calls; 10 ms x 0.5 (NCCL_PROTO=LL128) a step
    assert len(steps) == 12 and len(allreduce) == 48
    assert sum(allreduce) / 12 == pytest.approx(10 * 0.5 * 1000)


def _double(*args, env=None, script=REAL_SCRIPT):
    """The stand-in's Python asked to run ``script``, as the role runs the file it copied to the host."""
    return subprocess.run([sys.executable, str(PYTHON), str(script), *args],
                          capture_output=True, text=True, timeout=WAIT_S,
                          env={"PATH": "/usr/bin:/bin", "VLLM_STANDIN_CONFIG": "/nonexistent", **(env or {})})


def test_the_floor_double_follows_the_same_factors(tmp_path):
    out = tmp_path / "unit.json"
    knobs = {"VLLM_STANDIN_NCCL_FACTORS": FACTORS, "VLLM_STANDIN_ALLREDUCE_CALL_US": "20",
             "VLLM_STANDIN_ALLREDUCE_GBPS": "10"}
    for proto, factor in (("LL", 1.0), ("LL128", 0.5)):
        done = _double("--world-size", "2", "--backend", "gloo", "--batch-sizes", "1,8", "--ladder", "1024",
                       "--reps", "5", "--model-config", str(KIMI_CONFIG), "--label", proto, "--out", str(out),
                       env={**knobs, "NCCL_PROTO": proto})
        assert done.returncode == 0, done.stderr
        result = json.loads(out.read_text())
        assert result["label"] == proto and result["environment"] == {"NCCL_PROTO": proto}
        rows = {r["bytes"]: r for r in result["sizes"]}
        assert sorted(rows) == [1024, 14336, 114688]  # Kimi-K2.5: 7168 x bf16 x batch 1 and 8
        for nbytes, row in rows.items():
            t = (20 + nbytes / 10_000) * factor
            assert row["median_us"] == pytest.approx(t, abs=0.001)
            assert row["min_us"] == pytest.approx(0.98 * t, abs=0.001)
            # five loops at 0.98, 0.99, 1.00, 1.01, 1.02 of t: numpy's p90 lies 0.6 of the way to the top
            assert row["p90_us"] == pytest.approx(1.016 * t, abs=0.001)
        assert rows[14336]["batch_size"] == 1 and rows[114688]["batch_size"] == 8


def test_the_floor_double_is_the_real_script_it_is_given(tmp_path):
    """No copy of the script: what the double accepts and writes is the file the role copied. A copy of the
    real script whose default loop count is changed writes that count, and keeps the real JSON's keys."""
    script = tmp_path / "allreduce_bench.py"
    real = REAL_SCRIPT.read_text()
    assert '"--reps", type=int, default=20,' in real
    script.write_text(real.replace('"--reps", type=int, default=20,', '"--reps", type=int, default=3,'))
    out = tmp_path / "out.json"
    done = _double("--world-size", "2", "--ladder", "1024", "--out", str(out), script=script)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["reps"] == 3 and result["backend"] == "gloo" and result["device_copy"] is None
    assert result["timing"].startswith("the vLLM stand-in's all-reduce model") and result["timing"].endswith("3 loops")
    assert result["torch_version"].startswith("0.0.0+vllm-standin") and result["gpus"] == 0
    refused = _double("--world-size", "2", "--backend", "nccl", script=script)
    assert refused.returncode == 2 and "world size 2 needs 2 GPUs, 0 visible" in refused.stderr


def test_the_standin_python_runs_only_the_benchmark_and_the_torch_check():
    check = subprocess.run([sys.executable, str(PYTHON), "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, timeout=WAIT_S)
    assert check.returncode == 0 and check.stdout.startswith("0.0.0+vllm-standin")
    other = subprocess.run([sys.executable, str(PYTHON), "/tmp/other.py"], capture_output=True, text=True,
                           timeout=WAIT_S)
    assert other.returncode == 2 and "runs only allreduce_bench.py" in other.stderr
    bad = _double("--world-size", "0")
    assert bad.returncode == 2 and "world size must be at least 1" in bad.stderr
