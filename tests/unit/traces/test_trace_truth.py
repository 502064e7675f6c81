"""The summary against independent computations on the real H200 TP=2 pair (and the B200 trace).

Every expected figure here is computed in this file from the JSON (``json.load``): which
activities a step holds, interval unions, the correlation walk from an activity to its launch
call, the matching of collectives across ranks. Variants of the real traces (annotations
stripped or renamed, a host stall injected) are derived at test time under ``tmp_path``; the
files in tests/data/traces are never touched.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
import statistics
from pathlib import Path

import pytest

from vllm_ops.traces import Classifier, SummaryOptions, summarize
from vllm_ops.traces.annotations import parse_step_name

TRACES = Path(__file__).resolve().parents[3] / "tests" / "data" / "traces"
H200 = TRACES / "h200_tp2_decode"
B200 = TRACES / "public" / "tracelens_b200_vllm_tp8_rank0.json.gz"
RANKS = (0, 1)
STEP = "decode_step"
STEPS = 12
GPU = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH = re.compile(r"(?:cuda|cu|hip)\w*(?:Launch|Memcpy|Memset)")  # host calls that queue GPU work
DETAILED = "execute_1_context_0(sq0sk0sqsq0sqsk0)_generation_1(sq1sk300sqsq1sqsk300)"
NATIVE = "execute_context_0(0)_generation_1(1)"
STALL_STEP, STALL_US = 6, 50_000.0


def _ms(us):
    return None if us is None else us / 1000.0


def _close(got, want_ms):
    """rel 1e-6 or abs 1e-4 ms (the summary rounds to 0.1 us)."""
    return got == pytest.approx(want_ms, rel=1e-6, abs=1e-4)


def _load(path):
    with gzip.open(path) as fh:
        return json.load(fh)


def _union(intervals):
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def _cpu_spans(events, name=STEP):
    return sorted((e for e in events if e.get("cat") == "user_annotation" and e["name"] == name),
                  key=lambda e: e["ts"])


def _launch_times(events):
    """correlation -> earliest launch call carrying it."""
    out = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and LAUNCH.match(e["name"]):
            c = e.get("args", {}).get("correlation")
            if c is not None:
                out[c] = min(out.get(c, e["ts"]), e["ts"])
    return out


def _by_gpu_annotation(events, name=STEP):
    """[(activities, its CPU annotation)] per GPU annotation span, in time order: an activity is
    the step's when its start lies inside the span; the CPU twin is paired by External id."""
    gpu = sorted((e for e in events if e.get("cat") == "gpu_user_annotation" and e["name"] == name),
                 key=lambda e: e["ts"])
    cpu = {e["args"]["External id"]: e for e in _cpu_spans(events, name)}
    acts = [e for e in events if e.get("cat") in GPU]
    return [([a for a in acts if g["ts"] <= a["ts"] < g["ts"] + g["dur"]], cpu[g["args"]["External id"]])
            for g in gpu]


def _by_correlation(events, name=STEP):
    """[(activities, CPU annotation)] per CPU annotation span: an activity is the step's when the
    launch call with its correlation started inside the span."""
    cpu = _cpu_spans(events, name)
    launch = _launch_times(events)
    out = [([], c) for c in cpu]
    for a in (e for e in events if e.get("cat") in GPU):
        t = launch.get(a.get("args", {}).get("correlation"))
        for acts, c in out:
            if t is not None and c["ts"] <= t < c["ts"] + c["dur"]:
                acts.append(a)
                break
    return out


def _figures(steps):
    """window, busy, idle, start, period (us) of each step, from its activities and CPU annotation:
    start = max(CPU annotation start, previous window end); period = next start - start."""
    rows, prev_end = [], None
    for acts, cpu in steps:
        ws = min(a["ts"] for a in acts)
        we = max(a["ts"] + a["dur"] for a in acts)
        busy = _union([(a["ts"], a["ts"] + a["dur"]) for a in acts])
        start = cpu["ts"] if prev_end is None else max(cpu["ts"], prev_end)
        rows.append({"ws": ws, "we": we, "window": we - ws, "busy": busy, "idle": we - ws - busy, "start": start,
                     "cpu": cpu["dur"], "acts": len(acts)})
        prev_end = we
    for i, row in enumerate(rows):
        row["period"] = rows[i + 1]["start"] - row["start"] if i + 1 < len(rows) else None
        row["host"] = row["period"] - row["window"] if row["period"] is not None else None
    return rows


