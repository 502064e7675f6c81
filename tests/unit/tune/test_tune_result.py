"""The tune's commands end to end on a directory as the role leaves it: plan, pre-screen, winner,
report. Expected figures are computed here from the numbers the fixture writes."""

from __future__ import annotations

import csv
import json
import statistics

import yaml

from vllm_ops.tune.cli import main
from vllm_ops_host import loads

from tune_helpers import COMM_NEXT, HOST_NEXT, UNIT, floor, summary, write_experiment

# What every job.json holds besides the figures a test gives (vllm_ops.records.job).
JOB = {"id": "20261201T100000Z", "host": "h1", "started_at": "2026-12-01T10:00:00Z",
       "finished_at": "2026-12-01T10:30:00Z"}

LL128_16, LL128_8 = "nccl:NCCL_PROTO=LL128,NCCL_MAX_NCHANNELS=16", "nccl:NCCL_PROTO=LL128,NCCL_MAX_NCHANNELS=8"
FLOORS = {"unit": 100.0, "nccl:NCCL_PROTO=LL,NCCL_MAX_NCHANNELS=8": 130.0,
          "nccl:NCCL_PROTO=LL,NCCL_MAX_NCHANNELS=16": 100.5, LL128_8: 65.0, LL128_16: 50.0,
          "nccl:NCCL_PROTO=Simple,NCCL_MAX_NCHANNELS=8": 117.0, "nccl:NCCL_PROTO=Simple,NCCL_MAX_NCHANNELS=16": 90.0}
BASE, WIN, SECOND = [15.0, 15.2, 14.8], [10.0, 10.1, 9.9], [11.5, 11.6, 11.4]
DOWNTIME = {"seconds_not_ready": 40.5, "gaps": 3, "longest_gap_s": 15.0, "gap_list": []}


def _tune_json(d, **kw):
    record = {"id": d.name, "host": "h1", "started_at": "2026-12-01T12:00:00Z", "finished_at": "2026-12-01T12:05:00Z",
              "profile_path": "restart", "stopped": True, "applied": None, "downtime": DOWNTIME, "error": None,
              "loads": [{"what": "profile", "name": "profiling", "seconds": 9.0},
                        {"what": "variant", "name": LL128_16, "seconds": 10.0},
                        {"what": "variant", "name": LL128_8, "seconds": 11.0}],
              "load": {"input_len": 32, "output_len": 16, "num_prompts": 8, "concurrencies": [1, 4], "repeats": 3,
                       "temperature": 0.0, "prompts_file": ""}, **kw}
    (d / "tune.json").write_text(json.dumps(record))


def _load(total_s, ready=True, **who):
    """A load record as the vllm role's health wait keeps it, ``total_s`` from its start to the API's
    start-up (``ready``), or stopped before it (not ready: no total), with ``variant`` or ``what``."""
    lines = [(100.0, "INFO [gpu_model_runner.py:5040] Starting to load model /m...")]
    if ready:
        lines.append((100.0 + total_s, "INFO:     Application startup complete."))
    return dict(loads.parse_load(lines, t0=100.0), **who)


def _plan(d, next_tests=COMM_NEXT, ledger=None, capsys=None):
    (d / "profile" / "summary.json").write_text(json.dumps(summary(next_tests, ledger=ledger)))
    assert main(["plan", "--summary", str(d / "profile" / "summary.json"), "--unit", json.dumps(UNIT),
                 "--max-loads", "2", "--profile-loads", "1", "--out", str(d / "plan.json")]) == 0
    return json.loads(capsys.readouterr().out) if capsys else None


def _prescreen(d):
    (d / "allreduce").mkdir()
    for name, median in FLOORS.items():
        (d / "allreduce" / f"allreduce-{name}.json").write_text(json.dumps(floor(name, median)))
    assert main(["prescreen", str(d)]) == 0


