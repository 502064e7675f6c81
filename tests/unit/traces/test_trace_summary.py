import pytest

from vllm_ops.traces import Classifier, SummaryOptions, TraceInputError, parse_rules, summarize

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
CUSTOM = "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)"
GEMM = "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNT"
STEP = "execute_context_0(0)_generation_1(1)"


def _rank_events(ev, ar_durs, step_names=(STEP, STEP), gemm_dur=4.0):
    """Two steps of 100 us at t=0 and t=1000; each has one GEMM and one all-reduce per entry."""
    events = []
    durs = iter(ar_durs)
    for s, base in enumerate((0.0, 1000.0)):
        events.append(ev.span(step_names[s], base, 100.0))
        events.append(ev.kernel(GEMM, base + 1.0, gemm_dur))
        events.append(ev.kernel(NCCL, base + 10.0, next(durs)))
    return events


def test_two_ranks_known_figures(write_trace, ev, tmp_path):
    write_trace("r0.json.gz", _rank_events(ev, [10.0, 12.0]), rank=0, world_size=2)
    write_trace("r1.json.gz", _rank_events(ev, [30.0, 5.0]), rank=1, world_size=2)
    s = summarize([str(tmp_path)], SummaryOptions(jobs=1))
    assert s["warnings"] == []
    r0, r1 = s["ranks"]
    assert (r0["rank"], r0["decode_steps"], r1["decode_steps"]) == (0, 2, 2)
    assert r0["cuda_ms_per_step"] == pytest.approx((4 + 10 + 4 + 12) / 2 / 1000)
    assert r0["categories"]["allreduce"] == {"ms_per_step": 0.011, "share": pytest.approx(22 / 30, abs=1e-4)}
    assert r0["categories"]["gemm"]["ms_per_step"] == 0.004
    # per step: the GEMM [1, 5] and the all-reduce [10, 20] (step 0) or [10, 22] (step 1), in us
    assert [s["window_ms"] for s in r0["steps"]] == [0.019, 0.021]
    assert [s["busy_ms"] for s in r0["steps"]] == [0.014, 0.016]
    assert [s["idle_ms"] for s in r0["steps"]] == [0.005, 0.005]
    # no CPU annotation: a step starts at its window start; the period runs to the next step's start
    assert [s["period_ms"] for s in r0["steps"]] == [1.0, None]
    assert [s["allreduce_transfer_ms"] for s in r0["steps"]] == [0.01, 0.005]
    assert [s["allreduce_wait_ms"] for s in r1["steps"]] == [0.02, 0.0]
    assert r0["top_kernels"][0] == {"name": NCCL, "category": "allreduce", "ms_per_step": 0.011,
                                    "calls_per_step": 1.0}
    ar = s["allreduce"]
    # Collective 1: min(10, 30) = 10; collective 2: min(12, 5) = 5.
    assert ar["calls_matched"] == 2
    assert ar["ms_per_step_skew_corrected"] == pytest.approx((10 + 5) / 2 / 1000)
    assert ar["wait_ms_per_step_by_rank"] == {"0": pytest.approx(7 / 2 / 1000), "1": pytest.approx(20 / 2 / 1000)}
    assert ar["ms_per_step_mean"] == pytest.approx((11 + 17.5) / 2 / 1000, abs=1e-4)
    assert ar["share_mean"] == pytest.approx((22 / 30 + 35 / 43) / 2, abs=1e-4)
    assert ar["nccl_share_mean"] == ar["share_mean"]


def test_activity_belongs_to_a_step_by_its_start(write_trace, ev, tmp_path):
    events = [
        ev.span(STEP, 100.0, 50.0),
        ev.kernel(GEMM, 99.9, 5.0),      # starts before: not in the step
        ev.kernel(GEMM, 100.0, 1.0),     # starts at the span start: in
        ev.kernel(GEMM, 149.0, 10.0),    # starts inside, ends after: in, whole duration
        ev.kernel(GEMM, 150.0, 2.0),     # starts at the span end: not in
    ]
    s = summarize([write_trace("r0.json.gz", events)])
    assert s["ranks"][0]["cuda_ms_per_step"] == pytest.approx(0.011)
    assert s["ranks"][0]["top_kernels"][0]["calls_per_step"] == 2.0


