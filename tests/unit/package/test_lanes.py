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


def test_every_job_logs_to_its_file_and_its_cost_is_printed(tmp_path, capsys):
    assert main(["--lanes", "2", "--logs", str(tmp_path), "one=2=echo first", "two=1=echo second >&2"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "one.log").read_text() == "first\n" and (tmp_path / "two.log").read_text() == "second\n"
    assert "cost: one " in out and "cost: two " in out and "2 of 2 passed" in out


def test_after_a_failure_nothing_new_starts_and_the_failed_log_is_printed(tmp_path, capsys):
    # One lane: "bad" (the heaviest) runs first and fails, so "late" never starts.
    jobs = ["bad=9=echo the reason; exit 3", f"late=1=touch {tmp_path / 'ran'}"]
    assert main(["--lanes", "1", "--logs", str(tmp_path), *jobs]) == 1
    out = capsys.readouterr().out
    assert "cost: bad " in out and "(failed, exit 3)" in out
    assert "===== bad failed (exit 3)" in out and "the reason" in out
    assert "not run after the failure: late" in out and not (tmp_path / "ran").exists()