def _assert_steps_match(summary_steps, hand):
    assert len(summary_steps) == len(hand)
    for k, (got, want) in enumerate(zip(summary_steps, hand, strict=True)):
        for key in ("window", "busy", "idle", "period", "host", "cpu"):
            w = want[key]
            g = got[f"{key}_ms"]
            assert (g is None) if w is None else _close(g, _ms(w)), (k, key, g, w)
        assert got["activities"] == want["acts"], k
        assert _close(got["start_ms"], _ms(want["start"] - hand[0]["start"])), k


def _write(directory: Path, rank: int, doc: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"tp2_rank{rank}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), 1))


@pytest.fixture(scope="module")
def docs():
    return {r: _load(H200 / f"tp2_rank{r}.pt.trace.json.gz") for r in RANKS}


@pytest.fixture(scope="module")
def hand(docs):
    """The per-step figures of each rank, from the GPU annotations."""
    return {r: _figures(_by_gpu_annotation(docs[r]["traceEvents"])) for r in RANKS}


@pytest.fixture(scope="module")
def real():
    return summarize([str(H200)], SummaryOptions(decode_pattern="^decode_step$"))


# ------------------------------------------------------------------ a. per-step figures

def test_per_step_figures_match_an_independent_computation(real, hand):
    for r in RANKS:
        entry = real["ranks"][r]
        assert entry["rank"] == r and entry["decode_steps"] == STEPS and entry["steps_from"] == "gpu_user_annotation"
        assert len(hand[r]) == STEPS
        _assert_steps_match(entry["steps"], hand[r])


# The H200 kernels by hand, in the documented busy priority: compute categories in the table's
# order (gemm, norm, elementwise, memset), all-reduce last.
H200_CATEGORIES = (("gemm", re.compile(r"^nvjet_|splitKreduce")), ("norm", re.compile(r"layer_norm")),
                   ("elementwise", re.compile(r"vectorized_elementwise")), ("memset", re.compile(r"^Memset")),
                   ("allreduce", re.compile(r"^ncclDevKernel_AllReduce")))


def _category(name):
    (cat,) = [c for c, rx in H200_CATEGORIES if rx.search(name)]
    return cat


def test_busy_time_by_category_gives_overlaps_to_compute_first(real, docs):
    # each instant of busy time goes to the first category, in priority order, running then:
    # part k = |union of categories <= k| - |union of categories < k|
    order = [c for c, _ in H200_CATEGORIES]
    for r in RANKS:
        for got, (acts, _cpu) in zip(real["ranks"][r]["steps"], _by_gpu_annotation(docs[r]["traceEvents"]),
                                     strict=True):
            cats = [_category(a["name"]) for a in acts]
            prev, want, kernel = 0.0, {}, {}
            for k, c in enumerate(order):
                cum = _union([(a["ts"], a["ts"] + a["dur"]) for a, ca in zip(acts, cats, strict=True)
                              if order.index(ca) <= k])
                want[c], prev = cum - prev, cum
                kernel[c] = sum(a["dur"] for a, ca in zip(acts, cats, strict=True) if ca == c)
            assert set(got["busy_ms_by_category"]) == {c for c, v in want.items() if v > 0}
            for c, v in got["busy_ms_by_category"].items():
                assert _close(v, _ms(want[c])), (r, got["index"], c)
            for c, v in got["kernel_ms_by_category"].items():
                assert _close(v, _ms(kernel[c])), (r, got["index"], c)
            assert _close(got["allreduce_kernel_ms"], _ms(kernel["allreduce"]))


def _host_wait(acts, launch):
    """The idle gaps of the union before an activity whose launch call started after the GPU ran dry."""
    total, end = 0.0, None
    for a in sorted(acts, key=lambda a: a["ts"]):
        if end is not None and a["ts"] > end and launch[a["args"]["correlation"]] > end:
            total += a["ts"] - end
        end = a["ts"] + a["dur"] if end is None else max(end, a["ts"] + a["dur"])
    return total


def test_host_wait_and_whole_trace_timeline(real, docs):
    for r in RANKS:
        events = docs[r]["traceEvents"]
        launch = _launch_times(events)
        entry = real["ranks"][r]
        for got, (acts, _cpu) in zip(entry["steps"], _by_gpu_annotation(events), strict=True):
            assert _close(got["idle_host_ms"], _ms(_host_wait(acts, launch)))
        spans = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in GPU]
        span, busy = max(b for _, b in spans) - min(a for a, _ in spans), _union(spans)
        tl = entry["timeline"]
        assert _close(tl["span_ms"], _ms(span)) and _close(tl["busy_ms"], _ms(busy))
        assert _close(tl["idle_ms"], _ms(span - busy))


