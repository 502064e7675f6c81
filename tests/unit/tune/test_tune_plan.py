"""The tune's plan: candidates from the verdict's next experiments or a plan file, which the floor can
pre-screen, the budget, and the cost in loads and minutes."""

from __future__ import annotations

import json

import pytest

from vllm_ops.traces.experiments import data_form
from vllm_ops.tune import TuneInputError, build_plan, last_load
from vllm_ops.tune.plan import cost, plan_words, prescreen_why, served_allreduce

from tune_helpers import COMM_NEXT, HOST_NEXT, NCCL_SERVED, UNIT


def _plan(source, max_loads=2, **kw):
    kw.setdefault("served", NCCL_SERVED)
    return build_plan(source, unit_environment=UNIT["environment"], unit_args=UNIT["extra_args"], max_loads=max_loads,
                      **kw)


def test_a_communication_bound_verdict_pre_screens_the_six_nccl_variants():
    plan = _plan(COMM_NEXT)
    names = [c["name"] for c in plan["candidates"]]
    sweep = [f"nccl:NCCL_PROTO={p},NCCL_MAX_NCHANNELS={n}" for p in ("LL", "LL128", "Simple") for n in (8, 16)]
    assert names == [*sweep, "ngram"]
    assert plan["prescreen"] == sweep and plan["unscreened"] == ["ngram"]
    assert plan["budget"] == {"max_loads": 2, "loads_min": 1, "loads_max": 2, "over": False, "message": None}
    by = {c["name"]: c for c in plan["candidates"]}
    # what each changes from the unit's settings (LL, 16 channels): LL/16 only turns FlashInfer's off
    assert by["nccl:NCCL_PROTO=LL,NCCL_MAX_NCHANNELS=16"]["settings"] == "VLLM_ALLREDUCE_USE_FLASHINFER=0"
    assert by["nccl:NCCL_PROTO=LL128,NCCL_MAX_NCHANNELS=8"]["settings"] == (
        "NCCL_PROTO=LL128 NCCL_MAX_NCHANNELS=8 VLLM_ALLREDUCE_USE_FLASHINFER=0")
    assert "arguments (--speculative-config" in by["ngram"]["prescreen_why"]
    assert [t["candidates"] for t in plan["tests"]] == [sweep, ["ngram"]]


def test_a_candidate_that_is_the_unit_s_own_settings_is_left_out():
    unit = {**UNIT["environment"], "VLLM_ALLREDUCE_USE_FLASHINFER": "0"}
    plan = build_plan(COMM_NEXT, unit_environment=unit, unit_args=[], max_loads=2, served=NCCL_SERVED)
    assert plan["dropped"] == [{"name": "nccl:NCCL_PROTO=LL,NCCL_MAX_NCHANNELS=16",
                                "why": "its settings are the unit's own"}]
    assert len(plan["prescreen"]) == 5


def test_a_host_bound_verdict_plans_the_host_side_change_and_no_nccl_sweep():
    plan = _plan(HOST_NEXT)
    assert [c["name"] for c in plan["candidates"]] == ["cuda-graphs"]
    assert plan["prescreen"] == [] and plan["unscreened"] == ["cuda-graphs"]
    assert plan["manual"] == ["find what slows rank 1's host"]


def test_the_same_variant_from_two_experiments_is_one_candidate_and_one_load():
    # The verdict's advice and a ledger lever on the same part (the GPU idle: CUDA graphs) name the same
    # variant: planned once, and both experiments say so.
    lever = data_form("gpu_idle: 1.62 ms a step above its floor; run with CUDA graphs", "cuda-graphs")
    plan = _plan([*HOST_NEXT, lever], max_loads=1)
    assert [c["name"] for c in plan["candidates"]] == ["cuda-graphs"]
    assert plan["budget"]["loads_min"] == 1 and not plan["budget"]["over"]
    assert [t["candidates"] for t in plan["tests"]][-1] == ["cuda-graphs"]