def test_a_tune_of_the_nccl_sweep_names_the_winner_with_its_noise_band_and_cost(tune_dir, capsys):
    d = tune_dir
    plan = _plan(d, capsys=capsys)
    assert plan["cost"]["loads_max"] == 4 and "6 pre-screened first" in plan["words"]
    _prescreen(d)
    pre = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in pre["load"]] == [LL128_16, LL128_8]
    write_experiment(d, {"baseline": (UNIT["environment"], UNIT["extra_args"], BASE, [100.0, 101.0, 99.0]),
                         LL128_16: ({"NCCL_PROTO": "LL128", "NCCL_MAX_NCHANNELS": "16",
                                     "VLLM_ALLREDUCE_USE_FLASHINFER": "0"}, [], WIN, [150.0, 151.0, 149.0]),
                         LL128_8: ({"NCCL_PROTO": "LL128", "NCCL_MAX_NCHANNELS": "8",
                                    "VLLM_ALLREDUCE_USE_FLASHINFER": "0"}, [], SECOND, [130.0, 131.0, 129.0])})
    _tune_json(d)
    assert main(["winner", str(d)]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "name": LL128_16, "environment": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128", "NCCL_MAX_NCHANNELS": "16",
                                          "VLLM_ALLREDUCE_USE_FLASHINFER": "0"},
        "extra_args": ["--trust-remote-code"]}
    history = d.parent / "tunes.csv"
    assert main(["analyze", str(d), "--history", str(history)]) == 0
    headline = capsys.readouterr().out.strip().splitlines()[-1]
    report = json.loads((d / "report.json").read_text())
    cb, cv = statistics.median(BASE), statistics.median(WIN)
    change = 100 * (cv / cb - 1)
    band = 100 * (max(abs(b - cb) for b in BASE) + max(abs(v - cv) for v in WIN)) / cb
    result = (f"tested: `NCCL_PROTO=LL128 VLLM_ALLREDUCE_USE_FLASHINFER=0` TPOT {change:+.1f}% (+/-{band:.1f}%) at "
              f"concurrency 1, expected {-(1 - 50 / 100) * 10:.1f} ms, measured {cv - cb:.1f} ms")
    assert report["result"] == result
    assert headline == (f"h1: {result}; 6 pre-screened, 3 kept (nccl:NCCL_PROTO=LL,NCCL_MAX_NCHANNELS=8 slower, "
                        "nccl:NCCL_PROTO=LL,NCCL_MAX_NCHANNELS=16 same, nccl:NCCL_PROTO=Simple,NCCL_MAX_NCHANNELS=8 "
                        "slower); cost 4 model load(s), downtime 40.5 s in 3 gaps (longest 15.0 s), 5 min 0 s in all "
                        f"-> {d / 'report.md'}")
    assert report["costs"]["loads_words"] == (f"4 (profile profiling 9.0 s, variant {LL128_16} 10.0 s, variant "
                                              f"{LL128_8} 11.0 s, the normal service back)")
    assert report["warnings"] == [f"{n} not loaded: the budget of 2 load(s) (vllm_tune_max_loads) went to candidates "
                                  "expected to recover more, or earlier in the plan"
                                  for n in ("nccl:NCCL_PROTO=Simple,NCCL_MAX_NCHANNELS=16", "ngram")]
    host_vars = yaml.safe_load((d / "host_vars.yml").read_text())
    assert host_vars == {"vllm_environment": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128", "NCCL_MAX_NCHANNELS": "16",
                                              "VLLM_ALLREDUCE_USE_FLASHINFER": "0"},
                         "vllm_extra_args": ["--trust-remote-code"]}
    # The winner as rollout.yml's change: its own settings, not the unit's, which each host keeps.
    change = yaml.safe_load((d / "rollout_change.yml").read_text())
    assert change == {"vllm_rollout_change": {"name": LL128_16, "environment": {
        "NCCL_PROTO": "LL128", "NCCL_MAX_NCHANNELS": "16", "VLLM_ALLREDUCE_USE_FLASHINFER": "0"}, "extra_args": []}}
    (row,) = list(csv.DictReader(history.open()))
    assert (row["winner"], row["model_loads"], row["prescreened"], row["kept"], row["loaded"], row["wall_s"]) == (
        LL128_16, "4", "6", "3", "2", "300")
    assert float(row["measured_ms"]) == cv - cb and float(row["expected_ms"]) == -5.0
    md = (d / "report.md").read_text()
    assert "## The pre-screen" in md and f"| {LL128_16} | kept | 0.500 |" in md
    assert (d / "experiment" / "report.md").exists() and (d / "experiment" / "tpot.png").exists()


