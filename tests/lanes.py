"""Run test commands in lanes at once: each command's output in its own log, its cost printed.

    python tests/lanes.py --lanes 2 --logs DIR NAME=WEIGHT=COMMAND [...]

A Molecule scenario alone leaves the CPUs idle while it waits (the stand-in's loads, systemd's stops,
the health waits); on this project's 2-CPU machines two lanes keep both busy the whole run (sampled:
99-100%), so they finish well under the time of one, and more would not. Commands are given to lanes longest
first (WEIGHT: its measured seconds, docs/testing.md), each next one to the lane that frees first.
The suites named by ``--busy`` keep a CPU busy the whole time they run (pytest in one process, the
real vLLM's CPU loads): two of them side by side took twice as long each, measured, so a lane that
frees takes the longest suite that will not put two busy ones together, and a busy one beside another
only when nothing else is left.
The suites named by ``--idle`` leave the CPUs idle most of their run (a Molecule scenario whose tests
sleep through a watch's stall time, a Prometheus rule's ``for``, an idle service's two minutes): they
run one after another in a lane of their own beside the others, from the start, where in a shared lane
they would hold it for minutes of idle CPUs.
Every command's output goes to DIR/NAME.log; a line is printed when one starts, when one ends
(``cost: NAME N s``), and every minute while any runs. A failed command does not stop the others, so
that one run shows every failure (``--fail-fast``: after a failure no new command starts); the failed
ones' logs are printed (their last lines), and the exit status is 1.

At the end a table sets each command's measured seconds beside its stated cost (WEIGHT) and its pytest
counts (from the last summary line pytest wrote in its log, Molecule's verify included), names every
command that took more than :data:`OVER` times its cost (a suite that grew shows in the run that made
it grow; its cost in the Makefile is then measured again, docs/testing.md), and adds the counts up in
pytest's own words: ``tests: N passed, M failed``. The very last lines name each failed test with
pytest's one-line reason (``failed: SUITE: path::test - AssertionError: ...``), since CI shows only
the end of what a run printed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

TAIL_LINES = 400
PROGRESS_S = 60
# A command that takes more than this many times its stated cost is named at the end.
OVER = 1.25
# pytest's summary line ("= 3 passed, 1 skipped in 2.01s =", or quoted in Molecule's verify output).
_OUTCOMES = r"passed|failed|skipped|errors?|deselected|xfailed|xpassed"
SUMMARY = re.compile(rf"\b(\d+ (?:{_OUTCOMES})(?:, \d+ (?:{_OUTCOMES}|warnings?))*) in [\d.]+s\b")
COUNT = re.compile(rf"(\d+) ({_OUTCOMES}|warnings?)")
# pytest's short summary of a failed test ("FAILED path::test - reason"), plain or quoted by Molecule.
FAILED_TEST = re.compile(r'^\W*(?:FAILED|ERROR) (\S+::\S+.*?)"?,?$')
ANSI = re.compile(r"\x1b\[[0-9;]*m|\\u001b\[[0-9;]*m")


@dataclass
class Job:
    name: str
    weight: float
    command: str
    log: Path = field(default=Path())
    rc: int | None = None
    started: float | None = None
    seconds: float | None = None
    busy: bool = False
    idle: bool = False


def parse_job(text: str) -> Job:
    """``NAME=WEIGHT=COMMAND``."""
    try:
        name, weight, command = text.split("=", 2)
        return Job(name, float(weight), command)
    except ValueError:
        raise SystemExit(f"lanes: {text!r} is not NAME=WEIGHT=COMMAND (WEIGHT in seconds)") from None


def order(jobs: list[Job]) -> list[Job]:
    """Longest first, so that the long ones do not start last; ties in the order given."""
    return sorted(jobs, key=lambda j: -j.weight)


def pick(queue: list[Job], running: list[Job]) -> int:
    """The index in ``queue`` (longest first) of the job a freed lane takes: the first that is not busy
    beside a busy one running, or the first of all when every one left would be."""
    beside_busy = any(j.busy for j in running)
    return next((i for i, j in enumerate(queue) if not (j.busy and beside_busy)), 0)


def plan(jobs: list[Job], lanes: int) -> list[list[str]]:
    """The lanes the jobs would run in, by their weights as if each took exactly its weight: each next
    job to the lane that frees first, chosen by :func:`pick` (what :func:`run` does with measured
    time), and the idle ones in a lane of their own after those: for the printed plan and its test."""
    idle = [j.name for j in order(jobs) if j.idle]
    queue, out = [j for j in order(jobs) if not j.idle], [[] for _ in range(lanes)]
    free_at: list[float] = [0.0] * lanes
    current: list[Job | None] = [None] * lanes
    while queue:
        i = free_at.index(min(free_at))
        now = free_at[i]
        running = [j for k, j in enumerate(current) if j is not None and k != i and free_at[k] > now]
        job = queue.pop(pick(queue, running))
        current[i], free_at[i] = job, now + job.weight
        out[i].append(job.name)
    return out + ([idle] if idle else [])


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    text = path.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def pytest_counts(text: str) -> dict[str, int]:
    """The counts of the last pytest summary line in ``text`` (``{"passed": 3, "skipped": 1}``); {} if none."""
    found = SUMMARY.findall(text)
    if not found:
        return {}
    counts: dict[str, int] = {}
    for n, what in COUNT.findall(found[-1]):
        key = {"error": "errors", "warning": "warnings"}.get(what, what)
        counts[key] = counts.get(key, 0) + int(n)
    return counts


def failed_tests(text: str) -> list[str]:
    """Each ``path::test - reason`` of pytest's short summary in ``text``, once each, in order."""
    found: list[str] = []
    for line in ANSI.sub("", text).splitlines():
        match = FAILED_TEST.match(line.strip())
        if match and match.group(1) not in found:
            found.append(match.group(1))
    return found