@pytest.mark.parametrize(("name", "phase"), [
    ("execute_context_0(0)_generation_5(5)", "decode"),
    ("execute_context_0(0)_generation_1(888_788544)", "decode"),
    ("execute_7_context_0(0)_generation_3(3)", "decode"),
    ("execute_1_context_0(sq0sk0sqsq0sqsk0)_generation_1(sq1sk300sqsq1sqsk300)", "decode"),
    ("execute_context_1(888_788544)_generation_0(0)", "prefill"),
    ("execute_context_10(10)_generation_0(0)", "prefill"),
    # context and generation requests in one step: mixed, neither a decode nor a prefill step
    ("execute_context_2(4096)_generation_30(30)", "mixed"),
    ("execute_context_0(0)_generation_0(0)", None),  # an empty step: nothing scheduled, never a step
    ("execute_model", None),
])
def test_default_patterns(write_trace, ev, name, phase):
    s = summarize([write_trace("r0.json.gz", [ev.span(name, 0.0, 10.0), ev.kernel(GEMM, 1.0, 2.0)])])
    r = s["ranks"][0]
    assert [st["phase"] for st in r["steps"]] == ([phase] if phase else [])
    assert r["decode_steps"] == (phase == "decode")
    assert [p["prefill_steps"] for p in s["prefill"]] == ([1] if phase == "prefill" else [])


def test_profiler_step_fallback(write_trace, ev):
    events = [ev.span("ProfilerStep#3", 0.0, 10.0), ev.span("ProfilerStep#4", 20.0, 10.0),
              ev.kernel(GEMM, 1.0, 2.0), ev.kernel(GEMM, 21.0, 4.0)]
    path = write_trace("r0.json.gz", events)
    s = summarize([path])
    assert s["decode_pattern"] == r"^ProfilerStep#\d+$"
    assert s["ranks"][0]["decode_steps"] == 2
    assert s["ranks"][0]["cuda_ms_per_step"] == pytest.approx(0.003)
    assert any("ProfilerStep#N spans are used" in w for w in s["warnings"])
    # An explicit pattern never falls back.
    s = summarize([path], SummaryOptions(decode_pattern="^decode$"))
    assert s["ranks"][0]["decode_steps"] == 0


def test_vllm_steps_win_over_profiler_steps(write_trace, ev):
    events = [ev.span("ProfilerStep#1", 0.0, 100.0), ev.span(STEP, 10.0, 10.0), ev.kernel(GEMM, 11.0, 2.0),
              ev.kernel(GEMM, 50.0, 7.0)]
    s = summarize([write_trace("r0.json.gz", events)])
    assert s["ranks"][0]["decode_steps"] == 1
    assert s["ranks"][0]["cuda_ms_per_step"] == pytest.approx(0.002)


def test_zero_decode_steps_names_what_was_seen(write_trace, ev):
    events = [ev.span("execute_context_1(5)_generation_0(0)", 0.0, 10.0), ev.span("forward", 0.0, 10.0),
              ev.kernel(GEMM, 1.0, 2.0)]
    s = summarize([write_trace("r0.json.gz", events)])
    r = s["ranks"][0]
    assert r["decode_steps"] == 0 and r["cuda_ms_per_step"] is None and r["categories"] == {}
    assert s["allreduce"]["share_mean"] is None
    (w,) = [w for w in s["warnings"] if "no decode steps" in w]
    assert "execute_context_N(N)_generation_N(N) x1" in w and "forward x1" in w