def test_a_plan_over_the_budget_says_its_cost_and_what_to_do():
    source = {"variants": [{"name": n, "extra_args": [f"--{n}"]} for n in ("async-scheduling", "no-enforce-eager",
                                                                              "enable-chunked-prefill")]}
    plan = _plan(source)
    b = plan["budget"]
    assert b["over"] and (b["loads_min"], b["max_loads"]) == (3, 2)
    assert b["message"].startswith("the plan needs at least 3 variant load(s) (async-scheduling, no-enforce-eager, "
                                   "enable-chunked-prefill: no floor can pre-screen them) and vllm_tune_max_loads is 2")
    assert "raise vllm_tune_max_loads, or drop variants" in b["message"]
    assert not _plan(source, max_loads=3)["budget"]["over"]


def test_a_configured_draft_or_eagle_model_replaces_ngram():
    eagle = {"method": "eagle3", "model": "/models/eagle3-head", "num_speculative_tokens": 3}
    (spec,) = [c for c in _plan(COMM_NEXT, speculative_config=eagle)["candidates"] if c["test"] == "speculative"]
    assert spec["name"] == "spec-eagle3" and spec["extra_args"] == ["--speculative-config",
                                                                     json.dumps(eagle, sort_keys=True)]


@pytest.mark.parametrize(("source", "words"), [
    ({"variants": [{"name": "port", "extra_args": ["--port", "9"]}]}, "sets --port, which the role sets itself"),
    ({"variants": [{"name": "bad", "environment": {"NCCL_PROTO": "LL256"}}]}, "NCCL_PROTO"),
    ({"variant": []}, "unknown keys variant"),
    ([{"text": "x", "expected_ms": "3"}], "expected_ms must be a number"),
    ({"sweeps": [{"environment": {"NCCL_PROTO": []}}]}, "empty list of values"),
])
def test_a_bad_plan_is_refused_before_anything_stops(source, words):
    with pytest.raises(TuneInputError, match=words):
        _plan(source)


@pytest.mark.parametrize(("variant", "why"), [
    ({"environment": {"NCCL_PROTO": "LL128", "VLLM_ALLREDUCE_USE_FLASHINFER": "0"}}, None),
    ({"environment": {"VLLM_ALLREDUCE_USE_FLASHINFER": "1"}}, "it sets VLLM_ALLREDUCE_USE_FLASHINFER"),
    ({"environment": {"NCCL_PROTO": "LL"}, "extra_args": ["--disable-custom-all-reduce"]}, "it passes arguments"),
    ({"environment": {}}, "changes nothing"),
])
def test_only_what_the_floor_runs_is_pre_screened(variant, why):
    got = prescreen_why(variant, "nccl")
    assert (got is None) if why is None else (why in got)


# What every job.json holds besides the figures a test gives (vllm_ops.records.job).
JOB = {"id": "20261201T100000Z", "host": "h1", "started_at": "2026-12-01T10:00:00Z",
       "finished_at": "2026-12-01T10:30:00Z"}


def _record(path, name, data):
    path.mkdir(parents=True, exist_ok=True)
    (path / name).write_text(json.dumps({**JOB, **data} if name == "job.json" else data))


def test_the_last_measured_load_comes_from_the_newest_tune_else_a_job_s_gaps(tmp_path):
    host = tmp_path / "h1"
    assert last_load(host)["seconds"] is None
    _record(host / "20261201T100000Z", "job.json", {"kind": "campaign", "id": "A", "downtime": {"gap_list": [
        {"seconds": 30.0, "open": False}, {"seconds": 40.0, "open": False}, {"seconds": 500.0, "open": True}]}})
    assert last_load(host) == {"seconds": 35.0, "source": "the downtime gaps of campaign A"}
    timed = [{"seconds": 10.0}, {"seconds": 12.0}, {"seconds": 20.0}]
    _record(host / "20261201T090000Z", "tune.json", {**JOB, "id": "T", "loads": timed})
    assert last_load(host) == {"seconds": 12.0, "source": "the loads timed by tune T"}


