"""One completion request in simulated time, and --max-num-seqs' slots.

The model of the timing (prefill, decode steps, speculative decoding) is in ``Generation``'s
docstring and in molecule/resources/standin/README.md."""

import contextlib
import json
import math
import random
import threading
import time
import uuid

from vllm_standin import FINGERPRINT
from vllm_standin.knobs import env_float, fault
from vllm_standin.nccl import step_allreduce_ms
from vllm_standin.vocab import FAKE_WORDS


class Seqs:
    """--max-num-seqs: at most ``limit`` requests generate at once (None: no limit); the
    others wait in arrival order, counted in vllm:num_requests_waiting."""

    def __init__(self, limit):
        self.limit = limit
        self.sem = threading.Semaphore(limit) if limit else None

    @contextlib.contextmanager
    def slot(self, metrics):
        """Yields the seconds spent waiting for a slot."""
        if self.sem is None:
            yield 0.0
            return
        t0 = time.monotonic()
        with metrics.lock:
            metrics.waiting += 1
        try:
            self.sem.acquire()
        finally:
            with metrics.lock:
                metrics.waiting -= 1
        try:
            yield time.monotonic() - t0
        finally:
            self.sem.release()


def batch_cost():
    """``VLLM_STANDIN_BATCH_COST``: the share of a step each further sequence in the batch adds (0.25: a
    step of four sequences takes 1.75 times one alone's), read at every step, as a batched engine's step
    grows with its batch; 0 (the default): the step time does not depend on the batch."""
    return max(0.0, env_float("VLLM_STANDIN_BATCH_COST", 0.0))


def slower():
    """The fault switch ``steps-slower``: the factor (its content, a number above 0) on every decode step
    of a request that starts while it is set; 1 without it (or with a content that is no such number)."""
    text = fault("steps-slower")
    try:
        value = float(text) if text else 1.0
    except ValueError:
        return 1.0
    return value if value > 0 else 1.0


class Generation:
    """One completion request, with simulated time to first token and per decode step.

    The first token comes from the prefill, after TTFT. Then each decode step takes TPOT plus its
    all-reduce (``nccl.step_allreduce_ms``, 0 unless set) and emits one token; a speculating server
    (K draft tokens, ``a`` accepted per step, see
    config.spec_step_model) takes TPOT * (1 + K * SPEC_DRAFT_OVERHEAD) a step and emits 1 + a tokens
    (the last step only what is left), so ceil((n - 1) / (1 + a)) steps for n tokens. A step of a
    batch of B sequences takes ``1 + BATCH_COST * (B - 1)`` times that (:func:`batch_cost`). A stream
    sends one chunk per step, as vLLM does."""

    def __init__(self, app, body, prompts, counts, max_tokens):
        self.app, self.prompts, self.counts, self.n = app, prompts, counts, max_tokens
        self.ttft = env_float("VLLM_STANDIN_TTFT_MS", 20.0) / 1000
        self.k, self.accepted, factor = app["spec"]
        # the step's compute, then its all-reduce as the server's NCCL settings scale it (nccl.py)
        self.step_s = (env_float("VLLM_STANDIN_TPOT_MS", 5.0) + step_allreduce_ms()) / 1000 * factor * slower()
        self.steps = max(0, math.ceil((self.n - 1) / (1 + self.accepted)))
        self.spent = 0.0  # the decode steps' time, each at its batch
        self.queued = 0.0
        self.ident = f"cmpl-{uuid.uuid4().hex[:16]}"
        self.created = int(time.time())
        self.include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self.rng = random.Random(json.dumps(prompts, sort_keys=True))

    def chunks(self):
        """Yield the tokens of each step (a list) in simulated time."""
        self.t0 = time.monotonic()
        metrics = self.app["metrics"]
        with self.app["seqs"].slot(metrics) as waited:
            self.queued = waited
            with metrics.lock:
                metrics.running += len(self.prompts)
            try:
                time.sleep(self.ttft)
                if self.n > 0:
                    self.step(metrics, 1)
                    yield [self.word()]
                left, cost = self.n - 1, batch_cost()
                while left > 0:
                    step_s = self.step_s * (1 + cost * max(0, metrics.running - 1))
                    time.sleep(step_s)
                    self.spent += step_s
                    size = min(left, 1 + self.accepted)
                    left -= size
                    self.step(metrics, size, step_s)
                    yield [self.word() for _ in range(size)]
            finally:
                with metrics.lock:
                    metrics.running -= len(self.prompts)

    def step(self, metrics, tokens, step_s=None):
        """This request's part of one engine step (waiting while the engine does not step): ``tokens`` a
        sequence, the step's time ``step_s`` (None for the prefill's)."""
        engine = self.app.get("engine")
        if engine is not None:
            engine.wait_step()
        metrics.stepped(tokens, len(self.prompts), step_s)

    def word(self):
        return " " + self.rng.choice(FAKE_WORDS)

    def record(self):
        e2e = time.monotonic() - self.t0
        metrics = self.app["metrics"]
        for count in self.counts:
            tpot = self.spent / (self.n - 1) if self.n > 1 else self.step_s
            metrics.finished(count, self.n, self.ttft + self.queued, tpot, e2e)
            if self.k:
                metrics.speculated(self.steps, self.k, self.accepted)

    def usage(self):
        prompt = sum(self.counts)
        return {"prompt_tokens": prompt, "total_tokens": prompt + self.n * len(self.prompts),
                "completion_tokens": self.n * len(self.prompts)}

    def whole(self, handler):
        text = "".join("".join(step) for step in self.chunks())
        choices = [{"index": i, "text": text, "logprobs": None, "finish_reason": "length",
                    "stop_reason": None, "token_ids": None, "prompt_logprobs": None,
                    "prompt_token_ids": None, "routed_experts": None}
                   for i in range(len(self.prompts))]
        self.record()
        handler.reply(200, {"id": self.ident, "object": "text_completion",
                            "created": self.created, "model": self.app["model_name"],
                            "choices": choices, "service_tier": None,
                            "system_fingerprint": FINGERPRINT,
                            "usage": {**self.usage(), "prompt_tokens_details": None,
                                      "completion_tokens_details": None},
                            "kv_transfer_params": None, "ec_transfer_params": None,
                            "metrics": None})

    def stream(self, handler):
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream; charset=utf-8")
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        handler.mirror({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})

        def send(obj):
            data = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj))
                    + "\n\n").encode()
            handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            handler.wfile.flush()
            handler.mirror({"type": "http.response.body", "body": data, "more_body": True})

        base = {"id": self.ident, "object": "text_completion", "created": self.created,
                "model": self.app["model_name"]}
        sent = 0
        for step in self.chunks():
            sent += len(step)
            last = sent == self.n
            send({**base, "choices": [
                {"index": k, "text": "".join(step), "logprobs": None,
                 "finish_reason": "length" if last else None, "stop_reason": None,
                 "prompt_token_ids": None, "token_ids": None}
                for k in range(len(self.prompts))]})
        self.record()
        if self.include_usage:
            send({**base, "choices": [], "usage": self.usage(),
                  "system_fingerprint": FINGERPRINT})
        send("[DONE]")
        handler.wfile.write(b"0\r\n\r\n")
        handler.mirror({"type": "http.response.body", "body": b"", "more_body": False})