def test_cpu_annotations_without_gpu_projection_are_steps_by_correlation(write_trace, ev):
    # No gpu_user_annotation: the steps come from the CPU annotations, and an activity belongs
    # to the step whose CPU span holds the launch call with its correlation.
    events = [ev.span("ProfilerStep#1", 0.0, 10.0, cat="user_annotation"),
              ev.span("ProfilerStep#2", 10.0, 10.0, cat="user_annotation"),
              ev.runtime("cudaLaunchKernel", 2.0, 1.0, corr=1), ev.runtime("cudaLaunchKernel", 12.0, 1.0, corr=2),
              ev.runtime("cudaLaunchKernel", 13.0, 1.0, corr=3),
              # launched in step 1, runs while step 2's CPU span is open: still step 1's
              ev.kernel(GEMM, 11.0, 2.0, corr=1), ev.kernel(GEMM, 14.0, 3.0, corr=2),
              ev.kernel(GEMM, 30.0, 1.0, corr=3)]
    s = summarize([write_trace("r0.json.gz", events)])
    r = s["ranks"][0]
    assert r["decode_steps"] == 2 and r["steps_from"] == "user_annotation"
    assert [st["activities"] for st in r["steps"]] == [1, 2]
    assert [st["window_ms"] for st in r["steps"]] == [0.002, 0.017]  # 11-13; 14-31
    assert [st["busy_ms"] for st in r["steps"]] == [0.002, 0.004]
    assert any("ProfilerStep#N spans are used as decode steps" in w for w in s["warnings"])
    assert not any("could not be attributed" in w for w in s["warnings"])


def test_cpu_annotations_with_kernels_lacking_a_launch_are_flagged(write_trace, ev):
    # the one launch call in the trace carries another correlation than the kernel
    events = [ev.span("ProfilerStep#1", 0.0, 10.0, cat="user_annotation"), ev.kernel(GEMM, 1.0, 2.0, corr=8),
              ev.runtime("cudaLaunchKernel", 0.5, 0.2, corr=9)]
    s = summarize([write_trace("r0.json.gz", events)])
    r = s["ranks"][0]
    assert r["decode_steps"] == 1 and r["steps_from"] == "user_annotation"
    assert r["steps"][0]["activities"] == 0
    assert any("steps found from CPU annotations, but 1 of 1 GPU activities have no launch call" in w
               for w in s["warnings"])


def test_cpu_only_trace_warns_instead_of_reporting_zeros(write_trace, ev):
    events = [ev.span(STEP, 0.0, 10.0, cat="user_annotation"), ev.cpu_op("aten::mm", 1.0, 2.0),
              ev.span(STEP, 0.0, 10.0)]
    s = summarize([write_trace("cpu_rank0.json.gz", events)])
    r = s["ranks"][0]
    assert r["cuda_ms_per_step"] is None and r["categories"] == {} and r["top_kernels"] == []
    assert r["allreduce_share"] is None
    assert r["gpu_kernels"] == 0 and r["gpu_time_measured"] is False
    # a GPU annotation without any kernel is still a step; there is just nothing measured in it
    assert r["decode_steps"] == 1 and r["steps_from"] == "gpu_user_annotation"
    assert any("no GPU kernel events in the trace (CPU-only run?)" in w for w in s["warnings"])
    assert s["allreduce"]["ms_per_step_mean"] is None
    assert s["gpu_time_measured"] is False and s["ranks_without_gpu_kernels"] == [0]


def test_gpu_traces_are_marked_measured(write_trace, ev):
    s = summarize([write_trace("r0.json.gz", _rank_events(ev, [1.0, 1.0]))])
    assert s["gpu_time_measured"] is True and s["ranks_without_gpu_kernels"] == []
    r = s["ranks"][0]
    assert r["gpu_time_measured"] is True and r["gpu_kernels"] == 4 and r["steps_from"] == "gpu_user_annotation"