def test_the_cost_in_loads_and_minutes():
    plan = _plan(COMM_NEXT)
    c = cost(plan, 1, {"seconds": 30.0, "source": "s"})
    # 1 profile + 1 to 2 variants + 1 back: 3 to 4 loads of 30 s
    assert (c["loads_min"], c["loads_max"], c["downtime_min_s"], c["downtime_max_s"]) == (3, 4, 90.0, 120.0)
    words = plan_words({**plan, "origin": {"words": "the verdict X"}}, c)
    assert words.startswith("plan from the verdict X: 7 candidate(s), 6 pre-screened first")
    assert ("cost 3-4 model load(s) (1 profile, 1-2 variant(s), 1 back to the normal service), "
            "about 1.5-2.0 min") in words
    unknown = plan_words(plan, cost(plan, 0, {"seconds": None, "source": "no load measured"}))
    assert "minutes unknown: no load measured" in unknown


def test_next_experiments_that_are_no_variant_are_named_as_left_to_the_user():
    plan = _plan([data_form("check the clocks", None)])
    assert plan["candidates"] == [] and plan["manual"] == ["check the clocks"]
    assert "nothing to load" in plan_words(plan, cost(plan, 0, {"seconds": 5.0, "source": "s"}))


def test_a_catalogue_sweep_keeps_its_order_when_it_comes_from_a_json_file_with_sorted_keys():
    sorted_copy = json.loads(json.dumps(COMM_NEXT, sort_keys=True))
    assert next(iter(sorted_copy[0]["sweeps"][0]["environment"])) == "NCCL_MAX_NCHANNELS"  # as summary.json has it
    names = [c["name"] for c in _plan(COMM_NEXT)["candidates"]]
    assert [c["name"] for c in _plan(sorted_copy)["candidates"]] == names


@pytest.mark.parametrize("name", ["nccl-sweep.yml", "host-side.yml"])
def test_the_example_plan_files_plan(name):
    import yaml

    root = __import__("pathlib").Path(__file__).resolve().parents[3]
    plan = _plan(yaml.safe_load((root / "examples" / "tune" / name).read_text()))
    assert not plan["budget"]["over"] and plan["candidates"]
    if name == "nccl-sweep.yml":
        assert plan["prescreen"] == [c["name"] for c in _plan(COMM_NEXT)["candidates"] if c["prescreen"]]
    else:
        assert plan["unscreened"] == ["cuda-graphs", "async-scheduling"]


# ------------------------------------------------------------------ the served all-reduce (issue 29, point 3)
# A trace's decode all-reduce time and the part of it in NCCL's kernels, ms a step, as the summary gives them.
@pytest.mark.parametrize(("allreduce", "path"), [
    ({"ms_per_step_mean": 10.0, "nccl_ms_per_step_mean": 10.0}, "nccl"),
    ({"ms_per_step_mean": 10.0, "nccl_ms_per_step_mean": 9.6}, "nccl"),  # 96%: a stray custom call or two
    ({"ms_per_step_mean": 10.0, "nccl_ms_per_step_mean": 9.0}, "other"),
    ({"ms_per_step_mean": 10.0, "nccl_ms_per_step_mean": 0.0}, "other"),  # vLLM's custom all-reduce alone
    ({"ms_per_step_mean": None, "nccl_ms_per_step_mean": None}, None),  # no all-reduce: one GPU
    ({"ms_per_step_mean": 0.0, "nccl_ms_per_step_mean": 0.0}, None),
])
def test_the_served_all_reduce_is_named_by_the_trace_s_kernels(allreduce, path):
    served = served_allreduce({"allreduce": allreduce}, "s.json")
    assert served["path"] == path
    assert "s.json)" in served["words"]
    assert served_allreduce(None) == {"path": None, "words": "not known: no trace summary of this host"}


