"""The watch's live capture (roles/vllm/files/vllm_ops_watch.py, live_capture) against the vLLM stand-in
serving two ranks with the profiler on, under traffic: one complete trace per rank moved into the
incident, none left behind; then the controller's report (vllm_ops.incidents) reads the incident and
gives the capture's verdict. The stand-in's steps are 5 ms of GEMM then 10 ms of all-reduce (its
NCCL model, molecule/resources/standin/README.md), so the verdict is known: communication-bound."""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from pathlib import Path

import pytest

from vllm_ops import incidents

from watch_installed import watch as w

DEFAULTS = w.watch_config.defaults()  # every setting of the watch at its default (watch_config.py)

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "standin"))

from standin_support import Sandbox, Server  # noqa: E402

GEMM_MS, ALLREDUCE_MS = 5.0, 10.0
NAME = "20261205T100000Z"


@pytest.fixture
def armed(tmp_path):
    sandbox = Sandbox(tmp_path)
    server = Server(sandbox, tmp_path / "vllm.log")
    profiler = json.dumps({"profiler": "torch", "torch_profiler_dir": str(tmp_path / "traces")})
    server.start("--profiler-config", profiler, tp=2,
                 env={"VLLM_STANDIN_TPOT_MS": str(GEMM_MS), "VLLM_STANDIN_ALLREDUCE_MS": str(ALLREDUCE_MS)})
    server.wait_ready()
    stop = threading.Event()

    def users():  # the service's own traffic, all through the capture
        while not stop.is_set():
            server.post("/v1/completions", json={"model": str(sandbox.model), "prompt": "a b", "max_tokens": 20})

    sender = threading.Thread(target=users, daemon=True)
    sender.start()
    yield server, tmp_path / "traces"
    stop.set()
    sender.join(timeout=30)
    server.kill_all()


def test_a_live_capture_keeps_each_ranks_trace_with_the_incident_and_the_report_gives_its_verdict(armed, tmp_path):
    server, trace_dir = armed
    host_dir = tmp_path / "artifacts" / "gpu-1" / "incidents"
    path = host_dir / NAME
    path.mkdir(parents=True)
    cfg = {**DEFAULTS, "url": server.url(""), "trace_dir": str(trace_dir), "ranks": 2, "capture_s": 1.0,
           "capture_timeout_s": 60.0, "nvidia_smi": ""}
    done = w.live_capture(cfg, str(path), f"watch-{NAME}")
    assert done["ok"], done
    assert [t["rank"] for t in done["traces"]] == [0, 1]
    kept = [path / "capture" / t["file"] for t in done["traces"]]
    for trace, file in zip(done["traces"], kept, strict=True):
        assert trace["sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
        assert trace["bytes"] == file.stat().st_size
    assert not list(trace_dir.glob(f"watch-{NAME}*")), "the capture's files are moved, none left behind"
    assert len(list((path / "capture").glob("*async_llm*.pt.trace.json*"))) == 1  # the API server's trace too

    incident = {"schema": "vllm-ops/incident/2", "kind": "slowdown", "time": NAME, "verdict": "decode steps +30%",
                "slowdown": None, "capture": done, "action": {"taken": "capture", "ok": True}}
    (path / "incident.json").write_text(json.dumps(incident))
    (read,) = incidents.summary(tmp_path / "artifacts")["hosts"][0]["incidents"]
    step = GEMM_MS + ALLREDUCE_MS
    assert read["capture"]["verdict"].startswith("communication-bound"), read["capture"]
    # the GPU's step is the model's GEMM then its all-reduce, back to back (the host's launches add a little
    # to the step's period)
    assert f"GPU {step:.2f} ms a step; all-reduce transfer {ALLREDUCE_MS:.2f} ms" in read["capture"]["verdict"]
    assert read["action"] == "captured the service as it ran, no restart"
    assert (path / "capture" / "summary.json").is_file()  # written once, read again by the next report
    assert incidents.summary(tmp_path / "artifacts")["hosts"][0]["incidents"][0]["capture"] == read["capture"]


def test_a_capture_the_server_refuses_says_why_and_leaves_no_directory(armed, tmp_path):
    server, trace_dir = armed
    server.post("/start_profile", json={"profile_prefix": "someone-else"})  # a profile already running
    cfg = {**DEFAULTS, "url": server.url(""), "trace_dir": str(trace_dir), "ranks": 2, "capture_s": 0.1,
           "capture_timeout_s": 10.0, "nvidia_smi": ""}
    done = w.live_capture(cfg, str(tmp_path), f"watch-{NAME}")
    assert done["ok"] is False
    assert done["why"] == "/start_profile answered 409: a profile is already running on this server"
    assert not (tmp_path / "capture").exists()
