"""The API server's HTTP side: routes, the API key, --middleware, and each endpoint's answer
as vLLM 0.32 gives it (FastAPI's JSON, uvicorn's access log)."""

import asyncio
import hmac
import importlib
import inspect
import json
import re
import time
import uuid
import zlib
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler

from vllm_standin import ENGINE_DEAD, VERSION
from vllm_standin.generation import Generation
from vllm_standin.knobs import fault
from vllm_standin.logs import log, uvicorn_log
from vllm_standin.traces import write_frontend_trace
from vllm_standin.vocab import VOCABULARY

PROTECTED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    body = None  # the request's body once read for the --middleware chain
    mirrored = None  # the response's ASGI messages while an endpoint answers inside that chain

    # -- plumbing ---------------------------------------------------------
    def log_message(self, fmt, *args):
        pass

    def log_request(self, code="-", size="-"):
        if self.server.app["access_log"]:
            status = int(code) if str(code).isdigit() else 0
            phrase = HTTPStatus(status).phrase if status else ""
            uvicorn_log(f'{self.client_address[0]}:{self.client_address[1]} - '
                        f'"{self.command} {self.path} {self.request_version}" {code} {phrase}')

    def reply(self, status, body=b"", ctype="application/json"):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        if body or ctype == "application/json":
            self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.mirror({"type": "http.response.start", "status": status,
                     "headers": [(b"content-type", ctype.encode()), (b"content-length", str(len(body)).encode())]})
        self.mirror({"type": "http.response.body", "body": body})

    def error(self, status, message, etype, param=None):
        self.reply(status, {"error": {"message": sanitize_message(message), "type": etype,
                                      "param": param, "code": status}})

    def read_json(self, optional=False):
        if self.body is not None:  # read already, for the middlewares
            raw = self.body
        else:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
        if not raw.strip() and optional:
            return {}
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            self.error(400, "Invalid JSON body.", "BadRequestError")
            return None
        return body

    def authorized(self):
        key = self.server.app["api_key"]
        if not key or self.command == "OPTIONS" \
                or not self.path.split("?")[0].startswith(PROTECTED_PREFIXES):
            return True
        given = self.headers.get("authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {key}".encode()):
            return True
        self.reply(401, {"error": "Unauthorized"})
        return False

    def mirror(self, message):
        """An ASGI message of the response being written, for the --middleware chain to see."""
        if self.mirrored is not None:
            self.mirrored.append(message)

    def through_middlewares(self, method):
        """The request through the --middleware chain (outermost first, as vLLM adds them last), the
        endpoint innermost: a middleware may answer itself (the fence's 403, written as it sent it) or
        pass the request on, and sees its body and the endpoint's response as ASGI messages (the
        response is written to the client as the endpoint makes it, and passed up the chain after)."""
        state = {"passed": False, "handler": self, "method": method}
        sent = []
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("content-length") or 0)
        self.body = self.rfile.read(length) if length else b""
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": self.command,
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query.encode(),
                 "root_path": "", "client": tuple(self.client_address[:2]),
                 "server": tuple(self.server.server_address[:2]),
                 "headers": [(k.lower().encode(), v.encode()) for k, v in self.headers.items()],
                 "extensions": {"vllm_standin": state}}
        body = [{"type": "http.request", "body": self.body, "more_body": False}]

        async def receive():
            return body.pop(0) if body else {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        asyncio.run(self.server.app["middlewares"][0](scope, receive, send))
        if state["passed"]:
            return
        start = next((m for m in sent if m["type"] == "http.response.start"), None)
        if start is None:
            self.reply(500, "Internal Server Error", "text/plain")
            return
        self.send_response(start["status"])
        for key, value in start.get("headers", []):
            self.send_header(key.decode(), value.decode())
        self.end_headers()
        self.wfile.write(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))

    def dispatch(self, method):
        if not self.authorized():
            return
        path = self.path.split("?")[0]
        routes = self.server.app["routes"]
        if path not in routes:
            self.reply(404, {"detail": "Not Found"})
        elif method not in routes[path]:
            self.reply(405, {"detail": "Method Not Allowed"})
        else:
            getattr(self, routes[path][method])()

    def route(self, method):
        self.body, self.mirrored = None, None
        if self.server.app["middlewares"]:
            self.through_middlewares(method)
        else:
            self.dispatch(method)

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    # -- endpoints ----------------------------------------------------------
    def health(self):
        self.reply(503 if self.server.app["engine"].dead.is_set() else 200, b"", "")

    def tokenize(self):
        """vLLM's /tokenize: a prompt's (or chat messages') token ids, one a word here, as the stand-in
        counts a prompt's tokens (each word's id fixed by its text)."""
        body = self.read_json()
        if body is None:
            return
        if isinstance(body.get("messages"), list):
            text = " ".join(str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict))
        elif isinstance(body.get("prompt"), str):
            text = body["prompt"]
        else:
            return self.error(400, "prompt must be a string", "BadRequestError", "prompt")
        tokens = [zlib.crc32(word.encode()) % VOCABULARY for word in text.split()]
        self.reply(200, {"count": len(tokens), "max_model_len": self.server.app["max_model_len"],
                         "tokens": tokens, "token_strs": None})

    def version(self):
        self.reply(200, {"version": VERSION})

    def models(self):
        app = self.server.app
        self.reply(200, {"object": "list", "data": [{
            "id": app["model_name"], "object": "model", "created": int(time.time()),
            "owned_by": "vllm", "root": app["model"], "parent": None,
            "max_model_len": app["max_model_len"],
            "permission": [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                            "created": int(time.time()), "allow_create_engine": False,
                            "allow_sampling": True, "allow_logprobs": True,
                            "allow_search_indices": False, "allow_view": True,
                            "allow_fine_tuning": False, "organization": "*", "group": None,
                            "is_blocking": False}]}]})

    def metrics(self):
        self.reply(200, self.server.app["metrics"].render(),
                   "text/plain; version=0.0.4; charset=utf-8")

    def completions(self):
        app = self.server.app
        body = self.read_json()
        if body is None:
            return
        model = body.get("model", app["model_name"])
        if model not in (app["model_name"], app["model"]):
            return self.error(404, f"The model `{model}` does not exist. Valid aliases: "
                              f"{app['model_name']}.", "NotFoundError", "model")
        prompts = body.get("prompt")
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts
                                        and all(isinstance(t, int) for t in prompts)):
            prompts = [prompts]
        if not isinstance(prompts, list) or not prompts:
            return self.error(400, "prompt must be a string, a list of strings or a list "
                              "of token ids", "BadRequestError")
        max_tokens = body.get("max_tokens")
        max_tokens = 16 if max_tokens is None else max_tokens
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            return self.error(400, "max_tokens must be at least 1, got "
                              f"{max_tokens}.", "BadRequestError")
        limit = app["max_model_len"]
        if max_tokens > limit:
            return self.error(400, f"max_tokens={max_tokens} cannot be greater than "
                              f"max_model_len={limit}. Please request fewer output tokens. "
                              f"(parameter=max_tokens, value={max_tokens})",
                              "BadRequestError", "max_tokens")
        counts = [len(p) if isinstance(p, list) else max(1, len(str(p).split()))
                  for p in prompts]
        if max(counts) > limit:  # vLLM's tokenizer stops at limit + 1 tokens
            return self.error(400, f"This model's maximum context length is {limit} tokens. "
                              f"However, your prompt contains at least {limit + 1} input "
                              "tokens, which exceeds this limit even without any output "
                              "tokens. Please reduce the length of the input prompt. "
                              f"(parameter=input_tokens, value={limit + 1})",
                              "BadRequestError", "input_tokens")
        # vLLM cuts max_tokens to what fits after the prompt; no error for that
        max_tokens = min(max_tokens, limit - max(counts))
        if app["engine"].dead.is_set():
            return self.error(500, ENGINE_DEAD, "EngineDeadError")
        generate = Generation(app, body, prompts, counts, max_tokens)
        if body.get("stream"):
            generate.stream(self)
        else:
            generate.whole(self)

    def start_profile(self):
        app = self.server.app
        body = self.read_json(optional=True)
        if body is None:
            return
        prof = app["profiling"]
        log("INFO", "api_router.py:39", "Starting profiler...")
        with prof.lock:
            if prof.active:
                return self.error(409, "A profiling session is already active. Call "
                                  "/stop_profile before starting another session.", "Conflict")
            start_ns = time.time_ns()
            prefix = body.get("profile_prefix")
            ok = app["engine"].call("start_profile", start_ns=start_ns, prefix=prefix)
            prof.active, prof.started_ns, prof.prefix = ok, start_ns, prefix
        if not ok:
            return self.error(500, ENGINE_DEAD, "EngineDeadError")
        log("INFO", "api_router.py:44", "Profiler started.")
        self.reply(200, b"", "")

    def stop_profile(self):
        app = self.server.app
        prof = app["profiling"]
        log("INFO", "api_router.py:50", "Stopping profiler...")
        with prof.lock:
            if fault("stop-profile-hangs") is not None:
                time.sleep(3600)
            ok = app["engine"].call("stop_profile")
            if ok and prof.active:
                write_frontend_trace(prof.cfg, prof.started_ns, prof.prefix)
            prof.active = False
        if not ok:
            return self.error(500, ENGINE_DEAD, "EngineDeadError")
        log("INFO", "api_router.py:52", "Profiler stopped.")
        self.reply(200, b"", "")


