"""The stand-in's engine as the watch sees vLLM's (../shared/notes/watch.md, checked on the real CPU
build 0.32.0): an EngineCore stopped with SIGSTOP, or hung (``engine-hangs``), holds every request
where it is while ``/health`` answers 200 and ``/metrics`` answers with the requests still running and
the step counter frozen; SIGCONT lets them finish."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest
import requests

from standin_support import alive, wait_for

STEPS = "vllm:iteration_tokens_total_count"


def sample(server, name):
    text = server.get("/metrics").text
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def start_requests(server, n, tokens):
    """``n`` completions of ``tokens`` each in threads; their answers' status codes in the list returned."""
    codes = []

    def one():
        try:
            codes.append(server.post("/v1/completions", timeout=120, json={
                "model": str(server.sandbox.model), "prompt": "hello", "max_tokens": tokens}).status_code)
        except requests.ConnectionError:  # the server stopped under it
            codes.append(None)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return threads, codes


def test_a_stopped_engine_freezes_progress_while_health_and_metrics_answer(server):
    # 10 ms a step: 300 tokens take about 3 s unhindered
    server.start(tp=2, env={"VLLM_STANDIN_TPOT_MS": "10"})
    server.wait_ready()
    engine, _ = server.tree()
    threads, codes = start_requests(server, 3, 300)
    wait_for(lambda: sample(server, STEPS) >= 30, what="the requests stepping")
    os.kill(engine, signal.SIGSTOP)
    try:
        time.sleep(0.6)  # the steps in flight when it stopped
        frozen = sample(server, STEPS)
        time.sleep(1.5)
        assert server.get("/health").status_code == 200
        assert sample(server, STEPS) == frozen < 300  # 300 steps of the three when done
        assert sample(server, "vllm:num_requests_running") == 3
        assert codes == [] and all(t.is_alive() for t in threads)
    finally:
        os.kill(engine, signal.SIGCONT)
    for t in threads:
        t.join(timeout=60)
    assert codes == [200, 200, 200]
    # one engine step serves the batch: the three requests' 900 tokens in 300 steps of three, a few more
    # where one ran alone for a step at the start or the end
    assert sample(server, "vllm:generation_tokens_total") == 900
    assert 300 <= sample(server, STEPS) < 310 and sample(server, "vllm:num_requests_running") == 0


def test_engine_hangs_stops_the_steps_for_good_with_the_engine_alive(server, sandbox):
    server.start(tp=2, env={"VLLM_STANDIN_TPOT_MS": "10"})
    server.wait_ready()
    engine, workers = server.tree()
    threads, codes = start_requests(server, 2, 400)
    wait_for(lambda: sample(server, STEPS) >= 20, what="the requests stepping")
    sandbox.set_fault("engine-hangs", "once")
    server.wait_log(r"No available shared memory broadcast block found in 60 seconds")
    time.sleep(0.6)
    frozen = sample(server, STEPS)
    time.sleep(1.5)
    assert sample(server, STEPS) == frozen < 800
    assert server.get("/health").status_code == 200 and sample(server, "vllm:num_requests_running") == 2
    assert alive(engine) and all(alive(w) for w in workers) and codes == [] and all(t.is_alive() for t in threads)
    assert not (sandbox.faults / "engine-hangs").exists(), "once: the switch removed when it fired"
    server.proc.send_signal(signal.SIGTERM)  # the hung engine still stops on SIGTERM
    assert server.wait_exit() == 0
    wait_for(lambda: not alive(engine), what="the engine gone")


def test_steps_slower_slows_the_steps_of_the_requests_that_start_while_it_is_set(server, sandbox):
    """The runtime knob the watch's slowdown is tested with: the same server, 1.5 times as long a step."""
    server.start(tp=2, env={"VLLM_STANDIN_TPOT_MS": "10"})
    server.wait_ready()
    itl = ("vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_count")

    def mean_step_ms(requests):
        before = [sample(server, name) for name in itl]
        threads, codes = start_requests(server, requests, 21)
        for t in threads:
            t.join(timeout=60)
        assert codes == [200] * requests
        spent, steps = (sample(server, name) - was for name, was in zip(itl, before, strict=True))
        assert steps == 20 * requests
        return spent / steps * 1000

    assert mean_step_ms(2) == pytest.approx(10.0)
    sandbox.set_fault("steps-slower", "1.5")
    assert mean_step_ms(2) == pytest.approx(15.0)
    sandbox.set_fault("steps-slower", "not a number")
    assert mean_step_ms(1) == pytest.approx(10.0)


def test_a_batch_shares_its_engine_steps_and_each_further_sequence_costs_its_share(server):
    """VLLM_STANDIN_BATCH_COST: what the watch's step model reads (plugins/module_utils/step_model.py)
    from a batched engine: twice the requests at once, twice the batch in as many engine steps, each step
    longer by the batch's cost, not twice as many steps."""
    cost, tpot = 0.5, 10.0
    server.start(tp=2, env={"VLLM_STANDIN_TPOT_MS": str(tpot), "VLLM_STANDIN_BATCH_COST": str(cost)})
    server.wait_ready()
    names = ("vllm:iteration_tokens_total_count", "vllm:generation_tokens_total",
             "vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_count")

    def run(requests, tokens=41):
        before = [sample(server, name) for name in names]
        threads, codes = start_requests(server, requests, tokens)
        for t in threads:
            t.join(timeout=60)
        assert codes == [200] * requests
        steps, generated, spent, gaps = (sample(server, n) - b for n, b in zip(names, before, strict=True))
        assert generated == requests * tokens and gaps == requests * (tokens - 1)
        return steps, generated / steps, spent / gaps * 1000

    steps, batch, step_ms = run(1)
    assert (steps, batch, step_ms) == (41, 1, pytest.approx(tpot))
    steps, batch, step_ms = run(2)
    # the two start together: 41 steps of a batch of two (a step or two alone where one ran ahead)
    assert steps == pytest.approx(41, rel=0.05) and batch == pytest.approx(2, rel=0.05)
    assert step_ms == pytest.approx(tpot * (1 + cost * (2 - 1)), rel=0.05)