def test_graph_launches_without_kernels(write_trace, ev):
    events = [ev.span(STEP, 0.0, 100.0), ev.runtime("cudaGraphLaunch", 1.0, 1.0, corr=50),
              ev.runtime("cudaGraphLaunch", 2.0, 1.0, corr=51), ev.kernel(GEMM, 5.0, 1.0, corr=51),
              ev.kernel(GEMM, 6.0, 1.0, corr=51)]
    s = summarize([write_trace("r0.json.gz", events)])
    (w,) = [w for w in s["warnings"] if "cudaGraphLaunch" in w]
    assert "1 of 2 cudaGraphLaunch calls have no recorded GPU activity" in w


def test_graph_launches_with_their_kernels_are_fine(write_trace, ev):
    events = [ev.span(STEP, 0.0, 100.0), ev.runtime("cudaGraphLaunch", 1.0, 1.0, corr=50),
              ev.kernel(GEMM, 5.0, 1.0, corr=50)]
    s = summarize([write_trace("r0.json.gz", events)])
    assert s["warnings"] == []


def test_missing_ranks_of_the_group(write_trace, ev, tmp_path):
    write_trace("r0.json.gz", _rank_events(ev, [1.0, 1.0]), rank=0, world_size=4)
    write_trace("r2.json.gz", _rank_events(ev, [1.0, 1.0]), rank=2, world_size=4)
    s = summarize([str(tmp_path)], SummaryOptions(jobs=1))
    assert s["world_size"] == 4
    assert any("2 of the 4 ranks have no trace here (missing: 1, 3)" in w for w in s["warnings"])


def test_single_rank_skew_correction_is_flagged(write_trace, ev):
    s = summarize([write_trace("r0.json.gz", _rank_events(ev, [3.0, 5.0]))])
    assert s["allreduce"]["ms_per_step_skew_corrected"] == s["allreduce"]["ms_per_step_mean"] == 0.004
    assert s["allreduce"]["wait_ms_per_step_by_rank"] == {"0": None}  # one rank: waiting not told from transfer
    assert any("only one rank has decode steps" in w for w in s["warnings"])


def test_different_step_counts_and_unmatched_calls(write_trace, ev, tmp_path):
    write_trace("r0.json.gz", _rank_events(ev, [10.0, 12.0]), rank=0, world_size=2)
    write_trace("r1.json.gz", _rank_events(ev, [30.0, 5.0], step_names=(STEP, "other")), rank=1, world_size=2)
    s = summarize([str(tmp_path)], SummaryOptions(jobs=1))
    assert any("different decode step counts (rank 0: 2, rank 1: 1)" in w for w in s["warnings"])
    assert ("all-reduce group (unnamed): ranks have different call counts (rank 0: 2, rank 1: 1); only the first "
            "1 of each were matched as collectives.") in s["warnings"]
    assert s["allreduce"]["calls_matched"] == 1
    # the matched collective: min(10, 30) = 10 us of transfer, rank 1 waited 20 us
    assert s["ranks"][0]["steps"][0]["allreduce_transfer_ms"] == 0.01
    assert s["ranks"][1]["steps"][0]["allreduce_wait_ms"] == 0.02
    # rank 0's second call has no partner: its transfer is unknown, not zero
    assert s["ranks"][0]["steps"][1]["allreduce_transfer_ms"] is None


def test_skew_correction_with_unmatched_calls_keeps_its_meaning(write_trace, ev, tmp_path):
    write_trace("r0.json.gz", _rank_events(ev, [10.0, 12.0]), rank=0, world_size=2)
    write_trace("r1.json.gz", _rank_events(ev, [30.0, 5.0], step_names=(STEP, "other")), rank=1, world_size=2)
    s = summarize([str(tmp_path)], SummaryOptions(jobs=1))
    assert s["allreduce"]["ms_per_step_skew_corrected"] == pytest.approx(0.01)


