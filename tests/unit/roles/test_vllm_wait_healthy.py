"""The vllm role's health-wait module: its verdicts on unit state, journal and HTTP."""

from __future__ import annotations

import http.server
import json
import socket
import threading

import pytest
from ansible_collections.vllm_ops.serving.plugins.modules import vllm_wait_healthy as health

ACTIVE = {"ActiveState": "active", "SubState": "running", "InvocationID": "abc", "NRestarts": "0"}


def test_parse_properties():
    text = "ActiveState=active\nSubState=running\nInvocationID=abc\nExecMainStatus=0\n"
    assert health.parse_properties(text) == {
        "ActiveState": "active", "SubState": "running", "InvocationID": "abc", "ExecMainStatus": "0"}


def test_an_active_unit_of_the_same_invocation_may_still_be_loading():
    assert health.unit_problem(ACTIVE, "abc") is None


@pytest.mark.parametrize(
    ("state", "words"),
    [
        (dict(ACTIVE, InvocationID="def", NRestarts="1"), "was restarted during the wait"),
        (dict(ACTIVE, ActiveState="failed", Result="exit-code", ExecMainStatus="1"),
         "failed (Result=exit-code, exit status 1)"),
        (dict(ACTIVE, ActiveState="activating", SubState="auto-restart", ExecMainStatus="0"),
         "waiting to be restarted"),
        (dict(ACTIVE, ActiveState="inactive", SubState="dead"), "is inactive"),
    ],
)
def test_units_that_will_not_come_up_stop_the_wait(state, words):
    assert words in health.unit_problem(state, "abc")


def test_shard_progress_takes_the_last_line():
    lines = [
        "(Worker_TP0 pid=7) Loading safetensors checkpoint shards:   2% Completed | 1/64 [00:38<40:12, 38.3s/it]",
        "INFO 11-30 02:00:00 [core.py:1] something else",
        "(Worker_TP0 pid=7) Loading safetensors checkpoint shards:  38% Completed | 24/64 [15:10<25:20, 38.0s/it]",
    ]
    assert health.shard_progress(lines) == (24, 64, "24/64 shards loaded (37%)")


def test_shard_progress_reads_carriage_return_updates():
    line = ("Loading safetensors checkpoint shards:  50% Completed | 32/64 [..]\r"
            "Loading safetensors checkpoint shards:  52% Completed | 33/64 [..]")
    assert health.shard_progress([line])[:2] == (33, 64)


def test_shard_progress_after_the_weights():
    lines = [
        "Loading safetensors checkpoint shards: 100% Completed | 64/64 [40:00<00:00, 37.5s/it]",
        "INFO [default_loader.py:1] Loading weights took 2400.1 seconds",
        "INFO [gpu_model_runner.py:1] Model loading took 71.3 GiB memory and 2410.2 seconds",
    ]
    assert health.shard_progress(lines) == (
        64, 64, "64/64 shards loaded; weights loaded; initialising the engine (KV cache, warm-up)")


def test_no_progress_yet():
    assert health.shard_progress(["INFO starting"]) == (None, None, "no shard progress logged yet")


@pytest.fixture
def server():
    """A loopback HTTP server whose /health status the test sets."""
    state = {"status": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # http.server's name
            self.send_response(state["status"])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{httpd.server_address[1]}/health"
    httpd.shutdown()


def test_probe_reports_the_status(server):
    state, url = server
    assert health.probe(url, 2) == 200
    state["status"] = 503
    assert health.probe(url, 2) == 503


def test_probe_reports_a_refused_connection_as_minus_one():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert health.probe(f"http://127.0.0.1:{port}/health", 2) == -1


def test_journal_entries_decode_journald_json():
    lines = [
        json.dumps({"MESSAGE": "Starting to load model /m...", "__MONOTONIC_TIMESTAMP": "5000000",
                    "__REALTIME_TIMESTAMP": "1764583200000000"}),
        # journald keeps a message with a carriage return (tqdm's) as bytes
        json.dumps({"MESSAGE": list(b"\rLoading safetensors checkpoint shards: 100% Completed | 4/4 [00:01<00:00]"),
                    "__MONOTONIC_TIMESTAMP": "6500000", "__REALTIME_TIMESTAMP": "1764583201500000"}),
        "not json",
    ]
    entries = health.journal_entries("\n".join(lines))
    assert entries[0] == (5.0, 1764583200.0, "Starting to load model /m...")
    assert entries[1][0] == 6.5 and entries[1][2].startswith("\rLoading safetensors checkpoint shards: 100%")
    assert len(entries) == 2


def test_the_load_record_is_timed_from_the_units_start(tmp_path):
    for i in range(2):
        (tmp_path / f"model-{i}.safetensors").write_bytes(b"\0" * 1000)
    entries = [(5.0, 1764583200.0, "(Worker pid=3) INFO [cpu_model_runner.py:68] Starting to load model /m..."),
               (8.0, 1764583203.0, "(Worker pid=3) INFO [default_loader.py:501] Loading weights took 2.50 seconds"),
               (9.5, 1764583204.5, "INFO:     Application startup complete.")]
    props = {"ExecMainStartTimestampMonotonic": "2000000"}
    record = health.load_record(entries, props, str(tmp_path), "u.service", "inv", healthy_at=10.0)
    assert record["total_s"] == 9.5 - 2.0 and record["healthy_s"] == 10.0 - 2.0
    assert record["weights"]["bytes"] == 2000 and record["weights"]["gbps"] == round(2000 / 2.5 / 1e9, 3)
    assert record["started_at"] == "2025-12-01T09:59:57Z"  # the first line's real time less 3 s
    assert (record["unit"], record["invocation_id"]) == ("u.service", "inv")
