"""An ASGI middleware for ``vllm serve --middleware vllm_ops_fence.LoopbackFence``: the profiler
and the other admin endpoints answer 403 unless the client is on loopback; every other request
passes through untouched (streaming included: the middleware never reads or wraps a body).

vLLM 0.32 adds user middlewares last, so they run first, before its API-key check. The client is
``scope["client"]`` as uvicorn gives it: the TCP peer, or the address in X-Forwarded-For when the
peer is in uvicorn's ``--forwarded-allow-ips`` (loopback by default). So a reverse proxy on the
same host that does not set X-Forwarded-For makes every client look like loopback: behind one,
either have it set the header (uvicorn then sees the real client) or have it refuse these paths
itself.

Fenced paths (exact, or followed by ``/``): :data:`FENCED`, plus any listed, comma-separated,
in the environment variable ``VLLM_OPS_FENCED_PATHS``. A request over a Unix socket (no client
address) is refused too: fail closed.

Standard library only; installed by the vllm role into a root-owned directory on the unit's
PYTHONPATH.
"""

from __future__ import annotations

import ipaddress
import json
import os

__all__ = ["FENCED", "LoopbackFence", "fenced_path", "is_loopback"]

# The profiler, and what VLLM_SERVER_DEV_MODE or a scaling setup exposes (never meant for clients).
FENCED = (
    "/start_profile", "/stop_profile",
    "/reset_prefix_cache", "/reset_mm_cache", "/collective_rpc", "/sleep", "/wake_up", "/is_sleeping",
    "/pause", "/resume", "/update_weights", "/scale_elastic_ep", "/is_scaling_elastic_ep",
)


def is_loopback(client) -> bool:
    """Whether an ASGI ``client`` (host, port) is on loopback: 127.0.0.0/8, ::1, or an
    IPv4-mapped loopback address. Anything unparsable or absent is not."""
    if not client:
        return False
    try:
        address = ipaddress.ip_address(str(client[0]).split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


def _paths(extra: str | None) -> tuple[str, ...]:
    added = tuple("/" + p.strip().strip("/") for p in (extra or "").split(",") if p.strip().strip("/"))
    return FENCED + added


def fenced_path(scope, paths=FENCED) -> bool:
    """Whether the request's path, taken relative to ``root_path``, is fenced. Repeated and
    trailing slashes are ignored, as a router might."""
    path = scope.get("path") or "/"
    root = (scope.get("root_path") or "").rstrip("/")
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root):] or "/"
    path = "/" + "/".join(part for part in path.split("/") if part)
    return any(path == p or path.startswith(p + "/") for p in paths)


_BODY = json.dumps({"error": {
    "message": "This endpoint answers only on loopback (vllm-ops fence): run the request on the host itself.",
    "type": "Forbidden", "param": None, "code": 403}}).encode()


class LoopbackFence:
    """Pure ASGI middleware; the constructor takes only ``app``, as ``--middleware`` requires."""

    def __init__(self, app):
        self.app = app
        self.paths = _paths(os.environ.get("VLLM_OPS_FENCED_PATHS"))

    async def __call__(self, scope, receive, send):
        kind = scope.get("type")
        if kind not in ("http", "websocket") or not fenced_path(scope, self.paths) or is_loopback(scope.get("client")):
            await self.app(scope, receive, send)
            return
        if kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": 403,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(_BODY)).encode())]})
        await send({"type": "http.response.body", "body": _BODY})