def test_calls_running_different_kernels_are_flagged(write_trace, ev, tmp_path):
    write_trace("r0.json.gz", _rank_events(ev, [10.0, 12.0]), rank=0, world_size=2)
    events = [e if e["name"] != NCCL else dict(e, name=CUSTOM) for e in _rank_events(ev, [30.0, 5.0])]
    write_trace("r1.json.gz", events, rank=1, world_size=2)
    s = summarize([str(tmp_path)], SummaryOptions(jobs=1))
    assert ("all-reduce group (unnamed): 2 of 2 matched calls run different kernels on different ranks; the "
            "matching by call order may be off.") in s["warnings"]
    assert s["ranks"][1]["allreduce_nccl_ms_per_step"] == 0.0
    assert s["allreduce"]["nccl_ms_per_step_mean"] == pytest.approx(0.011 / 2, abs=1e-4)


def test_rank_comes_from_the_file_name_then_from_order(write_trace, ev, tmp_path):
    write_trace("x_rank1.json.gz", _rank_events(ev, [1.0, 1.0]), info=False)
    write_trace("y.json.gz", _rank_events(ev, [1.0, 1.0]), info=False)
    s = summarize([str(tmp_path)], SummaryOptions(jobs=1))
    assert [r["rank"] for r in s["ranks"]] == [0, 1]
    assert s["ranks"][1]["file"].endswith("x_rank1.json.gz")
    assert any("y.json.gz: no distributedInfo" in w and "treated as rank 0" in w for w in s["warnings"])


def test_two_files_for_one_rank_is_an_error(write_trace, ev, tmp_path):
    write_trace("a.json.gz", _rank_events(ev, [1.0, 1.0]), rank=0)
    write_trace("b.json.gz", _rank_events(ev, [1.0, 1.0]), rank=0)
    with pytest.raises(TraceInputError, match="rank 0 is also claimed by"):
        summarize([str(tmp_path)], SummaryOptions(jobs=1))


def test_keep_going_lets_good_ranks_through(write_trace, ev, tmp_path):
    write_trace("r0.json.gz", _rank_events(ev, [1.0, 1.0]), rank=0, world_size=2)
    (tmp_path / "r1.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(TraceInputError, match=r"r1\.json\.gz"):
        summarize([str(tmp_path)], SummaryOptions(jobs=1))
    s = summarize([str(tmp_path)], SummaryOptions(keep_going=True, jobs=1))
    assert [r["rank"] for r in s["ranks"]] == [0]
    assert any(w.startswith("skipped ") and "r1.json.gz" in w for w in s["warnings"])
    assert any("missing: 1" in w for w in s["warnings"])


def test_keep_going_with_nothing_readable_still_fails(tmp_path):
    (tmp_path / "r0.json").write_bytes(b"")
    with pytest.raises(TraceInputError, match=r"r0\.json: empty file .*no readable trace left"):
        summarize([str(tmp_path)], SummaryOptions(keep_going=True))


def test_parallel_workers_give_the_same_summary(write_trace, ev, tmp_path):
    for r, durs in enumerate(([10.0, 12.0], [30.0, 5.0], [7.0, 9.0])):
        write_trace(f"r{r}.json.gz", _rank_events(ev, durs), rank=r, world_size=3)
    assert summarize([str(tmp_path)], SummaryOptions(jobs=3)) == summarize([str(tmp_path)], SummaryOptions(jobs=1))


def test_user_categories_and_top(write_trace, ev):
    path = write_trace("r0.json.gz", _rank_events(ev, [1.0, 1.0]))
    s = summarize([path], SummaryOptions(categories={"mine": "^nvjet"}, top=1))
    r = s["ranks"][0]
    assert r["categories"]["mine"]["ms_per_step"] == 0.004
    assert r["top_kernels"] == [{"name": GEMM, "category": "mine", "ms_per_step": 0.004, "calls_per_step": 1.0}]
    assert r["steps"][0]["kernel_ms_by_category"] == {"mine": 0.004, "allreduce": 0.001}


def test_categories_list_every_category_of_the_table(write_trace, ev):
    s = summarize([write_trace("r0.json.gz", _rank_events(ev, [1.0, 1.0]))],
                  SummaryOptions(categories={"mine": "^nvjet"}))
    r = s["ranks"][0]
    assert r["categories"]["gemm"] == {"ms_per_step": 0.0, "share": 0.0}
    assert r["categories"]["other"] == {"ms_per_step": 0.0, "share": 0.0}
    assert set(r["categories"]) == set(Classifier(parse_rules({"mine": "^nvjet"})).categories)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"decode_pattern": "("}, "decode_pattern: invalid regular expression"),
    ({"prefill_pattern": "["}, "prefill_pattern: invalid regular expression"),
    ({"top": -1}, "top must be"),
    ({"jobs": 0}, "jobs must be"),
    ({"categories": ["bad"]}, "expected NAME=REGEX"),
])
def test_bad_options(write_trace, ev, kwargs, message):
    with pytest.raises(TraceInputError, match=message):
        summarize([write_trace("r0.json.gz", [])], SummaryOptions(**kwargs))


