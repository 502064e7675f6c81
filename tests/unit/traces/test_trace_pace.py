"""Who limits the run, whether the capture is steady, and what one rank alone can say (issue 20,
points 1 and 2), on the real H200 TP=2 pair.

Every expected figure is computed here from the events (``json.load``): each rank's CPU step
annotations and their GPU twins (by External id, unique in these traces), the host calls that
waited for the GPU, the lead of the host over its GPU step by step and its trend, the
collectives matched by call order. The files in tests/data/traces are never touched.
"""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
from itertools import pairwise
from pathlib import Path

import pytest

from vllm_ops.traces import SummaryOptions, summarize
from vllm_ops.traces.render import to_markdown, verdict_sentence
from vllm_ops.traces.verdict import advise

H200 = Path(__file__).resolve().parents[3] / "tests" / "data" / "traces" / "h200_tp2_decode"
RANKS = (0, 1)
STEP = "decode_step"
GPU = ("kernel", "gpu_memcpy", "gpu_memset")
STEADY = range(1, 12)  # step 0 is left out (test_trace_truth checks the rule)


def _load(rank):
    with gzip.open(H200 / f"tp2_rank{rank}.pt.trace.json.gz") as fh:
        return json.load(fh)["traceEvents"]


def _union(intervals):
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total, end = total + b - a, b
        elif b > end:
            total, end = total + b - end, b
    return total


def _waited(events):
    """(start, end) of the host calls that waited for the GPU: synchronizing calls, copies that are
    not Async, and launch calls of 1 ms or more (a full launch queue)."""
    out = []
    for e in events:
        if e.get("cat") not in ("cuda_runtime", "cuda_driver"):
            continue
        n = e["name"]
        if "Synchronize" in n or ("Memcpy" in n and "Async" not in n) or ("Launch" in n and e["dur"] >= 1000.0):
            out.append((e["ts"], e["ts"] + e["dur"]))
    return out


def _overlap(waits, a, b):
    return _union([(max(x, a), min(y, b)) for x, y in waits if y > a and x < b])


def _by_hand(events):
    """Per step (time order): CPU start and end, window start, the activities, host step and gap (µs)."""
    cpu = {e["args"]["External id"]: e for e in events if e.get("cat") == "user_annotation" and e["name"] == STEP}
    gpu = sorted((e for e in events if e.get("cat") == "gpu_user_annotation" and e["name"] == STEP),
                 key=lambda e: e["ts"])
    assert len({e["args"]["External id"] for e in gpu}) == len(gpu) == len(cpu)  # unique ids: pairing by them
    acts = [e for e in events if e.get("cat") in GPU]
    waits = _waited(events)
    rows = []
    for g in gpu:
        c = cpu[g["args"]["External id"]]
        inside = [a for a in acts if g["ts"] <= a["ts"] < g["ts"] + g["dur"]]
        c0, c1 = c["ts"], c["ts"] + c["dur"]
        rows.append({"c0": c0, "c1": c1, "ws": min(a["ts"] for a in inside), "acts": inside,
                     "host_step": c["dur"] - _overlap(waits, c0, c1)})
    for i, row in enumerate(rows):
        row["lead"] = row["ws"] - row["c0"]
        nxt = rows[i + 1]["c0"] if i + 1 < len(rows) else None
        row["gap"] = nxt - row["c1"] - _overlap(waits, row["c1"], nxt) if nxt is not None else None
    return rows