def cost_table(jobs: list[Job]) -> str:
    """Each command's measured seconds against its stated cost, the slowest first, then the sums, and a
    line naming those over :data:`OVER` times their cost (``lanes: over its stated cost: ...``)."""
    ran = sorted((j for j in jobs if j.seconds is not None), key=lambda j: -j.seconds)
    width = max([len(j.name) for j in ran] + [5])
    counts_of = {j.name: pytest_counts(_tail(j.log, 10_000)) if j.log.is_file() else {} for j in ran}
    rows = [f"{'suite':<{width}}  {'stated':>7}  {'measured':>8}  ratio  tests"]
    for j in ran:
        ratio = f"{j.seconds / j.weight:.2f}" if j.weight > 0 else "-"
        counts = counts_of[j.name]
        tests = ", ".join(f"{n} {k}" for k, n in counts.items() if k != "warnings") or "-"
        rows.append(f"{j.name:<{width}}  {j.weight:>5.0f} s  {j.seconds:>6.0f} s  {ratio:>5}  {tests}")
    stated, measured = sum(j.weight for j in ran), sum(j.seconds for j in ran)
    rows.append(f"{'all':<{width}}  {stated:>5.0f} s  {measured:>6.0f} s  (lane time)")
    over = [f"{j.name} ({j.seconds:.0f} s, stated {j.weight:.0f} s)" for j in ran
            if j.weight > 0 and j.seconds > OVER * j.weight]
    if over:
        rows.append("lanes: over its stated cost (more than " + f"{OVER:g}x; measure it again and state it in the "
                    "Makefile): " + ", ".join(over))
    total: dict[str, int] = {}
    for counts in counts_of.values():
        for k, n in counts.items():
            total[k] = total.get(k, 0) + n
    rows.append(f"tests: {total.get('passed', 0)} passed, {total.get('failed', 0) + total.get('errors', 0)} failed"
                + (f", {total['skipped']} skipped" if total.get("skipped") else ""))
    return "\n".join(rows)