def test_when_nothing_helps_the_result_says_how_far_the_step_is_from_its_floor(tune_dir, capsys):
    d = tune_dir
    ledger = {"ranks": [{"rank": 0, "headroom_ms": 3.0, "floors": {"total": 6.0}},
                        {"rank": 1, "headroom_ms": 1.2, "floors": {"total": 6.0}}]}
    _plan(d, HOST_NEXT, ledger=ledger, capsys=capsys)
    write_experiment(d, {"baseline": (UNIT["environment"], UNIT["extra_args"], BASE, [100.0, 101.0, 99.0]),
                         "cuda-graphs": ({}, ["--no-enforce-eager"], [15.1, 15.0, 14.9], [100.5, 101.0, 99.5])})
    _tune_json(d, loads=[{"what": "profile", "name": "profiling", "seconds": 9.0},
                         {"what": "variant", "name": "cuda-graphs", "seconds": 10.0}])
    # The skeleton's job.json: the variant's load, phase by phase from vLLM's lines.
    lines = [(100.0, "INFO [gpu_model_runner.py:5040] Starting to load model /m..."),
             (104.0, "INFO [default_loader.py:501] Loading weights took 4.00 seconds"),
             (110.0, "INFO:     Application startup complete.")]
    load = dict(loads.parse_load(lines, t0=100.0, checkpoint_bytes=10_000_000_000), variant="cuda-graphs")
    # around it, the profiling variant's and the normal service's back
    profiling, back = _load(9.0, variant="profiling"), _load(8.0)
    (d / "job.json").write_text(json.dumps({**JOB, "loads": [profiling, load, back], "disk": None}))
    assert main(["winner", str(d)]) == 0 and capsys.readouterr().out.strip() == "null"
    assert main(["analyze", str(d)]) == 0
    report = json.loads((d / "report.json").read_text())
    # 10 GB in the 4 s stated: 2.50 GB/s; ready 10 s after the start
    clause = "3 loads, ready in 9.0 s (median), weights 4.0 s at 2.50 GB/s; disk floor not measured"
    assert report["model_loads"]["clause"] == clause
    assert f"**{clause}.**" in (d / "report.md").read_text()
    # the larger headroom of the two ranks, over the floor: 3.0 / 6.0
    assert report["result"] == ("no tested change helps (1 variant(s) tested, none better beyond the noise); "
                                "the step is within 50% of its floor")
    assert report["winner"] is None and not (d / "host_vars.yml").exists()
    assert not (d / "rollout_change.yml").exists()
    assert report["costs"]["model_loads"] == 3  # the profile, the variant, the normal service back
    assert report["costs"]["loads_words"] == ("3 (variant profiling 9.0 s, variant cuda-graphs 10.0 s, "
                                              "the normal service 8.0 s)")