# ------------------------------------------------------------------ b. no GPU annotations

@pytest.fixture(scope="module")
def stripped(docs, tmp_path_factory):
    d = tmp_path_factory.mktemp("stripped")
    out = {}
    for r in RANKS:
        doc = dict(docs[r], traceEvents=[e for e in docs[r]["traceEvents"] if e.get("cat") != "gpu_user_annotation"])
        out[r] = doc
        _write(d, r, doc)
    return out, summarize([str(d)], SummaryOptions(decode_pattern="^decode_step$"))


def test_without_gpu_annotations_the_steps_come_from_the_cpu_ones_by_correlation(stripped, hand):
    docs_, s = stripped
    for r in RANKS:
        walk = _figures(_by_correlation(docs_[r]["traceEvents"]))
        entry = s["ranks"][r]
        assert entry["decode_steps"] == STEPS and entry["steps_from"] == "user_annotation"
        _assert_steps_match(entry["steps"], walk)
        # the same 12 steps, with the same activities, as the GPU annotations gave
        for got, want in zip(entry["steps"], hand[r], strict=True):
            assert got["activities"] == want["acts"]
            assert _close(got["window_ms"], _ms(want["window"])) and _close(got["busy_ms"], _ms(want["busy"]))
    assert not any("could not be attributed" in w for w in s["warnings"])


# ------------------------------------------------------------------ c. vLLM's step names

def _renamed(doc, name):
    events = [dict(e, name=name) if e.get("cat") in ("user_annotation", "gpu_user_annotation") and e["name"] == STEP
              else e for e in doc["traceEvents"]]
    return dict(doc, traceEvents=events)


@pytest.mark.parametrize("names", [(DETAILED, DETAILED), (DETAILED, NATIVE)], ids=["detailed", "detailed+native"])
def test_vllm_step_names_are_decode_steps_without_a_pattern(docs, hand, tmp_path, names):
    for r in RANKS:
        _write(tmp_path, r, _renamed(docs[r], names[r]))
    s = summarize([str(tmp_path)])
    assert not any("no decode steps" in w for w in s["warnings"])
    for r in RANKS:
        entry = s["ranks"][r]
        assert entry["decode_steps"] == STEPS and entry["steps_from"] == "gpu_user_annotation"
        # read from the names: no context request, one generation request; T=1 (detailed), or 0 + 1 tokens
        family = "vllm_detailed" if names[r] == DETAILED else "vllm"
        assert {(st["name"], st["phase"], st["family"], st["batch_size"], st["context_requests"],
                 st["generation_requests"], st["scheduled_tokens"]) for st in entry["steps"]} == {
            (names[r], "decode", family, 1, 0, 1, 1)}
        assert entry["by_batch_size"]["1"]["steps"] == STEPS
        for got, want in zip(entry["steps"], hand[r], strict=True):
            assert _close(got["window_ms"], _ms(want["window"])) and _close(got["busy_ms"], _ms(want["busy"]))


@pytest.mark.parametrize(("name", "family", "phase", "context", "generation", "tokens"), [
    (DETAILED, "vllm_detailed", "decode", 0, 1, 1),  # T = 1
    (NATIVE, "vllm", "decode", 0, 1, 1),  # 0 + 1 tokens
    ("execute_context_1(128)_generation_0(0)", "vllm", "prefill", 1, 0, 128),  # 128 + 0 tokens
    ("execute_2_context_1(sq1sk1sqsq1sqsk1)_generation_1(sq1sk9sqsq1sqsk9)", "vllm_detailed", "mixed", 1, 1, 2),
    ("execute_context_1(888_788544)_generation_0(0)", "vllm", "prefill", 1, 0, 888),  # the group's first number
    ("execute_context_0(0)_generation_0(0)", "vllm", "empty", 0, 0, 0),
])
def test_parse_step_name(name, family, phase, context, generation, tokens):
    p = parse_step_name(name)
    assert (p.family, p.phase, p.context_requests, p.generation_requests, p.scheduled_tokens, p.batch_size) == (
        family, phase, context, generation, tokens, context + generation)