def test_the_h200_pair_serves_nccl_s_all_reduce():
    from vllm_ops.traces import SummaryOptions, summarize

    root = __import__("pathlib").Path(__file__).resolve().parents[3]
    summary = summarize([str(root / "tests" / "data" / "traces" / "h200_tp2_decode")],
                        SummaryOptions(decode_pattern="^decode_step$"))
    assert served_allreduce(summary)["path"] == "nccl"


@pytest.mark.parametrize("served", [{"path": "other", "words": "not NCCL's (custom)"},
                                    {"path": None, "words": "not known: no trace summary of this host"}])
def test_nccl_candidates_are_loaded_where_the_served_all_reduce_is_not_nccl_s(served):
    plan = _plan(COMM_NEXT, max_loads=7, served=served)
    assert plan["prescreen"] == [] and len(plan["unscreened"]) == 7
    by = {c["name"]: c for c in plan["candidates"]}
    why = by["nccl:NCCL_PROTO=LL128,NCCL_MAX_NCHANNELS=8"]["prescreen_why"]
    assert why.startswith("the served all-reduce is not") and "only a load judges it" in why
    assert plan["served_allreduce"] == served
    words = plan_words(plan, cost(plan, 1, {"seconds": None, "source": "no load measured"}))
    assert f"the served all-reduce is {served['words']}: no NCCL-only candidate is pre-screened" in words
    # at the default budget the same plan is refused with its cost, before anything stops
    assert _plan(COMM_NEXT, served=served)["budget"]["over"]


def test_a_switch_that_can_take_vllm_off_nccl_is_loaded_even_where_nccl_serves():
    source = {"variants": [{"name": "flashinfer-on", "environment": {"VLLM_ALLREDUCE_USE_FLASHINFER": "1"}},
                           {"name": "symm-mem", "environment": {"VLLM_ALLREDUCE_USE_SYMM_MEM": "1",
                                                                "NCCL_PROTO": "LL128"}},
                           {"name": "nccl-kept", "environment": {"VLLM_ALLREDUCE_USE_SYMM_MEM": "0",
                                                                 "NCCL_PROTO": "LL128"}}]}
    plan = _plan(source)
    assert plan["prescreen"] == ["nccl-kept"] and plan["unscreened"] == ["flashinfer-on", "symm-mem"]
    by = {c["name"]: c for c in plan["candidates"]}
    assert "VLLM_ALLREDUCE_USE_FLASHINFER=1, which can take vLLM's all-reduce off NCCL" in by["flashinfer-on"][
        "prescreen_why"]
    words = plan_words(plan, cost(plan, 0, {"seconds": None, "source": "no load measured"}))
    assert "the served all-reduce is NCCL's" in words and "no NCCL-only candidate" not in words


def test_a_plan_file_reads_the_served_all_reduce_from_the_host_s_newest_summary(tmp_path, capsys):
    from vllm_ops.tune.cli import main

    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({"variants": [{"name": "ll128", "environment": {"NCCL_PROTO": "LL128"}}]}))
    host = tmp_path / "artifacts"
    argv = ["plan", "--plan", str(plan_file), "--unit", json.dumps(UNIT), "--max-loads", "2",
            "--loads-under", str(host)]
    assert main(argv) == 0  # no summary of the host: the served all-reduce is not known, so a load
    plan = json.loads(capsys.readouterr().out)
    assert plan["served_allreduce"]["path"] is None and plan["unscreened"] == ["ll128"]
    for job, nccl in (("20261201T000000", 0.0), ("20261202T000000", 10.0)):  # the newer one serves NCCL
        (host / job / "profile").mkdir(parents=True)
        (host / job / "profile" / "summary.json").write_text(json.dumps(
            {"allreduce": {"ms_per_step_mean": 10.0, "nccl_ms_per_step_mean": nccl}}))
    assert main(argv) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["served_allreduce"]["path"] == "nccl" and plan["prescreen"] == ["ll128"]
    assert "20261202T000000" in plan["served_allreduce"]["words"]