def test_a_winner_that_did_not_load_counts_its_load_and_its_rollback(tune_dir, capsys):
    # tune.json times the loads it made itself; the failed deployment of the winner and the vllm role's
    # rollback to the last-known-good are in the skeleton's job.json only: the count is job.json's
    d = tune_dir
    _plan(d, HOST_NEXT, capsys=capsys)
    write_experiment(d, {"baseline": (UNIT["environment"], UNIT["extra_args"], BASE, [100.0, 101.0, 99.0]),
                         "cuda-graphs": ({}, ["--no-enforce-eager"], WIN, [100.5, 101.0, 99.5])})
    _tune_json(d, loads=[{"what": "profile", "name": "profiling", "seconds": 9.0},
                         {"what": "variant", "name": "cuda-graphs", "seconds": 10.0}],
               error="Deploy as the normal service the winner, cuda-graphs: The change did not load on h1")
    job = [_load(9.0, variant="profiling"), _load(10.0, variant="cuda-graphs"), _load(3.0, ready=False),
           dict(_load(8.0, what="the rollback to the last-known-good"),
                readback={"pid": 31, "words": "runs what was asked: vLLM 0.32.0 (/opt/vllm/0.32.0/bin/vllm), "
                                              "18 arguments, 0 variables checked"})]
    (d / "job.json").write_text(json.dumps({**JOB, "loads": job, "disk": None}))
    assert main(["analyze", str(d)]) == 0
    report = json.loads((d / "report.json").read_text())
    assert report["costs"]["model_loads"] == len(job) == report["model_loads"]["count"]
    assert report["costs"]["loads_words"] == (
        "4 (variant profiling 9.0 s, variant cuda-graphs 10.0 s, the normal service (did not get ready), "
        "the rollback to the last-known-good 8.0 s)")
    assert "cost 4 model load(s)" in report["headline"]
    # The page's load table: what each start ran, read back from its process (the rollback's here).
    page = (d / "report.md").read_text().splitlines()
    (rollback,) = (r for r in page if r.startswith("| 4 | the normal service, the "))
    assert rollback.endswith(
        "| PID 31: runs what was asked: vLLM 0.32.0 (/opt/vllm/0.32.0/bin/vllm), 18 arguments, 0 variables checked |")
    (profiled,) = (r for r in page if r.startswith("| 1 | profiling |"))
    assert profiled.endswith("| - |")  # a record from before the read-back


def test_speculative_decoding_on_random_tokens_is_warned_about(tune_dir, capsys):
    d = tune_dir
    _plan(d, [COMM_NEXT[1]])
    write_experiment(d, {"baseline": (UNIT["environment"], UNIT["extra_args"], BASE, [100.0, 101.0, 99.0]),
                         "ngram": ({}, ["--speculative-config", '{"method": "ngram"}'], BASE, [100.0, 101.0, 99.0])})
    _tune_json(d, loads=[{"what": "variant", "name": "ngram", "seconds": 10.0}], profile_path="live")
    assert main(["analyze", str(d)]) == 0
    (warning,) = json.loads((d / "report.json").read_text())["warnings"]
    assert warning.startswith("ngram: speculative decoding was measured on random tokens")
    assert "the load's prompts_file, vllm_tune_bench_load or vllm_bench_load" in warning


def test_a_pre_screen_that_keeps_no_candidate_loads_nothing_and_says_so(tune_dir, capsys):
    # Only the NCCL sweep, every candidate's floor at or above the unit's: none is kept, none loaded
    d = tune_dir
    _plan(d, [COMM_NEXT[0]], capsys=capsys)
    (d / "allreduce").mkdir()
    slower = {name: max(median, FLOORS["unit"] * 1.2) for name, median in FLOORS.items() if name != "unit"}
    for name, median in {"unit": FLOORS["unit"], **slower}.items():
        (d / "allreduce" / f"allreduce-{name}.json").write_text(json.dumps(floor(name, median)))
    assert main(["prescreen", str(d)]) == 0
    screened = json.loads(capsys.readouterr().out)
    assert screened["load"] == [] and screened["counts"]["kept"] == 0
    write_experiment(d, {"baseline": (UNIT["environment"], UNIT["extra_args"], BASE, [100.0, 101.0, 99.0])})
    _tune_json(d, loads=[], stopped=False, profile_path="live")
    (d / "job.json").write_text(json.dumps({**JOB, "loads": [], "disk": None}))
    assert main(["winner", str(d)]) == 0 and capsys.readouterr().out.strip() == "null"
    assert main(["analyze", str(d)]) == 0
    report = json.loads((d / "report.json").read_text())
    assert report["result"].startswith("no tested change helps (the pre-screen kept none of the candidates)")
    assert report["winner"] is None and not (d / "host_vars.yml").exists()
    assert report["costs"]["model_loads"] == 0 and report["costs"]["loaded"] == 0
    assert "6 pre-screened, 0 kept" in report["headline"] and "cost 0 model load(s)" in report["headline"]