@pytest.mark.parametrize("name", ["decode_step", "execute_model", "execute_context_0(0)_generation_1(1)x",
                                  "ProfilerStep"])
def test_other_names_are_not_vllm_steps(name):
    assert parse_step_name(name) is None


# ------------------------------------------------------------------ d. a host stall

@pytest.fixture(scope="module")
def stalled(docs, hand, tmp_path_factory):
    """Step 6's GPU work arrives 50 ms late on both ranks. Every event that starts at or after T
    moves by +50 ms, except step 6's CPU annotation, which keeps its start and grows by 50 ms.
    T is the CPU start of step 6 where the host is behind its GPU (rank 0: exactly a host stall
    before the step's first kernel, its CPU span now starting 50 ms before that kernel); where the
    host runs ahead (rank 1: its CPU annotation of step 6 starts 17 ms before the GPU has finished
    step 5), T is the end of step 5's GPU window, so that no activity of step 5 leaves its span."""
    d = tmp_path_factory.mktemp("stalled")
    out = {}
    for r in RANKS:
        steps = _by_gpu_annotation(docs[r]["traceEvents"])
        cpu6 = steps[STALL_STEP][1]
        cut = max(cpu6["ts"], hand[r][STALL_STEP - 1]["we"])
        events = []
        for e in copy.deepcopy(docs[r]["traceEvents"]):
            if e.get("cat") == "user_annotation" and e.get("name") == STEP and \
                    e["args"]["External id"] == cpu6["args"]["External id"]:
                e["dur"] += STALL_US
            elif isinstance(e.get("ts"), (int, float)) and e["ts"] >= cut:
                e["ts"] += STALL_US
            events.append(e)
        out[r] = dict(docs[r], traceEvents=events)
        _write(d, r, out[r])
    return out, summarize([str(d)], SummaryOptions(decode_pattern="^decode_step$"))


def test_a_host_stall_lands_in_its_step_period_and_not_its_window(stalled, real, hand):
    docs_, s = stalled
    for r in RANKS:
        mine = _figures(_by_gpu_annotation(docs_[r]["traceEvents"]))
        _assert_steps_match(s["ranks"][r]["steps"], mine)
        # on rank 0 the CPU span of step 6 now starts 50 ms before its first kernel
        if r == 0:
            assert mine[STALL_STEP]["ws"] - mine[STALL_STEP]["start"] > STALL_US
        got, before = s["ranks"][r]["steps"][STALL_STEP], real["ranks"][r]["steps"][STALL_STEP]
        assert got["period_ms"] == pytest.approx(before["period_ms"] + 50.0, abs=1e-3)
        assert got["host_ms"] == pytest.approx(before["host_ms"] + 50.0, abs=1e-3)
        assert got["window_ms"] == pytest.approx(before["window_ms"], abs=1e-4)
        assert got["busy_ms"] == pytest.approx(before["busy_ms"], abs=1e-4)
        for k in range(STEPS):  # every other step is as it was
            if k != STALL_STEP:
                assert s["ranks"][r]["steps"][k]["period_ms"] == real["ranks"][r]["steps"][k]["period_ms"]
        # the rule: step 6 lies beyond median + 50% of the step durations (the period; the last step's window)
        durations = [m["period"] if m["period"] is not None else m["window"] for m in mine]
        assert mine[STALL_STEP]["period"] > 1.5 * statistics.median(durations)
        assert s["ranks"][r]["steps"][STALL_STEP]["steady"] is False
    left = {item["index"]: item["reason"] for item in s["steady_state"]["left_out"]}
    assert sorted(left) == [0, STALL_STEP]
    assert "rank 0 lasts" in left[STALL_STEP] and "rank 1 lasts" in left[STALL_STEP]
    assert any(w.startswith(f"steady state: decode step {STALL_STEP} left out of the steady figures: ")
               for w in s["warnings"])
    assert not any(w.startswith("all-reduce group") for w in s["warnings"])  # the calls still match


# ------------------------------------------------------------------ e. the done-when of the issue