def routes(profiler_on):
    table = {
        "/health": {"GET": "health"},
        "/version": {"GET": "version"},
        "/tokenize": {"POST": "tokenize"},
        "/v1/models": {"GET": "models"},
        "/v1/completions": {"POST": "completions"},
        "/metrics": {"GET": "metrics"},
    }
    if profiler_on:
        table["/start_profile"] = {"POST": "start_profile"}
        table["/stop_profile"] = {"POST": "stop_profile"}
    return table


def sanitize_message(message):
    """vLLM strips addresses, tracebacks and file paths from error messages."""
    message = re.sub(r" at 0x[0-9a-fA-F]+>", ">", message)
    message = re.sub(r'\n?\s*File "[^"]+", line \d+, in \S+(\n\s+.*)?', "", message)
    message = re.sub(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+", "<path>",
                     message)
    message = re.sub(r"(?:/[\w\-]+)+/[\w\-]+\.\w+", "<path>", message)
    return message.strip()


async def _inner_app(scope, receive, send):
    """The app inside the --middleware chain: the endpoint answers (writing to the client), and what it
    wrote goes up the chain as ASGI messages."""
    state = scope["extensions"]["vllm_standin"]
    handler = state["handler"]
    state["passed"], handler.mirrored = True, []
    body = b""
    while True:  # the body as the app reads it, through every middleware's receive
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    handler.body = body
    handler.dispatch(state["method"])
    for message in handler.mirrored:
        await send(message)


def load_middlewares(paths):
    """vLLM's --middleware: IMPORT.PATH of an ASGI class each, built once around the app, the first
    outermost; [] without any, else [the chain]."""
    app = _inner_app
    for path in reversed(paths):
        module_name, _, attr = path.rpartition(".")
        module = importlib.import_module(module_name)
        obj = getattr(module, attr)
        if not inspect.isclass(obj):
            raise ValueError(f"stand-in models class middlewares only, not {path!r}")
        app = obj(app)
    return [app] if paths else []
