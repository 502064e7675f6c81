"""Poll the service's /health until stopped (SIGTERM) and record when it did not answer 200.

Every job (the vllm_job role) starts it before anything stops and stops it once the normal
service is back, so its record is the downtime the job cost: the number of polls, how many were
not 200 (refused, timed out, 503), the time not ready, the longest gap, and each gap. A gap runs from its first
failed poll to the next poll that answered 200 (so the resolution is one interval); a gap still
open when the poller stops ends there and is marked open. The record is rewritten, atomically,
after every poll (a few hundred bytes on /run) and at the end.

Standard library only: it runs on the managed host. Exit status 0 when stopped, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request

MAX_GAPS = 100  # kept in the record; the totals count every gap


def probe(url: str, timeout_s: float) -> bool:
    """Whether ``url`` answered 200 within ``timeout_s``."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return answer.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class Record:
    """What the polls saw. ``observe`` takes each poll's outcome with its wall-clock and
    monotonic times; ``finish`` closes an open gap."""

    def __init__(self, url: str, interval_s: float, now: float):
        self.data = {"url": url, "interval_s": interval_s, "started_at": _utc(now), "finished_at": None,
                     "polls": 0, "failed_polls": 0, "seconds_not_ready": 0.0, "longest_gap_s": 0.0, "gaps": 0,
                     "gap_list": [], "ready_at_end": None}
        self._open: tuple[float, float] | None = None  # (wall, monotonic) of the first failed poll

    def observe(self, ok: bool, wall: float, mono: float) -> None:
        """Count one poll."""
        d = self.data
        d["polls"] += 1
        d["ready_at_end"] = ok
        if not ok:
            d["failed_polls"] += 1
            if self._open is None:
                self._open = (wall, mono)
        elif self._open is not None:
            self._close(wall, mono, still_open=False)

    def finish(self, wall: float, mono: float) -> dict:
        if self._open is not None:
            self._close(wall, mono, still_open=True)
        self.data["finished_at"] = _utc(wall)
        return self.data

    def _close(self, wall: float, mono: float, still_open: bool) -> None:
        d = self.data
        start_wall, start_mono = self._open
        seconds = round(mono - start_mono, 3)
        d["gaps"] += 1
        d["seconds_not_ready"] = round(d["seconds_not_ready"] + seconds, 3)
        d["longest_gap_s"] = max(d["longest_gap_s"], seconds)
        if len(d["gap_list"]) < MAX_GAPS:
            d["gap_list"].append({"from": _utc(start_wall), "to": _utc(wall), "seconds": seconds, "open": still_open})
        self._open = None


def write_atomically(path: str, data: dict) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".health-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def run(url: str, interval_s: float, timeout_s: float, out: str) -> dict:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    signal.signal(signal.SIGINT, lambda *_: stop.append(True))
    record = Record(url, interval_s, time.time())
    write_atomically(out, record.data)
    while not stop:
        started = time.monotonic()
        record.observe(probe(url, timeout_s), time.time(), time.monotonic())
        write_atomically(out, record.data)
        remaining = interval_s - (time.monotonic() - started)
        while remaining > 0 and not stop:
            time.sleep(min(remaining, 0.1))
            remaining = interval_s - (time.monotonic() - started)
    data = record.finish(time.time(), time.monotonic())
    write_atomically(out, data)
    return data


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="health_poller", description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--url", required=True, help="the URL to poll, e.g. http://127.0.0.1:8000/health")
    p.add_argument("--interval-s", type=float, default=1.0, help="seconds between polls (1)")
    p.add_argument("--timeout-s", type=float, default=2.0, help="seconds one poll may take (2)")
    p.add_argument("--out", required=True, help="the JSON record, rewritten as it changes")
    args = p.parse_args(argv)
    if args.interval_s <= 0 or args.timeout_s <= 0:
        print("health_poller: error: --interval-s and --timeout-s must be positive", file=sys.stderr)
        return 2
    run(args.url, args.interval_s, args.timeout_s, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