def _allreduce_calls(events):
    """(ts, dur, step, nelems, dtype) of the all-reduce kernels inside the decode steps, in start order."""
    gpu = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                 if e.get("cat") == "gpu_user_annotation" and e["name"] == STEP)
    out = []
    for e in events:
        if e.get("cat") == "kernel" and "AllReduce" in e["name"]:
            for k, (a, b) in enumerate(gpu):
                if a <= e["ts"] < b:
                    out.append((e["ts"], e["dur"], k, e["args"]["In msg nelems"], e["args"]["dtype"]))
    return sorted(out)


@pytest.fixture(scope="module")
def collectives_by_hand(docs):
    calls = {r: _allreduce_calls(docs[r]["traceEvents"]) for r in RANKS}
    assert len(calls[0]) == len(calls[1]) == STEPS * 61
    pairs = list(zip(calls[0], calls[1], strict=True))  # the k-th call of each rank is one collective
    assert all(a[2] == b[2] for a, b in pairs)
    return pairs


def test_the_done_when_of_the_issue(real, hand, collectives_by_hand):
    s = real
    pairs = collectives_by_hand
    steady = [(a, b) for a, b in pairs if a[2] != 0]  # steps 1..11
    # the steady state leaves out exactly step 0
    assert [item["index"] for item in s["steady_state"]["left_out"]] == [0]
    # the verdict
    v = s["verdict"]
    # Issue 20 corrected the rank: host-bound, but on rank 1, whose host needs the most per step
    # (tests/unit/traces/test_trace_pace.py computes that from the CPU annotations).
    assert (v["kind"], v["rank"]) == ("host-bound", 1)
    # rank 0's GPU idles about half of its steady period (over the steady steps with a period,
    # 1..10: GPU idle = 1 - busy / period), as the evidence says
    with_period = [h for h in hand[0][1:] if h["period"] is not None]
    idle_share = 1 - sum(h["busy"] for h in with_period) / sum(h["period"] for h in with_period)
    assert idle_share >= 0.3
    assert v["evidence"]["gpu_idle_share_by_rank"]["0"] == pytest.approx(idle_share, abs=1e-3)
    # the straggler: the last arriver of a collective waited least (the shorter duration)
    last0 = sum(1 for a, b in steady if a[1] <= b[1]) / len(steady)
    st = s["collectives"]["straggler"]
    assert (st["rank"], st["named"]) == (0, True)
    assert st["last_arrival_share"] == pytest.approx(last0, abs=1e-4)
    assert s["collectives"]["by_rank"]["0"]["last_arrival_share"] == pytest.approx(last0, abs=1e-4)
    # rank 1's all-reduce kernel time per step: steady mean vs the all-step mean. The steady figures
    # average the steady steps that have a period, 1..10 (issue 30: the last step, 11, has none, and
    # the decomposition beside the table cannot hold it; over 1..11 the mean was 7.53 ms)
    averaged = range(1, STEPS - 1)
    steady_ar = [sum(b[1] for _, b in steady if b[2] == k) / 1000 for k in averaged]
    all_ar = sum(b[1] for _, b in pairs) / STEPS / 1000
    r1 = s["ranks"][1]
    assert r1["steady_stats"]["allreduce_kernel_ms"]["mean"] == pytest.approx(statistics.fmean(steady_ar), abs=1e-4)
    assert statistics.fmean(steady_ar) == pytest.approx(8.24, abs=0.01)
    # each rank's waiting per steady step, one figure wherever the page shows it (issue 30: the
    # decomposition said 0.870 / 7.780 ms, the steady table and the collectives 1.781 / 7.072)
    for r in RANKS:
        wait = statistics.fmean(sum(p[r][1] - min(p[0][1], p[1][1]) for p in steady if p[0][2] == k) / 1000
                                for k in averaged)
        e = s["ranks"][r]
        assert e["decomposition"]["allreduce_wait_ms"] == pytest.approx(wait, abs=1e-4)
        assert e["steady_stats"]["allreduce_wait_ms"]["mean"] == pytest.approx(wait, abs=1e-4)
        assert s["collectives"]["by_rank"][str(r)]["wait_ms_per_step"] == pytest.approx(wait, abs=1e-4)
        assert v["evidence"]["allreduce_wait_ms_by_rank"][str(r)] == pytest.approx(wait, abs=1e-4)
    # the other rank's waiting is the other rank's, and the verdict's rank's own is beside it
    assert (v["evidence"]["other_wait_rank"], v["evidence"]["other_wait_ms"]) == (
        0, v["evidence"]["allreduce_wait_ms_by_rank"]["0"])
    assert "max_wait_rank" not in v["evidence"]
    assert r1["allreduce_ms_per_step"] == pytest.approx(all_ar, abs=1e-4) == pytest.approx(30.1, abs=0.05)
    # transfer per call: the minimum over the ranks; mean over the steady steps, and the bus bandwidth
    transfer = [min(a[1], b[1]) for a, b in steady]
    (g,) = s["collectives"]["groups"]
    assert g["calls"] == len(steady) and g["size"] == 2
    assert g["transfer_us_mean"] == pytest.approx(statistics.fmean(transfer), abs=1e-3)
    assert g["transfer_ms_per_step"] == pytest.approx(sum(transfer) / (STEPS - 1) / 1000, abs=1e-4)
    nbytes = {a[3] * 2 for a, _ in pairs}  # BFloat16
    assert {a[4] for a, _ in pairs} == {"BFloat16"} and nbytes == {14336}
    assert g["message_bytes"]["median"] == 14336
    n = 2
    busbw = [14336 / (t * 1e-6) / 1e9 * 2 * (n - 1) / n for t in transfer]
    # the figure is the median over the calls, as collectives.py documents (14336 B over the
    # mean transfer would give 1.906 GB/s)
    assert g["busbw_gbps"] == pytest.approx(statistics.median(busbw), abs=1e-3)
    assert g["busbw_gbps"] == pytest.approx(1.9, abs=0.05)
    # the transfer per decode step over ALL steps (skew-corrected): 0.474 ms
    every = sum(min(a[1], b[1]) for a, b in pairs) / STEPS / 1000
    assert s["allreduce"]["ms_per_step_skew_corrected"] == pytest.approx(every, abs=1e-4)
    assert every == pytest.approx(0.474, abs=5e-4)
    # each rank's waiting, all steps: its kernel time above the transfer
    for r in RANKS:
        wait = sum(p[r][1] - min(p[0][1], p[1][1]) for p in pairs) / STEPS / 1000
        assert s["allreduce"]["wait_ms_per_step_by_rank"][str(r)] == pytest.approx(wait, abs=1e-4)