def run(jobs: list[Job], lanes: int, logs: Path, fail_fast: bool = False) -> int:
    logs.mkdir(parents=True, exist_ok=True)
    queue = [j for j in order(jobs) if not j.idle]
    idle = [j for j in order(jobs) if j.idle]
    lock, failed = threading.Lock(), threading.Event()
    t0 = time.monotonic()

    def say(text: str) -> None:
        print(f"lanes: {text}", flush=True)

    def lane(index: int, own: list[Job] | None = None) -> None:
        """A lane takes the next job of the shared queue, or of ``own`` (the idle lane's)."""
        while True:
            with lock:
                if failed.is_set() or not (queue if own is None else own):
                    return
                if own is None:
                    job = queue.pop(pick(queue, [j for j in jobs if j.started is not None and j.seconds is None]))
                else:
                    job = own.pop(0)
                job.started = time.monotonic()
            job.log = logs / f"{job.name}.log"
            say(f"{job.name} started in lane {index + 1} (log {job.log})")
            with job.log.open("w") as out:
                job.rc = subprocess.run(job.command, shell=True, stdout=out, stderr=subprocess.STDOUT,
                                        check=False).returncode
            job.seconds = time.monotonic() - job.started
            print(f"cost: {job.name} {job.seconds:.0f} s" + ("" if job.rc == 0 else f" (failed, exit {job.rc})"),
                  flush=True)
            if job.rc != 0 and fail_fast:
                failed.set()

    threads = [threading.Thread(target=lane, args=(i,), daemon=True) for i in range(lanes)]
    if idle:
        threads.append(threading.Thread(target=lane, args=(lanes, idle), daemon=True))
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(PROGRESS_S / len(threads))
        running = [j for j in jobs if j.started is not None and j.rc is None]
        if running:
            say(f"{time.monotonic() - t0:.0f} s: running " + ", ".join(
                f"{j.name} ({time.monotonic() - j.started:.0f} s)" for j in running)
                + (f"; {len(queue) + len(idle)} waiting" if queue or idle else ""))
    bad = [j for j in jobs if j.rc not in (0, None)]
    for job in bad:
        print(f"\n===== {job.name} failed (exit {job.rc}); the last {TAIL_LINES} lines of {job.log} =====\n"
              f"{_tail(job.log)}\n===== end of {job.name} =====", flush=True)
    print(cost_table(jobs), flush=True)
    skipped = [j.name for j in jobs if j.rc is None]
    if skipped:
        say("not run after the failure (--fail-fast): " + ", ".join(skipped))
    say(f"{len(jobs) - len(bad) - len(skipped)} of {len(jobs)} passed in {time.monotonic() - t0:.0f} s"
        + (" (failed: " + ", ".join(j.name for j in bad) + ")" if bad else ""))
    for job in bad:
        named = failed_tests(job.log.read_text(errors="replace")) if job.log.is_file() else []
        for test in named or [f"no test named in {job.log}: the command itself failed (its log's end is above)"]:
            print(f"failed: {job.name}: {test}", flush=True)
    return 1 if bad or skipped else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=2, help="commands at once (1: one after the other)")
    parser.add_argument("--logs", type=Path, required=True, help="directory of the commands' logs")
    parser.add_argument("--fail-fast", action="store_true",
                        help="start no new command after one fails (the running ones finish)")
    parser.add_argument("--busy", default="", metavar="NAME[,NAME...]",
                        help="commands that keep a CPU busy throughout: never two at once while another is left")
    parser.add_argument("--idle", default="", metavar="NAME[,NAME...]",
                        help="commands that leave the CPUs idle most of their run: one after another in a lane of "
                             "their own, from the start")
    parser.add_argument("jobs", nargs="+", metavar="NAME=WEIGHT=COMMAND")
    args = parser.parse_args(argv)
    jobs = [parse_job(j) for j in args.jobs]
    busy = {name for name in args.busy.split(",") if name}
    idle = {name for name in args.idle.split(",") if name}
    for job in jobs:
        job.busy, job.idle = job.name in busy, job.name in idle
    lanes = max(1, min(args.lanes, len([j for j in jobs if not j.idle]) or 1))
    print("lanes: " + "; ".join(f"lane {i + 1}: {', '.join(names)}" for i, names in enumerate(plan(jobs, lanes)))
          + " (by the weights given; a lane takes the next when it frees)", flush=True)
    return run(jobs, lanes, args.logs, fail_fast=args.fail_fast)


if __name__ == "__main__":
    sys.exit(main())