def _theil_sen(points):
    return statistics.median((y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(points) for x2, y2 in points[i + 1:])


@pytest.fixture(scope="module")
def events():
    return {r: _load(r) for r in RANKS}


@pytest.fixture(scope="module")
def hand(events):
    return {r: _by_hand(events[r]) for r in RANKS}


@pytest.fixture(scope="module")
def pair():
    return summarize([str(H200)], SummaryOptions(decode_pattern="^decode"))


def _host_per_step(rows):
    steady = [rows[k] for k in STEADY]
    return (statistics.median(r["host_step"] for r in steady)
            + statistics.median(r["gap"] for r in steady if r["gap"] is not None)) / 1000.0


def test_each_rank_s_host_time_per_step_from_its_cpu_step_annotations(pair, hand):
    host = {r: _host_per_step(hand[r]) for r in RANKS}
    # what the notes read from the traces: rank 0's host issues a step in about 15 ms, rank 1's in about 19.4
    assert host[0] == pytest.approx(15.0, abs=0.25) and host[1] == pytest.approx(19.4, abs=0.15)
    assert host[1] / host[0] == pytest.approx(1.3, abs=0.03)
    for r in RANKS:
        p = pair["pace"]["ranks"][str(r)]
        assert p["host_ms_per_step"] == pytest.approx(host[r], abs=1e-3)
        assert p["steps"] == len(STEADY)
        for got, want in zip(pair["ranks"][r]["steps"], hand[r], strict=True):
            assert got["lead_ms"] == pytest.approx(want["lead"] / 1000.0, abs=1e-4)
            assert got["host_step_ms"] == pytest.approx(want["host_step"] / 1000.0, abs=1e-4)
    # rank 1's step 2: its host waited 225 ms in one launch call (the launch queue was full)
    blocked = pair["ranks"][1]["steps"][2]["host_blocked_ms"]
    assert blocked > 200 and pair["ranks"][1]["steps"][2]["host_step_ms"] < 25


def test_rank_1_s_lead_shrinks_every_step_and_is_gone_by_step_10(pair, hand):
    lead = [r["lead"] / 1000.0 for r in hand[1]]
    assert lead[3] == pytest.approx(28.0, abs=0.5)
    assert all(b < a for a, b in pairwise(lead[4:11]))  # shrinking from step 4 on
    assert lead[10] < 1.0 and lead[11] < 1.0
    # its trend over the steady steps: the median of the slopes between every two steps
    change = _theil_sen([(k, lead[k]) for k in STEADY]) * (STEADY[-1] - STEADY[0])
    p1, p0 = pair["pace"]["ranks"]["1"], pair["pace"]["ranks"]["0"]
    assert p1["lead_change_ms"] == pytest.approx(change, abs=1e-3) and change < -0.5 * p1["period_ms"]
    assert p1["steady"] is False
    lead0 = [r["lead"] / 1000.0 for r in hand[0]]
    change0 = _theil_sen([(k, lead0[k]) for k in STEADY]) * (STEADY[-1] - STEADY[0])
    assert p0["lead_change_ms"] == pytest.approx(change0, abs=1e-3) and abs(change0) < 0.5 * p0["period_ms"]
    assert p0["steady"] is True


def _collectives(events):
    """Per rank, the all-reduce calls inside the GPU step spans in start order: (dur, step)."""
    out = {}
    for r in RANKS:
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events[r]
                       if e.get("cat") == "gpu_user_annotation" and e["name"] == STEP)
        calls = []
        for e in events[r]:
            if e.get("cat") == "kernel" and "AllReduce" in e["name"]:
                k = next(i for i, (a, b) in enumerate(spans) if a <= e["ts"] < b)
                calls.append((e["ts"], e["dur"], k))
        out[r] = [(d, k) for _, d, k in sorted(calls)]
    return out


def test_each_rank_s_gpu_time_per_step_is_its_own_work(pair, hand, events):
    """GPU work = the union of the non-all-reduce activities, plus the exposed all-reduce time
    (busy when only all-reduce runs) in the proportion of the step's transfer to its kernel time."""
    calls = _collectives(events)
    pairs = list(zip(calls[0], calls[1], strict=True))
    for r in RANKS:
        work = []
        for k in STEADY:
            acts = hand[r][k]["acts"]
            busy = _union([(a["ts"], a["ts"] + a["dur"]) for a in acts])
            compute = _union([(a["ts"], a["ts"] + a["dur"]) for a in acts if "AllReduce" not in a["name"]])
            t = sum(min(a[0], b[0]) for a, b in pairs if a[1] == k)
            kernel = sum(p[r][0] for p in pairs if p[r][1] == k)
            work.append(compute + (busy - compute) * t / kernel)
        p = pair["pace"]["ranks"][str(r)]
        assert p["gpu_ms_per_step"] == pytest.approx(statistics.median(work) / 1000.0, abs=1e-3)
        assert p["gpu_ms_per_step"] < p["host_ms_per_step"] / 2  # the hosts, not the GPUs, set the pace


