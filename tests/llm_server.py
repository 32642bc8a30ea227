"""A real OpenAI-compatible HTTP server for tests, on 127.0.0.1 and a free port, that answers
`POST /v1/chat/completions` from a script and `GET /v1/models` from its model list.

    with ScriptedLLMServer([Reply.code(SOURCE, idea="..."), Reply.status(500), ...]) as server:
        OpenAI(base_url=server.base_url, api_key=server.api_key)...

Each chat request takes the next scripted Reply (the `default` once the script is used up). Like a
real server it checks the bearer key (401) and the model name (404) before the script is consulted,
and records every request it gets in `server.requests`.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional


@dataclass
class Reply:
    """One scripted answer to a chat request."""

    status: int = 200
    content: Optional[str] = None  # the assistant message's text
    body: Optional[str] = None  # the raw body, sent as is (malformed JSON ...); overrides content
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # wait this long before answering (a slow model)
    tokens_in: int = 120
    tokens_out: int = 340
    finish_reason: str = "stop"

    @classmethod
    def code(cls, source: str, idea: str = "Fuse the reduction into one pass.", **kw: Any) -> Reply:
        return cls(content=f"Idea: {idea}\n\n```python\n{source.rstrip()}\n```\n", **kw)

    @classmethod
    def text(cls, content: str, **kw: Any) -> Reply:
        return cls(content=content, **kw)

    @classmethod
    def error(cls, status: int, message: str = "scripted error", code: Optional[str] = None, **kw: Any) -> Reply:
        body = json.dumps({"error": {"message": message, "type": "server_error", "code": code}})
        return cls(status=status, body=body, **kw)

    @classmethod
    def malformed(cls, **kw: Any) -> Reply:
        return cls(body='{"id": "chatcmpl-1", "choices": [{"message": {"content": "```python', **kw)


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Optional[dict[str, Any]]
    at: float


class ScriptedLLMServer:
    def __init__(self, script: Optional[list[Reply]] = None, *, default: Optional[Reply] = None,
                 models: tuple[str, ...] = ("test-model",), api_key: str = "test-key",
                 models_endpoint: bool = True):
        self.script = list(script or [])
        self.default = default or Reply.text("I have nothing to add.")
        self.models = models
        self.api_key = api_key
        self.models_endpoint = models_endpoint
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread: Optional[threading.Thread] = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def chat_requests(self) -> list[Request]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def start(self) -> ScriptedLLMServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _next_reply(self) -> Reply:
        with self._lock:
            return self.script.pop(0) if self.script else self.default

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: str, headers: Optional[dict[str, str]] = None) -> None:
                data = body.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def _error(self, status: int, message: str, code: str) -> None:
                self._send(status, json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                                         "code": code}}))

            def _record(self, body: Optional[dict[str, Any]]) -> None:
                with server._lock:
                    server.requests.append(Request(self.command, self.path, dict(self.headers), body, time.time()))

            def _authorized(self) -> bool:
                if self.headers.get("Authorization") == f"Bearer {server.api_key}":
                    return True
                self._error(401, "Incorrect API key provided.", "invalid_api_key")
                return False

            def do_GET(self) -> None:
                self._record(None)
                if not server.models_endpoint or self.path.rstrip("/") != "/v1/models":
                    self._error(404, f"no route {self.path}", "not_found")
                elif self._authorized():
                    data = [{"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in server.models]
                    self._send(200, json.dumps({"object": "list", "data": data}))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = None
                self._record(body)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._error(404, f"no route {self.path}", "not_found")
                if not self._authorized():
                    return
                model = (body or {}).get("model")
                if model not in server.models:
                    return self._error(404, f"The model `{model}` does not exist or you do not have access to it.",
                                       "model_not_found")
                reply = server._next_reply()
                if reply.delay_s and server._closing.wait(reply.delay_s):
                    return
                if reply.body is not None:
                    return self._send(reply.status, reply.body, reply.headers)
                completion = {
                    "id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "finish_reason": reply.finish_reason,
                                 "message": {"role": "assistant", "content": reply.content}}],
                    "usage": {"prompt_tokens": reply.tokens_in, "completion_tokens": reply.tokens_out,
                              "total_tokens": reply.tokens_in + reply.tokens_out},
                }
                self._send(reply.status, json.dumps(completion), reply.headers)

        return Handler
