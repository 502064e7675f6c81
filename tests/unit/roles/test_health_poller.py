"""roles/vllm_job/files/health_poller.py: the downtime record every job keeps."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

POLLER = Path(__file__).resolve().parents[3] / "roles" / "vllm_job" / "files" / "health_poller.py"
sys.path.insert(0, str(POLLER.parent))

from health_poller import Record  # noqa: E402


def test_gaps_run_from_the_first_failed_poll_to_the_next_200():
    r = Record("http://x/health", 1.0, 1000.0)
    # polls at t = 0..9 s: 200, 503, 503, 200, 200, refused, 200, 200, 503, (stop at 9.5)
    outcomes = [True, False, False, True, True, False, True, True, False]
    for t, ok in enumerate(outcomes):
        r.observe(ok, 1000.0 + t, float(t))
    data = r.finish(1009.5, 9.5)
    # computed here: gaps [1, 3), [5, 6), [8, 9.5) (open at the stop)
    assert data["gaps"] == 3 and data["polls"] == 9 and data["failed_polls"] == 4
    assert data["seconds_not_ready"] == pytest.approx(2 + 1 + 1.5)
    assert data["longest_gap_s"] == pytest.approx(2.0)
    assert [g["open"] for g in data["gap_list"]] == [False, False, True]
    assert data["gap_list"][0] == {"from": "1970-01-01T00:16:41Z", "to": "1970-01-01T00:16:43Z", "seconds": 2.0,
                                   "open": False}
    assert data["ready_at_end"] is False


def test_a_service_that_never_failed_records_no_downtime():
    r = Record("http://x/health", 1.0, 0.0)
    for t in range(5):
        r.observe(True, float(t), float(t))
    data = r.finish(5.0, 5.0)
    assert (data["gaps"], data["seconds_not_ready"], data["longest_gap_s"], data["ready_at_end"]) == (0, 0.0, 0.0, True)


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):
        self.send_response(type(self).status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def _wait(predicate, what):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_poller_records_each_outage_until_sigterm(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    out = tmp_path / "health.json"
    proc = subprocess.Popen([sys.executable, str(POLLER), "--url", f"http://127.0.0.1:{server.server_port}/health",
                             "--interval-s", "0.05", "--out", str(out)])

    def record():
        try:
            return json.loads(out.read_text())
        except (OSError, ValueError):
            return {}

    try:
        _wait(lambda: record().get("polls", 0) >= 1, "a first poll")
        for outage in (1, 2):  # two outages, each seen by the poller before the service comes back
            failed = record()["failed_polls"]
            _Health.status = 503
            _wait(lambda failed=failed: record()["failed_polls"] > failed, "the outage to be seen")
            _Health.status = 200
            _wait(lambda outage=outage: record()["gaps"] == outage, "the outage to end")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        server.shutdown()
    data = record()
    assert data["gaps"] == 2 and data["ready_at_end"] is True and data["finished_at"]
    assert data["seconds_not_ready"] > 0 and not any(g["open"] for g in data["gap_list"])


def test_bad_input_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, str(POLLER), "--url", "http://127.0.0.1:1/health", "--interval-s", "0",
                           "--out", str(tmp_path / "x.json")], capture_output=True, text=True)
    assert proc.returncode == 2 and "must be positive" in proc.stderr
