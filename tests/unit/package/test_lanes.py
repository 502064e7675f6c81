"""tests/lanes.py (make test, make molecule): the lanes it plans, the logs and costs it prints, and
what a failure does, on small shell commands."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lanes import main, parse_job, plan


def test_the_longest_go_first_each_next_to_the_lightest_lane():
    jobs = [parse_job(t) for t in ("a=100=true", "b=1500=true", "c=600=true", "d=500=true", "e=450=true")]
    # b to lane 1 (1500), c to lane 2 (600), d to lane 2 (1100 < 1500), e to lane 2 (1550), a to lane 1
    assert plan(jobs, 2) == [["b", "a"], ["c", "d", "e"]]
    assert plan(jobs, 1) == [["b", "c", "d", "e", "a"]]


def test_a_busy_suite_is_not_started_beside_another_busy_one_while_a_waiting_one_is_left():
    jobs = [parse_job(t) for t in ("big=1000=true", "m1=600=true", "m2=500=true", "u=300=true", "c=200=true",
                                    "s=50=true")]
    for job in jobs:
        job.busy = job.name in ("big", "u", "c")
    # By hand: big to lane 1 (till 1000); m1 to lane 2 beside it (till 600), then m2 (till 1100); at 1000
    # lane 1 takes u (m2 waits, busy beside it is fine); at 1100 lane 2 takes s, not c, beside u; at
    # 1150 only c is left, so it runs beside u.
    assert plan(jobs, 2) == [["big", "u"], ["m1", "m2", "s", "c"]]
    # Without busy suites, the longest next: s last, on lane 1 (both lanes free at 1300).
    for job in jobs:
        job.busy = False
    assert plan(jobs, 2) == [["big", "u", "s"], ["m1", "m2", "c"]]


def test_the_lanes_start_a_waiting_suite_beside_a_busy_one(tmp_path, capsys):
    jobs = ["b1=3=sleep 0.3", "b2=2=true", "w=1=sleep 0.3"]
    assert main(["--lanes", "2", "--busy", "b1,b2", "--logs", str(tmp_path), *jobs]) == 0
    started = [line.split()[1] for line in capsys.readouterr().out.splitlines() if " started in lane " in line]
    # b1 first (the longest), then w (b2 would be a second busy one), and b2 only when a lane frees.
    assert started == ["b1", "w", "b2"]


def test_an_idle_suite_runs_in_a_lane_of_its_own_from_the_start(tmp_path, capsys):
    jobs = ["long=9=sleep 0.4", "short=1=true", "idle=5=sleep 0.2", "idle2=4=true"]
    parsed = [parse_job(t) for t in jobs]
    for job in parsed:
        job.idle = job.name.startswith("idle")
    assert plan(parsed, 1) == [["long", "short"], ["idle", "idle2"]]
    assert main(["--lanes", "1", "--idle", "idle,idle2", "--logs", str(tmp_path), *jobs]) == 0
    out = capsys.readouterr().out
    started = [line.split() for line in out.splitlines() if " started in lane " in line]
    # the one shared lane takes long, then short; the idle lane (2) starts idle at once, beside long
    assert {words[1] for words in started[:2]} == {"long", "idle"}
    assert {words[1]: words[5] for words in started} == {"long": "1", "short": "1", "idle": "2", "idle2": "2"}
    assert out.index("cost: idle ") < out.index("cost: long ") and "4 of 4 passed" in out


def test_every_job_logs_to_its_file_and_its_cost_is_printed(tmp_path, capsys):
    assert main(["--lanes", "2", "--logs", str(tmp_path), "one=2=echo first", "two=1=echo second >&2"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "one.log").read_text() == "first\n" and (tmp_path / "two.log").read_text() == "second\n"
    assert "cost: one " in out and "cost: two " in out and "2 of 2 passed" in out


def test_with_fail_fast_nothing_new_starts_after_a_failure_and_the_failed_log_is_printed(tmp_path, capsys):
    # One lane: "bad" (the heaviest) runs first and fails, so "late" never starts.
    jobs = ["bad=9=echo the reason; exit 3", f"late=1=touch {tmp_path / 'ran'}"]
    assert main(["--lanes", "1", "--fail-fast", "--logs", str(tmp_path), *jobs]) == 1
    out = capsys.readouterr().out
    assert "cost: bad " in out and "(failed, exit 3)" in out
    assert "===== bad failed (exit 3)" in out and "the reason" in out
    assert "not run after the failure (--fail-fast): late" in out and not (tmp_path / "ran").exists()


def test_a_failure_stops_nothing_else_and_the_last_lines_name_each_failed_test(tmp_path, capsys):
    # pytest's short summary, plain and as Molecule's verify quotes it (colour codes, JSON quotes).
    plain = "echo 'FAILED tests/test_a.py::test_one - assert 1 == 2'; echo '= 1 failed in 1.00s ='; exit 1"
    quoted = ("printf '%s\\n' '  \u2502   \\u001b[31m\"FAILED molecule/s/tests/test_b.py::test_two[podman://h] - "
              "KeyError: x\",' '\"1 failed, 3 passed in 9.00s\"'; exit 2")
    jobs = [f"plain=9={plain}", f"quoted=8={quoted}", "bare=7=exit 4", f"late=1=touch {tmp_path / 'ran'}"]
    assert main(["--lanes", "1", "--logs", str(tmp_path), *jobs]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert (tmp_path / "ran").exists()
    assert lines[-4].endswith("1 of 4 passed in " + lines[-4].split(" passed in ")[1].split()[0]
                              + " s (failed: plain, quoted, bare)")
    assert lines[-3:] == [
        "failed: plain: tests/test_a.py::test_one - assert 1 == 2",
        "failed: quoted: molecule/s/tests/test_b.py::test_two[podman://h] - KeyError: x",
        f"failed: bare: no test named in {tmp_path / 'bare.log'}: the command itself failed (its log's end is above)",
    ]


def test_each_suites_time_is_set_beside_its_stated_cost_and_one_over_it_is_named(tmp_path, capsys):
    # "slow" sleeps 1 s against a stated cost of 0.1 s (10x); "fast" states 100 s and takes well under.
    assert main(["--lanes", "2", "--logs", str(tmp_path), "slow=0.1=sleep 1", "fast=100=true"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("suite "):]
    rows = {line.split()[0]: line.split() for line in table.splitlines()[1:3]}
    assert rows["slow"][1:3] == ["0", "s"] and int(rows["slow"][3]) >= 1
    assert rows["fast"][1:3] == ["100", "s"]
    named = [line for line in table.splitlines() if line.startswith("lanes: over its stated cost")]
    assert len(named) == 1 and "slow (" in named[0] and "fast" not in named[0]


def test_the_tests_of_each_suite_are_counted_from_pytests_last_summary_and_added_up(tmp_path, capsys):
    # A plain pytest summary, one as Molecule's verify quotes it in its JSON output, and a log without one.
    plain = "echo '..F'; echo '==== 1 failed, 2 passed, 1 skipped in 3.50s ===='"
    quoted = """echo '    "5 passed, 2 warnings in 612.03s (0:10:12)"'"""
    jobs = [f"plain=3={plain}", f"quoted=2={quoted}", "none=1=echo nothing"]
    assert main(["--lanes", "1", "--logs", str(tmp_path), *jobs]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in lines if line.split()[:1] in (["plain"], ["quoted"], ["none"])}
    assert rows["plain"].endswith("1 failed, 2 passed, 1 skipped")
    assert rows["quoted"].endswith("5 passed") and rows["none"].endswith(" -")
    # 2 + 5 passed, 1 failed, 1 skipped, in pytest's own words
    assert "tests: 7 passed, 1 failed, 1 skipped" in lines
