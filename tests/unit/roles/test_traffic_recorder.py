"""The traffic recorder (plugins/module_utils/traffic.py) as plain ASGI, no server: what a recording holds.

The server behind it is modelled here: a tokenizer that gives each distinct word a token id, and an app
that answers completions and chat requests (whole, or streamed one event per token, with or without
usage). What each line must say is computed here from the requests the test sends: the words counted,
the shared prefixes found by comparing word blocks, never from the code under test.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from types import SimpleNamespace

import pytest
from ansible_collections.vllm_ops.serving.plugins.module_utils import traffic

BLOCK = 4
SECRET_WORDS = ["zanzibar", "quokka", "marmalade", "obsidian", "fjord", "xylophone", "kumquat", "tundra",
                "walrus", "saffron", "gondola", "nebula", "paprika", "igloo", "mango", "lagoon"]


class Vocabulary:
    """The server's tokenizer: one token a word, ids in order of first sight (from 1000, so that no id
    is also a small count a line holds)."""

    def __init__(self):
        self.ids = {}
        self.calls = 0

    def encode(self, text):
        return [self.ids.setdefault(word, 1000 + len(self.ids)) for word in text.split()]

    def __call__(self, server, model, kind, prompt):
        self.calls += 1
        if kind == "chat":
            prompt = " ".join(m["content"] for m in prompt["messages"])
        return self.encode(prompt)

    def version(self, server):
        return "0.32.0"


class App:
    """The server: answers ``output`` tokens, one stream event each; records what reached it."""

    def __init__(self, output=5, status=200, include_usage=None):
        self.output, self.status, self.include_usage = output, status, include_usage
        self.received = []

    async def __call__(self, scope, receive, send):
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.received.append(body)
        request = json.loads(body)
        words = len((request.get("prompt") or " ".join(m["content"] for m in request.get("messages", []))).split())
        usage = {"prompt_tokens": words, "completion_tokens": self.output, "total_tokens": words + self.output,
                 "prompt_tokens_details": None}
        await send({"type": "http.response.start", "status": self.status, "headers": []})
        if self.status != 200:
            await send({"type": "http.response.body", "body": b'{"error": {"message": "no"}}'})
            return
        if not request.get("stream"):
            answer = {"id": "cmpl-1", "choices": [{"index": 0, "text": "x " * self.output, "finish_reason": "length"}],
                      "usage": usage}
            await send({"type": "http.response.body", "body": json.dumps(answer).encode()})
            return
        chat = scope["path"].endswith("chat/completions")
        if chat:
            await self._event(send, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        for i in range(self.output):
            last = i == self.output - 1
            choice = {"index": 0, "finish_reason": "stop" if last else None}
            choice["delta" if chat else "text"] = {"content": "tok "} if chat else "tok "
            await self._event(send, {"choices": [choice], "usage": None})
        if (request.get("stream_options") or {}).get("include_usage"):
            await self._event(send, {"choices": [], "usage": usage})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})

    @staticmethod
    async def _event(send, chunk):
        await send({"type": "http.response.body", "body": b"data: " + json.dumps(chunk).encode() + b"\n\n",
                    "more_body": True})


class Clock:
    def __init__(self, now=1_700_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


@pytest.fixture
def rec(tmp_path):
    vocabulary = Vocabulary()
    clock = Clock()
    recorder = traffic.Recorder(str(tmp_path), block=BLOCK, max_mib=1, rotate_s=3600, tokenize=vocabulary,
                                clock=clock)
    return SimpleNamespace(recorder=recorder, vocabulary=vocabulary, clock=clock, directory=tmp_path)


def send(middleware, path, body, headers=(), chunks=1):
    """One request through the middleware, its body in ``chunks`` parts; the messages the client got."""
    raw = json.dumps(body).encode()
    parts = [raw[i * len(raw) // chunks:(i + 1) * len(raw) // chunks] for i in range(chunks)]
    sent = []

    async def receive():
        part = parts.pop(0)
        return {"type": "http.request", "body": part, "more_body": bool(parts)}

    async def out(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": path, "headers": list(headers), "server": ("127.0.0.1", 8000),
             "client": ("192.0.2.7", 5000)}
    asyncio.run(middleware(scope, receive, out))
    return sent


def read(directory):
    """Every line of every recording, and every sidecar, in name order."""
    records, sidecars = [], []
    for path in sorted(directory.glob("traffic-*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines()]
        sidecars.append(json.loads(path.with_suffix(".json").read_text()))
    return records, sidecars


def expected_ids(prompts, block):
    """Each prompt's ids as the prefix cache would share them: a block's id is the order in which its whole
    prefix (every word up to the block's end) was first seen."""
    seen, out = {}, []
    for words in prompts:
        out.append([seen.setdefault(tuple(words[:end]), len(seen))
                    for end in range(block, len(words) + block, block)])
    return out


def test_a_mix_is_recorded_with_its_lengths_and_shared_prefixes_and_the_requests_pass_untouched(rec):
    app = App(output=5)
    middleware = traffic.TrafficRecorder(app, recorder=rec.recorder)
    system = SECRET_WORDS[:8]  # two blocks every prompt shares
    # ... one of none, the same prompt again, and the system prompt's blocks swapped: a block shared only
    # where its whole prefix is, as in the engine's prefix cache
    prompts = [system + SECRET_WORDS[8:11], system + SECRET_WORDS[11:16], SECRET_WORDS[3:9],
               system + SECRET_WORDS[8:11], SECRET_WORDS[4:8] + SECRET_WORDS[:4]]
    bodies = [{"model": "m", "prompt": " ".join(words), "max_tokens": 5, "temperature": 0.7, "top_p": 0.9}
              for words in prompts]
    answers = []
    for body in bodies:
        rec.clock.now += 0.25
        answers.append(send(middleware, "/v1/completions", body, chunks=3))
    assert rec.recorder.flush()

    assert app.received == [json.dumps(b).encode() for b in bodies]  # the app got every byte, in its parts
    assert all(a[0]["status"] == 200 and json.loads(a[1]["body"])["usage"]["completion_tokens"] == 5 for a in answers)
    records, (sidecar,) = read(rec.directory)
    assert [r["input_length"] for r in records] == [len(p) for p in prompts]
    assert [r["output_length"] for r in records] == [5] * 5
    assert [r["hash_ids"] for r in records] == expected_ids(prompts, BLOCK)
    assert records[0]["hash_ids"][:2] == records[1]["hash_ids"][:2] != records[2]["hash_ids"][:2]
    assert records[3]["hash_ids"] == records[0]["hash_ids"]  # the same prompt again: every block shared
    assert not set(records[4]["hash_ids"]) & set(records[0]["hash_ids"])
    assert [r["timestamp"] for r in records] == [0, 250, 500, 750, 1000]  # ms since the window opened
    assert {(r["max_tokens"], r["temperature"], r["top_p"], r["stream"], r["finish_reason"], r["status"],
             r["output_source"]) for r in records} == {(5, 0.7, 0.9, False, "length", 200, "usage")}
    assert sidecar["block"] == BLOCK and sidecar["requests"] == 5 and sidecar["vllm_version"] == "0.32.0"
    assert sidecar["prefix"] == "tokens" and sidecar["dropped"] == 0


def test_nothing_of_the_prompts_or_their_tokens_is_written(rec):
    middleware = traffic.TrafficRecorder(App(), recorder=rec.recorder)
    for words in (SECRET_WORDS, SECRET_WORDS[::-1], SECRET_WORDS[:5]):
        send(middleware, "/v1/completions", {"prompt": " ".join(words), "max_tokens": 5})
        send(middleware, "/v1/chat/completions", {"messages": [{"role": "user", "content": " ".join(words)}],
                                                  "stream": True})
    assert rec.recorder.flush()
    text = "".join(p.read_text() for p in rec.directory.iterdir())
    assert not [w for w in SECRET_WORDS if w in text]
    token_ids = set(rec.vocabulary.ids.values())  # every id the tokenizer gave is at least 1000
    numbers = {int(n) for p in rec.directory.glob("*.jsonl") for n in re.findall(r"-?\d+", p.read_text())}
    assert numbers and not token_ids & numbers
    records, _ = read(rec.directory)
    ids = {i for r in records for i in r["hash_ids"]}
    assert ids == set(range(len(ids)))  # the ids are counters of distinct blocks, nothing else
    allowed = {"timestamp", "input_length", "output_length", "hash_ids", "endpoint", "max_tokens", "temperature",
               "top_p", "stream", "n", "finish_reason", "status", "output_source"}
    assert all(set(r) == allowed for r in records)


@pytest.mark.parametrize("include_usage", [False, True])
def test_a_stream_is_recorded_from_its_events_or_its_usage(rec, include_usage):
    middleware = traffic.TrafficRecorder(App(output=7), recorder=rec.recorder)
    words = SECRET_WORDS[:6]
    body = {"messages": [{"role": "user", "content": " ".join(words)}], "stream": True, "max_tokens": 64}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    sent = send(middleware, "/v1/chat/completions", body)
    assert rec.recorder.flush()
    assert sent[-1]["body"] == b"data: [DONE]\n\n"
    (record,), _ = read(rec.directory)
    assert (record["endpoint"], record["input_length"], record["output_length"]) == ("chat", 6, 7)
    assert record["output_source"] == ("usage" if include_usage else "chunks")
    assert record["finish_reason"] == "stop" and record["stream"] is True
    assert record["hash_ids"] == expected_ids([words], BLOCK)[0]


def test_the_projects_own_load_is_counted_not_recorded(rec):
    middleware = traffic.TrafficRecorder(App(), recorder=rec.recorder)
    send(middleware, "/v1/completions", {"prompt": "a b c"}, headers=[(b"x-vllm-ops-job", b"tune")])
    send(middleware, "/v1/completions", {"prompt": "a b c d e"})
    assert rec.recorder.flush()
    records, (sidecar,) = read(rec.directory)
    assert [r["input_length"] for r in records] == [5] and sidecar["own"] == 1
    send(middleware, "/v1/completions", {"prompt": "a"}, headers=[(b"X-vLLM-Ops-Job", b"bench")])
    assert rec.recorder.flush()  # counted in the open window's sidecar, no request after it needed
    records, (sidecar,) = read(rec.directory)
    assert len(records) == 1 and sidecar["own"] == 2


def test_other_paths_and_methods_pass_through_unrecorded(rec):
    middleware = traffic.TrafficRecorder(App(), recorder=rec.recorder)
    send(middleware, "/tokenize", {"prompt": "a b"})
    assert rec.recorder.flush()
    assert read(rec.directory) == ([], [])


def test_a_prompt_the_server_cannot_tokenize_gets_ids_no_other_request_has(rec):
    middleware = traffic.TrafficRecorder(App(), recorder=rec.recorder)
    send(middleware, "/v1/completions", {"prompt": " ".join(SECRET_WORDS[:9])})
    assert rec.recorder.flush()
    rec.vocabulary.encode = lambda text: None  # /tokenize down
    send(middleware, "/v1/completions", {"prompt": " ".join(SECRET_WORDS[:9])})
    assert rec.recorder.flush()
    (known, unknown), (sidecar,) = read(rec.directory)
    assert unknown["input_length"] == 9  # from the response's usage
    assert len(unknown["hash_ids"]) == 3 and not set(unknown["hash_ids"]) & set(known["hash_ids"])
    assert sidecar["failed_tokenize"] == 1 and sidecar["prefix"] == "partial" and sidecar["errors"] == 0


def test_a_request_the_recorder_fails_on_is_counted_and_said_once(rec, capsys):
    middleware = traffic.TrafficRecorder(App(), recorder=rec.recorder)
    rec.vocabulary.encode = lambda text: 1 / 0
    for _ in range(2):
        send(middleware, "/v1/completions", {"prompt": "a b"})
    assert rec.recorder.flush()
    rec.vocabulary.encode = Vocabulary().encode
    send(middleware, "/v1/completions", {"prompt": "a b"})
    assert rec.recorder.flush()
    (_,), (sidecar,) = read(rec.directory)
    assert sidecar["errors"] == 2 and sidecar["requests"] == 1
    assert capsys.readouterr().err.count("ZeroDivisionError") == 1


def test_a_failed_request_is_recorded_with_its_status(rec):
    send(traffic.TrafficRecorder(App(status=400), recorder=rec.recorder), "/v1/completions", {"prompt": "a b c"})
    assert rec.recorder.flush()
    (record,), _ = read(rec.directory)
    assert record["status"] == 400 and record["output_length"] is None


def test_windows_rotate_and_the_oldest_go_past_the_bound(rec):
    window = rec.recorder.window
    window.rotate_s, window.max_bytes, window.rotate_bytes = 60, 4000, 1 << 20
    middleware = traffic.TrafficRecorder(App(), recorder=rec.recorder)
    for _ in range(6):
        for _ in range(5):
            send(middleware, "/v1/completions", {"prompt": " ".join(SECRET_WORDS)})
        assert rec.recorder.flush()
        rec.clock.now += 61
    window.close()
    names = sorted(p.name for p in rec.directory.glob("traffic-*.jsonl"))
    sizes = {(rec.directory / n).stat().st_size for n in names}
    (size,) = sizes  # five lines of the same request each
    assert len(names) == min(6, 4000 // size) < 6  # the newest that fit the bound
    assert all((rec.directory / n).with_suffix(".json").exists() for n in names)
    _, sidecars = read(rec.directory)
    assert [s["requests"] for s in sidecars] == [5] * len(names)
    assert sidecars[-1]["start"] == rec.clock.now - 61  # the newest kept


def test_a_full_queue_drops_and_counts_never_waits(tmp_path):
    gate = threading.Event()

    def slow(*args):
        gate.wait(10)
        return [1, 2, 3]

    slow.version = lambda server: None
    recorder = traffic.Recorder(str(tmp_path), block=BLOCK, tokenize=slow, queue_size=1)
    middleware = traffic.TrafficRecorder(App(), recorder=recorder)
    for _ in range(5):
        send(middleware, "/v1/completions", {"prompt": "a b c"})
    gate.set()
    assert recorder.flush()
    send(middleware, "/v1/completions", {"prompt": "a b c"})
    assert recorder.flush()
    records, sidecars = read(tmp_path)
    assert len(records) + sum(s["dropped"] for s in sidecars) == 6 and sum(s["dropped"] for s in sidecars) >= 3


def test_without_a_directory_the_middleware_records_nothing(monkeypatch):
    monkeypatch.delenv("VLLM_OPS_TRAFFIC_DIR", raising=False)
    app = App()
    sent = send(traffic.TrafficRecorder(app), "/v1/completions", {"prompt": "a"})
    assert sent[0]["status"] == 200 and len(app.received) == 1


def test_a_directory_it_cannot_make_leaves_the_server_serving_unrecorded(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("VLLM_OPS_TRAFFIC_DIR", str(tmp_path / "file" / "traffic"))
    app = App()
    sent = send(traffic.TrafficRecorder(app), "/v1/completions", {"prompt": "a"})
    assert sent[0]["status"] == 200 and len(app.received) == 1
    assert "vllm-ops traffic recorder: not recording:" in capsys.readouterr().err
