"""The pre-screen: a candidate is kept only when its loops on the floor lie wholly below the unit's;
what is loaded is ordered by what it is expected to recover, at most the budget."""

from __future__ import annotations

import pytest

from vllm_ops.tune import TuneInputError, build_plan, screen
from vllm_ops.tune.prescreen import screen_words

from tune_helpers import COMM_NEXT, NCCL_SERVED, UNIT, floor

LL = "nccl:NCCL_PROTO=LL,NCCL_MAX_NCHANNELS={}"
LL128 = "nccl:NCCL_PROTO=LL128,NCCL_MAX_NCHANNELS={}"
SIMPLE = "nccl:NCCL_PROTO=Simple,NCCL_MAX_NCHANNELS={}"


def _plan(max_loads=2):
    return build_plan(COMM_NEXT, unit_environment=UNIT["environment"], unit_args=[], max_loads=max_loads,
                      served=NCCL_SERVED)


def _floors():
    # the unit: 100 µs at batch 1, loops from 98 to 102
    return {"unit": floor("unit", 100.0), LL.format(8): floor("a", 130.0), LL.format(16): floor("b", 100.5),
            LL128.format(8): floor("c", 65.0), LL128.format(16): floor("d", 50.0), SIMPLE.format(16): floor("e", 90.0),
            SIMPLE.format(8): floor("f", 97.5)}


def test_each_candidate_is_judged_against_the_unit_s_spread():
    result = screen(_plan(), _floors(), transfer_ms=10.0)
    states = {s["name"]: (s["state"], s["ratio"]) for s in result["screened"]}
    assert states == {LL.format(8): ("slower", 1.3), LL.format(16): ("same", 1.005), LL128.format(8): ("kept", 0.65),
                      LL128.format(16): ("kept", 0.5), SIMPLE.format(8): ("within noise", 0.975),
                      SIMPLE.format(16): ("kept", 0.9)}
    assert result["size"] == {"bytes": 14336, "batch_size": 1}
    assert result["counts"] == {"kept": 3, "same": 1, "slower": 1, "within noise": 1, "failed": 0}
    assert screen_words(result) == ("pre-screened 6 on the all-reduce floor at 14336 B (batch 1): kept 3, 1 same, "
                                    "1 slower, 1 within noise")


def test_the_loads_are_the_best_expected_first_within_the_budget():
    result = screen(_plan(), _floors(), transfer_ms=10.0)
    # expected = (1 - ratio) x the trace's 10 ms of all-reduce transfer a step
    assert [(c["name"], c["expected_ms"]) for c in result["load"]] == [(LL128.format(16), 5.0),
                                                                       (LL128.format(8), 3.5)]
    assert [n["name"] for n in result["not_loaded"]] == [SIMPLE.format(16), "ngram"]
    three = screen(_plan(max_loads=3), _floors(), transfer_ms=10.0)
    assert [c["name"] for c in three["load"]] == [LL128.format(16), LL128.format(8), SIMPLE.format(16)]
    # without a trace's transfer nothing is expected: the plan's order
    blind = screen(_plan(max_loads=4), _floors())
    assert [c["name"] for c in blind["load"]] == [LL128.format(8), LL128.format(16), SIMPLE.format(16), "ngram"]


def test_a_failed_run_is_said_and_not_loaded():
    floors = _floors()
    del floors[LL128.format(16)]
    result = screen(_plan(), floors, {LL128.format(16): "rank 1 died (exit code 1)"}, transfer_ms=10.0)
    (failed,) = [s for s in result["screened"] if s["state"] == "failed"]
    assert failed == {"name": LL128.format(16), "state": "failed", "ratio": None, "why": "rank 1 died (exit code 1)"}
    assert [c["name"] for c in result["load"]] == [LL128.format(8), SIMPLE.format(16)]


def test_without_the_unit_s_own_run_nothing_can_be_judged():
    floors = _floors()
    del floors["unit"]
    with pytest.raises(TuneInputError, match="no measurement of the unit's own settings"):
        screen(_plan(), floors)