def test_the_done_when_in_the_cli_markdown(collectives_by_hand, hand, capsys):
    """What an engineer reads: `vllm-trace-summary DIR --decode-pattern ... --format markdown`."""
    from vllm_ops.traces.cli import main

    assert main([str(H200), "--decode-pattern", "^decode_step$", "--format", "markdown"]) == 0
    text = capsys.readouterr().out
    pairs = collectives_by_hand
    steady = [(a, b) for a, b in pairs if a[2] != 0]
    with_period = [h for h in hand[0][1:] if h["period"] is not None]
    idle_share = 1 - sum(h["busy"] for h in with_period) / sum(h["period"] for h in with_period)
    last0 = sum(1 for a, b in steady if a[1] <= b[1]) / len(steady)
    transfer = [min(a[1], b[1]) for a, b in steady]
    busbw = statistics.median(14336 / (t * 1e-6) / 1e9 for t in transfer)
    all_ar = sum(b[1] for _, b in pairs) / STEPS / 1000
    steady_ar = statistics.fmean(sum(b[1] for _, b in steady if b[2] == k) / 1000 for k in range(1, STEPS - 1))
    waits = {r: statistics.fmean(sum(p[r][1] - min(p[0][1], p[1][1]) for p in steady if p[0][2] == k) / 1000
                                 for k in range(1, STEPS - 1)) for r in RANKS}
    assert "**host-bound on rank 1, not steady: decode step " in text  # issue 20: rank 1, not rank 0
    row = next(line for line in text.splitlines() if line.startswith("| gpu_idle_share_by_rank |"))
    assert f"rank 0: {round(idle_share, 4)}" in row
    shown = re.search(r"Straggler: rank 0, last to arrive at ([\d.]+)% of the collectives\.", text)
    assert float(shown.group(1)) == pytest.approx(100 * last0, abs=0.051)  # one decimal of a rounded share
    assert "- step 0: first profiled step" in text and "rank 1 lasts 289.77 ms" in text
    # rank 1's all-reduce kernel time per step: every step, then the steady mean
    row = next(line for line in text.splitlines() if line.startswith("| all-reduce kernel time (includes waiting) |"))
    assert f"{all_ar:.3f}, {steady_ar:.3f} (" in row.split("|")[3]
    # the steady waiting, the same in the decomposition, the steady-state table and the collectives
    lines = text.splitlines()
    decomposed = next(line for line in lines if line.startswith("| all-reduce waiting for other ranks |"))
    table = next(line for line in lines if line.startswith("| all-reduce waiting |"))
    for r in RANKS:
        assert decomposed.split("|")[2 + r].strip() == f"{waits[r]:.3f}"
        assert table.split("|")[2 + r].split(",")[1].split("(")[0].strip() == f"{waits[r]:.3f}"
    assert f"Waiting per steady step: rank 0 {waits[0]:.3f} ms, rank 1 {waits[1]:.3f} ms." in text
    # the collective table: bytes, transfer (median, p90) and bus bandwidth
    coll = next(line for line in text.splitlines() if line.startswith("| 0 | 0, 1 | 61.0 | 14336 |"))
    assert f"| {statistics.median(transfer):.3f}, " in coll and f"| {busbw:.3f} |" in coll


