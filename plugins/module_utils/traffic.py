"""What users send, without what they say: a recorder of request shapes for vLLM's OpenAI server.

``vllm serve --middleware vllm_ops_traffic.TrafficRecorder`` (the vllm role installs this file as
``vllm_ops_traffic.py`` beside the loopback fence). Per request to ``/v1/completions`` or
``/v1/chat/completions``, one line of Mooncake-style JSONL, the format vLLM's own
``vllm bench serve --dataset-name timed_trace`` replays:

- ``timestamp``: milliseconds since the file's window began (its sidecar's ``start``, Unix seconds);
  lines are written as requests end, so a file is not in arrival order, and a request that began
  before its window opened has a negative timestamp (a replay's file is made sorted, from 0);
- ``input_length``, ``output_length``: prompt and completion tokens (the response's ``usage``; for a
  stream without usage, its chunks: ``output_source`` says which);
- ``hash_ids``: one integer per block of ``block`` prompt tokens, the last one partial, so that
  requests that share a prefix share their first ids (what the engine's prefix cache sees);
- ``endpoint``, ``max_tokens``, ``temperature``, ``top_p``, ``stream``, ``n``, ``finish_reason``,
  ``status``.

**No content.** Nothing of a prompt or a completion is written: no text, no token ids, no digest. A
block's identity is HMAC-SHA256 under a key drawn at start (:func:`os.urandom`) and kept only in this
process's memory, chained over the blocks before it (a block's id depends on its whole prefix, as the
prefix cache's hash does); the line carries only the order in which each distinct chained block was
first seen (0, 1, 2, ...). Such counters carry no information about the tokens, and the key that could
tie a digest to a guess is never written, so neither a dictionary nor the recording reverses to text.
Ids are comparable within one process's recording (its ``epoch``, in the sidecar) and mean nothing
across epochs. The map from digests to ids keeps the ``prefix_blocks`` most recently seen (a block
seen again after that gets a new id: far more tokens than any engine's prefix cache keeps).

**Off the request path.** The middleware copies the request body as it passes, counts the response's
stream events and keeps its last bytes, and hands both to a queue; a thread parses them, asks the
server's own ``/tokenize`` (loopback) for the prompt's tokens, and writes the line. A full queue drops
the request and counts it (``dropped`` in the sidecar); a failed ``/tokenize`` records the request with
ids no other request has (``prefix: "none"``, never an empty ``hash_ids``: the replay would send an
empty prompt). Requests carrying the header ``x-vllm-ops-job`` (the project's own benchmarks) are not
recorded, only counted.

**Bounded.** Files rotate every ``rotate_s`` seconds or at an eighth of ``max_mib``; the oldest
recordings are removed while the directory holds more than ``max_mib``. Each ``traffic-*.jsonl`` has
a sidecar ``.json`` (schema, block, epoch, vLLM's version, the window, counts), rewritten atomically
as lines are written.

Configured from the environment (the unit's): ``VLLM_OPS_TRAFFIC_DIR`` (required; nothing is
recorded without it), ``VLLM_OPS_TRAFFIC_BLOCK`` (64), ``VLLM_OPS_TRAFFIC_MAX_MIB`` (512),
``VLLM_OPS_TRAFFIC_ROTATE_S`` (3600), ``VLLM_OPS_TRAFFIC_PREFIX_BLOCKS`` (65536).

Standard library only, Python 3.9: it runs inside the server.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import hmac
import json
import os
import queue
import re
import struct
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

SCHEMA = "vllm-ops/traffic/1"
ENDPOINTS = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}
OWN_HEADER = b"x-vllm-ops-job"
MAX_BODY = 16 << 20  # a request body past this is not parsed (recorded without its prompt's ids)
TAIL = 16384  # the response's last bytes kept: its final events (usage, finish_reason)
MIB = 1 << 20
# What a sidecar counts besides its lines: requests dropped at a full queue, the project's own requests
# (not recorded), requests whose recording failed (the server's journal says why, once a kind).
NO_COUNTS = {"dropped": 0, "own": 0, "errors": 0}
SAVE_S = 1.0  # a sidecar is rewritten at most once a second of arrivals (and when its window closes)


class BlockIds:
    """Prefix-chained block identities as first-seen counters (see the module's docstring)."""

    def __init__(self, block, capacity, key=None):
        if block < 1:
            raise ValueError("block must be at least 1 token")
        self.block, self.capacity = block, capacity
        self._key = key if key is not None else os.urandom(32)
        self._ids = collections.OrderedDict()
        self._next = 0

    def __call__(self, tokens):
        out, chain = [], b""
        for start in range(0, len(tokens), self.block):
            part = tokens[start:start + self.block]
            chain = hmac.new(self._key, chain + struct.pack("<%dq" % len(part), *part), hashlib.sha256).digest()
            out.append(self._id(chain))
        return out

    def fresh(self, count):
        """``count`` ids no request has had or will have: a prompt whose tokens are not known."""
        first, self._next = self._next, self._next + count
        return list(range(first, first + count))

    def _id(self, digest):
        found = self._ids.get(digest)
        if found is None:
            found = self._ids[digest] = self._next
            self._next += 1
            if len(self._ids) > self.capacity:
                self._ids.popitem(last=False)
        else:
            self._ids.move_to_end(digest)
        return found


def blocks(length, block):
    """How many blocks ``length`` tokens fill, the last one partial."""
    return -(-int(length) // block)


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def request_shape(endpoint, body):
    """``(fields, prompts)`` of a parsed request body: the sampling fields a line keeps, and the prompts
    to tokenize (``[("text", str)]``, ``[("ids", [int])]``, or ``[("chat", {messages...})]``)."""
    if not isinstance(body, dict):
        return {}, []
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    fields = {"model": body.get("model") if isinstance(body.get("model"), str) else None,
              "max_tokens": _number(max_tokens), "temperature": _number(body.get("temperature")),
              "top_p": _number(body.get("top_p")), "stream": bool(body.get("stream", False)),
              "n": body.get("n") if isinstance(body.get("n"), int) and body.get("n") > 0 else 1}
    if endpoint == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list):
            return fields, []
        keys = ("messages", "add_generation_prompt", "continue_final_message", "chat_template_kwargs", "tools")
        chat = {key: body[key] for key in keys if key in body}
        chat.setdefault("add_generation_prompt", True)
        return fields, [("chat", chat)]
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return fields, [("text", prompt)]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return fields, [("ids", prompt)]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return fields, [("text", p) for p in prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt):
        return fields, [("ids", p) for p in prompt if all(isinstance(t, int) for t in p)]
    return fields, []


USAGE = re.compile(rb'"usage":\s*(?=\{)')
FINISH = re.compile(rb'"finish_reason":\s*"([^"\\]{1,64})"')


def _last_usage(text):
    """The last ``"usage": {...}`` object in ``text`` (JSON, possibly cut at its start), or None."""
    found = list(USAGE.finditer(text))
    if not found:
        return None
    at = found[-1].end()
    try:
        value = json.JSONDecoder().raw_decode(text[at:at + 4096].decode("utf-8", "replace"))[0]
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _last_finish_reason(text):
    """The last non-null ``"finish_reason"`` in ``text``, or None."""
    found = FINISH.findall(text)
    return found[-1].decode() if found else None


def response_shape(endpoint, stream, events, tail):
    """``{usage, finish_reason, chunks}`` of a response from its last bytes (the body's end, or the
    stream's last events) and, for a stream, the count of its data events: read by key, so that a body
    cut at its start still gives them."""
    usage, reason = _last_usage(tail), _last_finish_reason(tail)
    # a chat stream opens with an event that carries only the role
    chunks = max(0, events - (1 if endpoint == "chat" else 0)) if stream else None
    return {"usage": usage, "finish_reason": reason, "chunks": chunks}


def lines(endpoint, fields, prompt_tokens, response, status, ids):
    """The JSONL records of one request, but their timestamp: one a prompt (a batch of prompts shares its
    usage evenly).
    ``prompt_tokens``: each prompt's token count where known (None elsewhere); ``ids(i, length)``
    gives prompt ``i``'s hash ids."""
    count = max(1, len(prompt_tokens))
    usage = response["usage"] or {}
    completion = _number(usage.get("completion_tokens"))
    prompt_total = _number(usage.get("prompt_tokens"))
    sequences = count * fields.get("n", 1)
    if completion is not None:
        output, source = int(completion) // sequences, "usage" if sequences == 1 else "usage-split"
    elif response["chunks"] is not None:
        output, source = response["chunks"] // sequences, "chunks"
    else:
        output, source = None, None
    out = []
    for index in range(count):
        known = prompt_tokens[index] if index < len(prompt_tokens) else None
        length = known if known is not None else (int(prompt_total) // count if prompt_total is not None else None)
        line = {"input_length": length, "output_length": output,
                "hash_ids": ids(index, length) if length else [],
                "endpoint": endpoint, "max_tokens": fields.get("max_tokens"),
                "temperature": fields.get("temperature"), "top_p": fields.get("top_p"),
                "stream": fields.get("stream", False), "n": fields.get("n", 1),
                "finish_reason": response["finish_reason"], "status": status, "output_source": source}
        out.append(line)
    return out


class Window:
    """One recording file and its sidecar: rotated by age and size, the directory kept under its bound."""

    def __init__(self, directory, block, epoch, version, max_bytes, rotate_s):
        self.directory, self.block, self.epoch, self.version = directory, block, epoch, version
        self.max_bytes, self.rotate_s, self.rotate_bytes = max_bytes, rotate_s, max(1, max_bytes // 8)
        self.file = None
        self.meta = None
        self.saved = 0.0

    def _open(self, now):
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        base = os.path.join(self.directory, "traffic-%s-%s" % (stamp, self.epoch[:8]))
        self.path, self.sidecar = base + ".jsonl", base + ".json"
        self.file = open(self.path, "ab")  # noqa: SIM115 (kept open across writes)
        self.meta = {"schema": SCHEMA, "format": "mooncake", "timestamp_unit": "ms", "block": self.block,
                     "epoch": self.epoch, "vllm_version": self.version, "start": now, "end": now,
                     "requests": 0, "bytes": 0, "failed_tokenize": 0, "prefix": "tokens"}
        self.meta.update(NO_COUNTS)

    def write(self, arrival, records, counts):
        """Write one request's records (arrival: Unix seconds); rotate first when due. A window opens at
        the arrival of the first request written into it; requests are written as they end, so one that
        began before its window opened has a negative timestamp."""
        if self.file is None or (arrival - self.meta["start"] >= self.rotate_s
                                 or self.meta["bytes"] >= self.rotate_bytes):
            self.close()
            self._open(arrival)
        stamp = round((arrival - self.meta["start"]) * 1000)
        data = "".join(json.dumps(dict({"timestamp": stamp}, **r), separators=(",", ":")) + "\n"
                       for r in records).encode()
        self.file.write(data)
        self.file.flush()
        self.meta["requests"] += len(records)
        self.meta["bytes"] += len(data)
        self.meta["end"] = max(self.meta["end"], arrival)
        self.count(counts)
        if arrival - self.saved >= SAVE_S or self.meta["requests"] == len(records):
            self.save()

    def count(self, counts):
        """Add ``counts`` (of :data:`NO_COUNTS`' names, and ``failed_tokenize``) to the sidecar's."""
        for key, value in counts.items():
            self.meta[key] += value
        if counts.get("failed_tokenize"):
            self.meta["prefix"] = "partial"

    def save(self):
        if self.meta is None:
            return
        self.saved = self.meta["end"]
        temporary = self.sidecar + ".tmp"
        with open(temporary, "w", encoding="utf-8") as out:
            json.dump(self.meta, out, sort_keys=True)
        os.replace(temporary, self.sidecar)

    def close(self):
        if self.file is not None:
            self.file.close()
            self.save()
            self.file = None
            prune(self.directory, self.max_bytes)


def prune(directory, max_bytes):
    """Remove the oldest recordings (each file with its sidecar) while the directory holds more than
    ``max_bytes``; the one being written is never among them (its name sorts last)."""
    names = sorted(n for n in os.listdir(directory) if n.startswith("traffic-") and n.endswith(".jsonl"))
    sizes = {n: os.path.getsize(os.path.join(directory, n)) for n in names}
    total = sum(sizes.values())
    for name in names[:-1]:
        if total <= max_bytes:
            break
        for path in (name, name[:-len(".jsonl")] + ".json"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, path))
        total -= sizes[name]


class Recorder:
    """The thread behind the middleware: parses, tokenizes and writes, in arrival order."""

    def __init__(self, directory, block=64, max_mib=512, rotate_s=3600, prefix_blocks=65536,
                 tokenize=None, queue_size=10000, clock=time.time):
        self.clock = clock
        os.makedirs(directory, exist_ok=True)
        self.epoch = uuid.uuid4().hex
        self.block = block
        self.ids = BlockIds(block, prefix_blocks)
        self.window = Window(directory, block, self.epoch, None, int(max_mib * MIB), rotate_s)
        self.tokenize = tokenize or LoopbackTokenizer()
        self.queue = queue.Queue(maxsize=queue_size)
        self.pending = dict(NO_COUNTS)
        self.version_asked = False
        self.reported = set()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="vllm-ops-traffic", daemon=True)
        self.thread.start()

    @classmethod
    def from_environment(cls, environ=None):
        environ = os.environ if environ is None else environ
        directory = environ.get("VLLM_OPS_TRAFFIC_DIR")
        if not directory:
            return None
        return cls(directory, block=int(environ.get("VLLM_OPS_TRAFFIC_BLOCK", 64)),
                   max_mib=float(environ.get("VLLM_OPS_TRAFFIC_MAX_MIB", 512)),
                   rotate_s=float(environ.get("VLLM_OPS_TRAFFIC_ROTATE_S", 3600)),
                   prefix_blocks=int(environ.get("VLLM_OPS_TRAFFIC_PREFIX_BLOCKS", 65536)))

    def submit(self, item):
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            with self.lock:
                self.pending["dropped"] += 1

    def count_own(self):
        with self.lock:
            self.pending["own"] += 1

    def flush(self, timeout=10.0):
        """Wait until every submitted request is written (tests; the unit's stop)."""
        done = threading.Event()
        self.queue.put(done)
        return done.wait(timeout)

    def _run(self):
        while True:
            try:
                item = self.queue.get(timeout=SAVE_S)
            except queue.Empty:  # idle: the sidecar brought up to date
                self._absorb()
                continue
            if isinstance(item, threading.Event):
                self._absorb()
                item.set()
                continue
            try:
                self._write(*item)
            except Exception as exc:  # a recorder never takes the server down
                with self.lock:
                    self.pending["errors"] += 1
                if type(exc) not in self.reported:  # once a kind, to the server's journal
                    self.reported.add(type(exc))
                    sys.stderr.write("vllm-ops traffic recorder: a request not recorded: %r\n" % (exc,))

    def _absorb(self):
        """The counts of requests not written (dropped, the project's own, failed) into the open window's
        sidecar, saved; kept for the next window while none is open."""
        if self.window.meta is None:
            return
        self.window.count(self._take_pending())
        self.window.save()

    def _take_pending(self):
        """The counts of requests not written since the last take, reset."""
        with self.lock:
            counts, self.pending = self.pending, dict(NO_COUNTS)
        return counts

    def _write(self, arrival, endpoint, server, body, status, stream_events, tail):
        try:
            parsed = json.loads(body) if body is not None else None
        except ValueError:
            parsed = None
        fields, prompts = request_shape(endpoint, parsed)
        if not self.version_asked:  # once: a server without /version is not asked at every request
            self.version_asked, self.window.version = True, self.tokenize.version(server)
        tokens, failed = [], 0
        for kind, prompt in prompts:
            if kind == "ids":
                tokens.append(prompt)
                continue
            found = self.tokenize(server, fields.get("model"), kind, prompt)
            tokens.append(found)
            failed += found is None
        response = response_shape(endpoint, fields.get("stream", False), stream_events, tail)
        usage = response["usage"] or {}
        prompt_counts = [len(t) if t is not None else None for t in tokens]
        if len(tokens) == 1 and tokens[0] is None and _number(usage.get("prompt_tokens")) is not None:
            prompt_counts = [int(usage["prompt_tokens"])]

        def ids(index, length):
            known = tokens[index] if index < len(tokens) else None
            if known is not None and len(known) == length:
                return self.ids(known)
            return self.ids.fresh(blocks(length, self.block))

        records = lines(endpoint, fields, prompt_counts or [None], response, status, ids)
        self.window.write(arrival, records, dict(self._take_pending(), failed_tokenize=failed))


class LoopbackTokenizer:
    """The server's own ``/tokenize`` and ``/version``, over loopback, never through a proxy."""

    def __init__(self, timeout=30.0):
        self.timeout = timeout
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    @staticmethod
    def _base(server):
        host, port = (server or ("127.0.0.1", 8000))[:2]
        host = "127.0.0.1" if host in ("0.0.0.0", "", None) else ("::1" if host == "::" else host)
        return "http://%s:%d" % ("[%s]" % host if ":" in host else host, port)

    def _json(self, url, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
        with self._opener.open(request, timeout=self.timeout) as answer:
            return json.loads(answer.read())

    def __call__(self, server, model, kind, prompt):
        body = dict(prompt) if kind == "chat" else {"prompt": prompt}
        if model:
            body["model"] = model
        try:
            tokens = self._json(self._base(server) + "/tokenize", body).get("tokens")
        except (urllib.error.URLError, OSError, ValueError, AttributeError):
            return None
        return tokens if isinstance(tokens, list) else None

    def version(self, server):
        try:
            return self._json(self._base(server) + "/version").get("version")
        except (urllib.error.URLError, OSError, ValueError, AttributeError):
            return None


class TrafficRecorder:
    """Pure ASGI middleware; the constructor takes only ``app``, as ``--middleware`` requires. Without
    ``VLLM_OPS_TRAFFIC_DIR`` it passes everything through and records nothing."""

    def __init__(self, app, recorder=None):
        self.app = app
        if recorder is None:
            try:
                recorder = Recorder.from_environment()
            except (OSError, ValueError) as exc:  # the server starts, unrecorded, and says why
                sys.stderr.write("vllm-ops traffic recorder: not recording: %s\n" % (exc,))
        self.recorder = recorder

    async def __call__(self, scope, receive, send):
        endpoint = ENDPOINTS.get(scope.get("path")) if scope.get("type") == "http" else None
        if self.recorder is None or endpoint is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        if any(header[0].lower() == OWN_HEADER for header in scope.get("headers") or ()):
            self.recorder.count_own()
            await self.app(scope, receive, send)
            return
        arrival = self.recorder.clock()
        body, size = [], [0]
        seen = {"status": None, "events": 0, "tail": bytearray()}

        async def receive_copy():
            message = await receive()
            if message.get("type") == "http.request":
                chunk = message.get("body", b"")
                size[0] += len(chunk)
                if size[0] <= MAX_BODY:
                    body.append(chunk)
            return message

        async def send_seen(message):
            kind = message.get("type")
            if kind == "http.response.start":
                seen["status"] = message.get("status")
            elif kind == "http.response.body":
                chunk = message.get("body", b"")
                seen["events"] += chunk.count(b"data: {")
                if seen["status"] == 200:
                    seen["tail"] += chunk
                    if len(seen["tail"]) > 2 * TAIL:
                        del seen["tail"][:-TAIL]
            await send(message)

        try:
            await self.app(scope, receive_copy, send_seen)
        finally:
            self.recorder.submit((arrival, endpoint, scope.get("server"),
                                  b"".join(body) if size[0] <= MAX_BODY else None,
                                  seen["status"], seen["events"], bytes(seen["tail"][-TAIL:])))
