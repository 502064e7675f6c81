#!/usr/bin/env python3
"""What the traffic recorder costs a request: the same requests through the loopback fence alone and
through the fence and the recorder (plugins/module_utils/traffic.py), in one run, in one process, as
vLLM stacks its ``--middleware`` classes around the app. No server: the app answers from memory, so
what is measured is the middlewares' own work, the part a real server pays on top of its own.

Two figures per kind of request (a completion answered whole; a chat streamed one event a token):

- on the request path: the time from the request's first byte to its last event sent, per request;
- in all: the same requests plus the recorder's thread parsing, hashing and writing each of them
  (until its queue is drained), per request. In a server that thread shares the interpreter (the GIL)
  with the event loop, so this is the upper bound of what a request pays.

The recorder's ``/tokenize`` call is replaced by a tokenizer in the process (one token per 4 bytes of
the prompt, as a BPE tokenizer gives English text): the server's own tokenization of that call is
work the server does besides, and is not the middleware's.

    python bench/traffic_cost.py [--requests 2000] [--prompt-tokens 2000] [--output-tokens 256]

Standard library only; prints a table and the ratios, asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "roles" / "vllm" / "files"))
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))

import traffic  # noqa: E402 (the host's module, as the role installs it)
from vllm_ops_fence import LoopbackFence  # noqa: E402


class Tokenizer:
    """Each prompt's tokens, made once: the bench measures the recorder, not a tokenizer."""

    def __init__(self):
        self.known = {}

    def __call__(self, server, model, kind, prompt):
        text = " ".join(m["content"] for m in prompt["messages"]) if kind == "chat" else prompt
        if text not in self.known:
            data = text.encode()
            self.known[text] = [int.from_bytes(data[i:i + 4], "little") for i in range(0, len(data), 4)]
        return self.known[text]

    def version(self, server):
        return "bench"


def app_for(output_tokens):
    whole = json.dumps({"choices": [{"index": 0, "text": "word " * output_tokens, "finish_reason": "length"}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": output_tokens}}).encode()
    events = [b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": "word "},
                                                   "finish_reason": None}]}).encode() + b"\n\n"] * output_tokens

    async def app(scope, receive, send):
        body = await receive()
        stream = b'"stream": true' in body["body"]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if not stream:
            await send({"type": "http.response.body", "body": whole})
            return
        for event in events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})

    return app


async def drive(stack, path, body, requests):
    raw = json.dumps(body).encode()
    scope = {"type": "http", "method": "POST", "path": path, "headers": [], "client": ("192.0.2.1", 1),
             "server": ("127.0.0.1", 8000), "root_path": ""}

    async def receive():
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message):
        pass

    for _ in range(requests):
        await stack(dict(scope), receive, send)


def measure(stack, path, body, requests, recorder=None):
    start = time.perf_counter()
    asyncio.run(drive(stack, path, body, requests))
    path_s = time.perf_counter() - start
    if recorder is not None:
        recorder.flush(timeout=600)
    return path_s / requests * 1e6, (time.perf_counter() - start) / requests * 1e6


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--prompt-tokens", type=int, default=2000)
    parser.add_argument("--output-tokens", type=int, default=256)
    args = parser.parse_args(argv)
    prompt = "abc " * args.prompt_tokens  # 4 bytes a token for the tokenizer above
    kinds = [("completion, whole", "/v1/completions", {"model": "m", "prompt": prompt, "max_tokens": 256}),
             ("chat, streamed", "/v1/chat/completions",
              {"model": "m", "messages": [{"role": "user", "content": prompt}], "stream": True})]
    app = app_for(args.output_tokens)
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        recorder = traffic.Recorder(directory, tokenize=Tokenizer(), queue_size=args.requests + 10)
        fence = LoopbackFence(app)
        recorded = LoopbackFence(traffic.TrafficRecorder(app, recorder=recorder))
        for name, path, body in kinds:
            measure(fence, path, body, 50)  # warm both
            measure(recorded, path, body, 50, recorder)
            base, _ = measure(fence, path, body, args.requests)
            on_path, in_all = measure(recorded, path, body, args.requests, recorder)
            rows.append((name, base, on_path, in_all))
        written = sum(p.stat().st_size for p in Path(directory).glob("*.jsonl"))
        count = sum(1 for p in Path(directory).glob("*.jsonl") for _ in p.open())
    print(f"{args.requests} requests a kind, prompts of {args.prompt_tokens} tokens, {args.output_tokens} out")
    print("per request, µs: the fence alone; with the recorder on the request path, and with its thread's work")
    print(f"{'request':<20}{'fence':>8}{'+recorder':>11}{'added':>8}{'ratio':>7}{'+thread':>9}{'added':>8}")
    for name, base, on_path, in_all in rows:
        print(f"{name:<20}{base:>8.1f}{on_path:>11.1f}{on_path - base:>8.1f}{on_path / base:>7.2f}"
              f"{in_all:>9.1f}{in_all - base:>8.1f}")
    print(f"recorded {count} lines, {written / count:.0f} bytes a line")


if __name__ == "__main__":
    main()
