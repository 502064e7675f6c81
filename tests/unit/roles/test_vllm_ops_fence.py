"""roles/vllm/files/vllm_ops_fence.py as plain ASGI, no server: who gets through to the app."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "roles" / "vllm" / "files"))

from vllm_ops_fence import LoopbackFence


class App:
    """The server behind the fence: records what reached it, answers 200 in two body chunks."""

    def __init__(self):
        self.seen = []

    async def __call__(self, scope, receive, send):
        self.seen.append(scope["path"])
        if scope["type"] == "websocket":
            await send({"type": "websocket.accept"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


def call(path, client=("127.0.0.1", 5000), root_path="", kind="http", env=None, monkeypatch=None, headers=()):
    if env is not None:
        monkeypatch.setenv("VLLM_OPS_FENCED_PATHS", env)
    app = App()
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": kind, "path": path, "root_path": root_path, "client": client, "method": "POST",
             "headers": list(headers)}
    asyncio.run(LoopbackFence(app)(scope, receive, send))
    return app.seen, sent


REMOTE = ("192.0.2.10", 40000)


@pytest.mark.parametrize("client", [("127.0.0.1", 1), ("127.8.9.10", 1), ("::1", 1), ("::ffff:127.0.0.1", 1)])
def test_loopback_clients_reach_the_profiler(client):
    seen, sent = call("/start_profile", client)
    assert seen == ["/start_profile"] and sent[0]["status"] == 200


@pytest.mark.parametrize("path", ["/start_profile", "/stop_profile", "/stop_profile/", "//start_profile",
                                  "/collective_rpc", "/sleep", "/wake_up", "/reset_prefix_cache"])
@pytest.mark.parametrize("client", [REMOTE, ("2001:db8::1", 1), ("::ffff:192.0.2.10", 1), None, ("garbage", 1)])
def test_others_get_403_and_never_reach_the_app(path, client):
    seen, sent = call(path, client)
    assert seen == []
    assert sent[0]["status"] == 403 and dict(sent[0]["headers"])[b"content-type"] == b"application/json"
    body = json.loads(sent[1]["body"])
    assert body["error"]["code"] == 403 and "loopback" in body["error"]["message"]
    assert int(dict(sent[0]["headers"])[b"content-length"]) == len(sent[1]["body"])


def test_the_path_is_read_relative_to_the_root_path():
    assert call("/api/start_profile", REMOTE, root_path="/api")[0] == []
    assert call("/api/v1/completions", REMOTE, root_path="/api")[0] == ["/api/v1/completions"]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/health", "/metrics",
                                  "/start_profiles", "/v1/start_profile"])
def test_everything_else_passes_untouched_with_its_stream(path):
    seen, sent = call(path, REMOTE)
    assert seen == [path]
    assert [m.get("body") for m in sent[1:]] == [b"data: 1\n\n", b"data: [DONE]\n\n"]
    assert sent[1]["more_body"] is True


def test_a_websocket_to_a_fenced_path_is_closed():
    seen, sent = call("/sleep", REMOTE, kind="websocket")
    assert seen == [] and sent == [{"type": "websocket.close", "code": 1008}]


def test_lifespan_passes_through():
    seen, _ = call("", None, kind="lifespan")
    assert seen == [""]


def test_more_paths_from_the_environment(monkeypatch):
    assert call("/v1/load_lora_adapter", REMOTE, env="v1/load_lora_adapter, /x/", monkeypatch=monkeypatch)[0] == []
    assert call("/x", REMOTE, env="v1/load_lora_adapter, /x/", monkeypatch=monkeypatch)[0] == []
    assert call("/v1/models", REMOTE, env="v1/load_lora_adapter", monkeypatch=monkeypatch)[0] == ["/v1/models"]


def test_a_forwarded_header_from_another_peer_does_not_open_the_fence():
    # Only uvicorn may turn X-Forwarded-For into the client (for peers it trusts); the fence reads
    # the client it was given, never the header.
    forged = [(b"x-forwarded-for", b"127.0.0.1"), (b"forwarded", b"for=127.0.0.1")]
    seen, sent = call("/start_profile", REMOTE, headers=forged)
    assert seen == [] and sent[0]["status"] == 403