def test_nested_spans_are_flagged(write_trace, ev):
    events = [ev.span("step_outer", 0.0, 100.0), ev.span("step_inner", 10.0, 10.0),
              ev.kernel(GEMM, 15.0, 1.0), ev.kernel(GEMM, 50.0, 2.0)]
    s = summarize([write_trace("r0.json.gz", events)], SummaryOptions(decode_pattern="^step_"))
    r = s["ranks"][0]
    assert r["decode_steps"] == 2
    # the kernel at 15 lies in both spans: it belongs to the one that started last, the inner one
    assert r["steps"][1]["name"] == "step_inner" and r["steps"][1]["kernel_ms"] == 0.001
    assert any("1 step spans overlap the one before; each activity is counted in the latest-starting span that "
               "holds it" in w for w in s["warnings"])


def test_nested_spans_an_activity_outside_the_inner_span_belongs_to_the_outer(write_trace, ev):
    events = [ev.span("step_outer", 0.0, 100.0), ev.span("step_inner", 10.0, 10.0),
              ev.kernel(GEMM, 15.0, 1.0), ev.kernel(GEMM, 50.0, 2.0)]
    s = summarize([write_trace("r0.json.gz", events)], SummaryOptions(decode_pattern="^step_"))
    r = s["ranks"][0]
    assert [st["kernel_ms"] for st in r["steps"]] == [0.002, 0.001]
    assert r["cuda_ms_per_step"] == pytest.approx(0.003 / 2)


def test_step_wall_is_still_the_step_span_duration(write_trace, ev):
    s = summarize([write_trace("r0.json.gz", _rank_events(ev, [10.0, 12.0]))])
    assert s["ranks"][0]["step_wall_ms_per_step"] == pytest.approx(0.1)


def test_a_long_trace_shows_its_first_steps_its_outliers_and_its_last_in_markdown(write_trace, ev):
    from vllm_ops.traces import to_markdown

    # 60 decode steps 100 µs apart, one kernel each; step 30's kernel makes its window 5x the others
    events = []
    for k in range(60):
        base = 1000.0 + 100.0 * k if k <= 30 else 1000.0 + 100.0 * k + 400.0
        events += [ev.span(STEP, base, 90.0 if k != 30 else 490.0),
                   ev.kernel(GEMM, base + 1.0, 80.0 if k != 30 else 480.0)]
    s = summarize([write_trace("r0.json.gz", events)])
    text = to_markdown(s)
    rows = [int(line.split("|")[1]) for line in text.splitlines() if line.startswith("| ") and "| decode |" in line]
    assert rows == [*range(20), 30, *range(55, 60)]  # the first 20, the outlier, the last 5
    assert "34 more steps of rank 0 are in the JSON summary" in text
    assert len(s["ranks"][0]["steps"]) == 60  # the JSON keeps every step