def test_the_pair_names_rank_1_not_steady_drifting_towards_its_host_time(pair, hand):
    host1 = _host_per_step(hand[1])
    v = pair["verdict"]
    assert (v["kind"], v["rank"]) == ("host-bound", 1)
    ev = v["evidence"]
    assert ev["steady"] is False and ev["drifting_rank"] == 1 and ev["bound"] == "host"
    assert ev["predicted_period_ms"] == pytest.approx(host1, abs=1e-3) == pytest.approx(19.4, abs=0.15)
    assert pair["pace"]["limit"] == 1 and pair["pace"]["predicted_period_ms"] == ev["predicted_period_ms"]
    # the last arriver is still rank 0: that is not who limits the run
    assert pair["collectives"]["straggler"]["rank"] == 0
    line = verdict_sentence(pair)
    assert line.startswith("host-bound on rank 1, not steady: decode step ")
    assert f"drifting to {host1:.2f} ms (rank 1's host; rank 0's {_host_per_step(hand[0]):.2f} ms)" in line
    # both hosts are far slower than their GPUs (each GPU's work, under half its host's time: the
    # test above): pinning rank 1 alone reaches rank 0's host pace at best, so graphs come first
    host0 = _host_per_step(hand[0])
    assert v["next"][0].startswith("turn CUDA graphs on first, as every rank's host is slower than its GPU needs")
    assert f"rank 0 {host0:.1f} against " in v["next"][0] and f"rank 1 {host1:.1f} against " in v["next"][0]
    assert v["next"][1].startswith("then find what slows rank 1's host")
    assert v["next"][1].endswith(f"that alone brings the pace to the other ranks' hosts, {host0:.1f} ms a step at best")
    assert [t["test"] for t in v["next_tests"]] == ["cuda-graphs", None]
    text = to_markdown(pair)
    assert "The capture is not steady: rank 1's lead over its GPU shrank" in text
    assert f"a longer run drifts towards {host1:.3f} ms a step" in text


def test_the_lead_s_ends_and_the_host_waits_between_them_are_said_beside_its_trend(pair, hand, events):
    """Rank 1's lead falls 265.6 ms from its first steady step to its last, 225 ms of it in one
    launch call that waited (step 2); the trend, which that one step does not move, is the drift."""
    waits = _waited(events[1])
    first, last = hand[1][STEADY[0]]["lead"] / 1000.0, hand[1][STEADY[-1]]["lead"] / 1000.0
    waited = sum(_overlap(waits, hand[1][k]["c0"], hand[1][k]["c1"]) for k in STEADY[:-1]) / 1000.0
    assert waited == pytest.approx(225.0, abs=1.0)
    p1 = pair["pace"]["ranks"]["1"]
    assert p1["lead_first_ms"] == pytest.approx(first, abs=1e-3) and p1["lead_last_ms"] == pytest.approx(last, abs=1e-3)
    assert p1["lead_waited_ms"] == pytest.approx(waited, abs=1e-3)
    # the fall less the waits is what the host's own slowness took: about the trend, not the 265 ms
    assert first - last - waited == pytest.approx(-p1["lead_change_ms"], rel=0.25)
    text = to_markdown(pair)
    assert (f"shrank by {-p1['lead_change_ms']:.3f} ms on its trend (from {first:.3f} ms at the first step to "
            f"{last:.3f} ms at the last, {waited:.3f} ms of that in its host's waits for its GPU") in text
    assert "| lead first, last | lead trend |" in text


# The steps the steady figures average: the steady ones with a period (step 11, the last, has none)
AVERAGED = range(1, 11)


def _interval(events, rank):
    """One rank alone: each steady call at the rank's shortest call of its size; its kernel time."""
    calls = _collectives({rank: events[rank], 1 - rank: events[rank]})[rank]
    shortest = min(d for d, _ in calls)  # one size here: 7168 bf16 elements
    steady = [(d, k) for d, k in calls if k in AVERAGED]
    return len(steady) * shortest / len(AVERAGED) / 1000.0, sum(d for d, _ in steady) / len(AVERAGED) / 1000.0