# ------------------------------------------------------------------ f. the decomposition adds up

def test_the_decomposition_adds_up_to_the_period(real, hand):
    for r in RANKS:
        d = real["ranks"][r]["decomposition"]
        parts = (sum(d["compute_ms"].values()) + d["allreduce_transfer_ms"] + d["allreduce_wait_ms"]
                 + d["idle_in_window_ms"] + d["host_ms"])
        assert parts == pytest.approx(d["period_ms"], abs=1e-3)
        # over the steady steps that have a period: 1..10
        rows = [h for h in hand[r][1:] if h["period"] is not None]
        assert d["steps"] == len(rows) == STEPS - 2
        assert d["period_ms"] == pytest.approx(statistics.fmean(_ms(h["period"]) for h in rows), abs=1e-4)
        assert d["busy_ms"] == pytest.approx(statistics.fmean(_ms(h["busy"]) for h in rows), abs=1e-4)
        assert d["idle_in_window_ms"] == pytest.approx(statistics.fmean(_ms(h["idle"]) for h in rows), abs=1e-4)
        assert d["host_ms"] == pytest.approx(statistics.fmean(_ms(h["host"]) for h in rows), abs=1e-4)


# ------------------------------------------------------------------ g. kernel names outside CUDA

@pytest.mark.parametrize(("name", "category"), [
    ("Cijk_Ailk_Bljk_BBS_BH_MT128x128x64_MI16x16x16x1", "gemm"),  # hipBLASLt / Tensile
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x256x128x1_swiglu", "moe_gemm"),  # Triton MoE
])
def test_rocm_and_triton_kernel_names(name, category):
    assert Classifier().classify(name, "kernel") == category


# ------------------------------------------------------------------ h. the public B200 vLLM trace

def test_b200_prefill_step_from_its_vllm_name():
    events = _load(B200)["traceEvents"]
    (name,) = {e["name"] for e in events if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("execute_")}
    ((acts, _cpu),) = _by_gpu_annotation(events, name)
    m = re.fullmatch(r"execute_context_(\d+)\((\d+)[\d_]*\)_generation_(\d+)\((\d+)[\d_]*\)", name)
    context, ctx_tokens, generation, gen_tokens = (int(x) for x in m.groups())
    s = summarize([str(B200)])
    (step,) = s["ranks"][0]["steps"]
    assert step["name"] == name and step["phase"] == "prefill"
    assert step["batch_size"] == context + generation == 1
    assert step["scheduled_tokens"] == ctx_tokens + gen_tokens == 888
    assert s["ranks"][0]["decode_steps"] == 0 and [p["prefill_steps"] for p in s["prefill"]] == [1]
    assert step["activities"] == len(acts)
    ws, we = min(a["ts"] for a in acts), max(a["ts"] + a["dur"] for a in acts)
    assert _close(step["window_ms"], _ms(we - ws))
    assert _close(step["busy_ms"], _ms(_union([(a["ts"], a["ts"] + a["dur"]) for a in acts])))