def _drift_tune(d, capsys, again):
    """The NCCL sweep's tune with the baseline measured again after the restore (``again``: its TPOTs
    at concurrency 1), the winner LL128_16 as in the first test."""
    _plan(d, capsys=capsys)
    _prescreen(d)
    capsys.readouterr()
    write_experiment(d, {"baseline": (UNIT["environment"], UNIT["extra_args"], BASE, [100.0, 101.0, 99.0]),
                         "baseline@2": (UNIT["environment"], UNIT["extra_args"], again, [100.0, 101.0, 99.0]),
                         LL128_16: ({"NCCL_PROTO": "LL128", "NCCL_MAX_NCHANNELS": "16",
                                     "VLLM_ALLREDUCE_USE_FLASHINFER": "0"}, [], WIN, [150.0, 151.0, 149.0])})
    _tune_json(d)
    assert main(["analyze", str(d), "--history", str(d.parent / "tunes.csv")]) == 0
    headline = capsys.readouterr().out.strip().splitlines()[-1]
    return json.loads((d / "report.json").read_text()), headline, (d / "report.md").read_text()


def test_a_baseline_that_drifted_between_the_start_and_the_end_is_said_beside_the_winner(tune_dir, capsys):
    """Measured again after the restore, the normal service is 10% slower than at the start: beyond
    its noise (0.2 + 0.1 ms of 15), so the headline says so and the winner carries a warning."""
    again = [16.5, 16.6, 16.4]
    report, headline, md = _drift_tune(tune_dir, capsys, again)
    c1, c2 = statistics.median(BASE), statistics.median(again)
    band = (max(abs(b - c1) for b in BASE) + max(abs(b - c2) for b in again)) / c1
    assert abs(c2 / c1 - 1) > band
    words = f"baseline drifted {100 * (c2 / c1 - 1):+.1f}% (TPOT at 1)"
    assert report["drift"] == {"measured": True, "drifted": words, "words": words}
    assert f"; {words}; " in headline
    assert report["winner"]["name"] == LL128_16
    assert (f"the {words} between the tune's start and its end: the winner's gain may be the host's drift; "
            "measure again (an experiment of the winner) before rolling it out") in report["warnings"]
    assert "and again after the restore (both rounds pooled)" in md and f"Drift: {words}." in md


def test_a_baseline_that_held_is_said_to_have_held_and_a_single_one_why(tune_dir, capsys, tmp_path):
    report, headline, md = _drift_tune(tune_dir, capsys, list(BASE))
    held = "the baseline held within its noise, measured again after the restore"
    assert report["drift"] == {"measured": True, "drifted": None, "words": held}
    assert "drifted" not in headline and not any("drift" in w for w in report["warnings"])
    assert f"Drift: {held}." in md
    # applied: the old settings were not up again, and the report says so
    d = tmp_path / "applied"
    d.mkdir()
    (d / "profile").mkdir()
    _plan(d, capsys=capsys)
    write_experiment(d, {"baseline": (UNIT["environment"], UNIT["extra_args"], BASE, [100.0, 101.0, 99.0])})
    _tune_json(d, applied=LL128_16)
    assert main(["analyze", str(d), "--history", str(d / "tunes.csv")]) == 0
    once = json.loads((d / "report.json").read_text())["drift"]
    assert once == {"measured": False, "drifted": None, "words": "the baseline was measured once (the winner was "
                    "deployed, so the old settings were not up again)"}