@pytest.mark.parametrize("rank", RANKS)
def test_one_rank_alone_gets_no_communication_verdict_but_an_interval(events, hand, rank, tmp_path):
    path = tmp_path / f"tp2_rank{rank}.pt.trace.json.gz"
    shutil.copy(H200 / path.name, path)
    s = summarize([str(path)], SummaryOptions(decode_pattern="^decode"))
    v = s["verdict"]
    assert v["kind"] == "partial" and v["rank"] is None
    other = 1 - rank
    assert s["coverage"]["missing"] == [other] and s["coverage"]["complete"] is False
    assert s["coverage"]["fetch"] == [{"rank": other, "glob": f"tp2_rank{other}.pt.trace.json.gz"}]
    low, high = _interval(events, rank)
    b = s["coverage"]["allreduce_bounds"][str(rank)]
    assert b["low_ms_per_step"] == pytest.approx(low, abs=1e-4)
    assert b["high_ms_per_step"] == pytest.approx(high, abs=1e-4)
    # the true transfer (from both ranks) lies inside the interval
    calls = _collectives(events)
    transfer = sum(min(a[0], b_[0]) for a, b_ in zip(calls[0], calls[1], strict=True) if a[1] in AVERAGED)
    assert low <= transfer / len(AVERAGED) / 1000.0 <= high
    ev = v["evidence"]
    assert ev["allreduce_transfer_ms"] is None and ev["ranks_missing"] == [other]
    assert ev["host_ms_per_step"] == pytest.approx(_host_per_step(hand[rank]), abs=1e-3)
    line = verdict_sentence(s)
    assert line.startswith(f"partial: rank {rank} of 2 only (rank {other} missing), no verdict on the run: ")
    assert f"all-reduce {low:.3g}-{high:.3g} ms a step" in line and f"fetch rank {other}" in line
    assert "communication-bound" not in line and "NCCL" not in " ".join(v["next"])
    assert f"tp2_rank{other}.pt.trace.json.gz" in v["next"][0]
    assert s["warnings"][0].startswith(f"world_size is 2 but 1 of the 2 ranks have no trace here (missing: {other})")


def test_keep_going_with_an_unreadable_rank_is_partial_too(tmp_path):
    shutil.copy(H200 / "tp2_rank0.pt.trace.json.gz", tmp_path / "tp2_rank0.pt.trace.json.gz")
    (tmp_path / "tp2_rank1.pt.trace.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    s = summarize([str(tmp_path)], SummaryOptions(decode_pattern="^decode", keep_going=True))
    assert s["verdict"]["kind"] == "partial"
    assert s["coverage"]["missing"] == [1]
    assert s["coverage"]["unreadable"] == [str(tmp_path / "tp2_rank1.pt.trace.json.gz")]


def _host_bound(hosts, needs):
    return {"kind": "host-bound", "rank": 1,
            "evidence": {"host_ms_per_step_by_rank": hosts, "gpu_need_ms_per_step_by_rank": needs}}


def test_a_slow_host_among_fast_ones_is_found_first():
    """Rank 0's host (6 ms) is within its GPU's need (7.6 ms): rank 1's host is the only one slow,
    and fixing it gives the run its GPUs' pace, so it comes first, graphs after."""
    got = advise(_host_bound({"0": 6.0, "1": 19.5}, {"0": 7.6, "1": 7.8}), {"cuda_graphs": False})
    assert got[0].startswith("find what slows rank 1's host (19.5 ms a step; the other ranks' 6.0 ms at most)")
    assert "at best" not in got[0]
    assert got[1].startswith("turn CUDA graphs on (the steps launched no graph")


def test_with_graphs_on_the_slow_host_s_advice_says_how_far_it_reaches():
    """Graphs already on and every host above its GPU's need: pinning rank 1 reaches rank 0's 15.2
    ms at best, and overlapping the host's work is for every rank."""
    got = advise(_host_bound({"0": 15.2, "1": 19.5}, {"0": 7.6, "1": 7.8}), {"cuda_graphs": True})
    assert got[0].startswith("find what slows rank 1's host (19.5 ms a step; the other ranks' 15.2 ms at most)")
    assert ("that alone brings the pace to the other ranks' hosts, 15.2 ms a step at best: every rank's host is "
            "slower than its GPU needs (ms a step: rank 0 15.2 against 7.6, rank 1 19.5 against 7.8)") in got[0]
    assert got[1] == "then vLLM's --async-scheduling, on every rank"
