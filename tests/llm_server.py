"""A real OpenAI-compatible HTTP server for tests, on 127.0.0.1 and a free port, that answers
`POST /v1/chat/completions` from a script and `GET /v1/models` from its model list.

    with ScriptedLLMServer([Reply.code(SOURCE, idea="..."), Reply.status(500), ...]) as server:
        OpenAI(base_url=server.base_url, api_key=server.api_key)...

Each chat request takes the next scripted Reply (the `default` once the script is used up). Like a
real server it checks the bearer key (401) and the model name (404) before the script is consulted,
and records every request it gets in `server.requests`.

It also plays what real servers do that the spec does not say (tests/test_proposer_compat.py):
replies without `usage`, with `reasoning_content`, content parts, odd `finish_reason`s, HTML error
pages, SSE bodies, errors inside a 200 (Reply's fields and constructors); a /models that is missing
or odd (`models_reply`), routes without /v1 (`prefix=""`), parameters it refuses (`refuse_params`),
a chat template without a system role (`refuse_system_role`) and a context window it enforces the
way vLLM or llama.cpp word it (`context_window`).
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
    content: Any = None  # the assistant message's text (or a list of content parts)
    body: Optional[str] = None  # the raw body, sent as is (malformed JSON ...); overrides content
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # wait this long before answering (a slow model)
    tokens_in: int = 120
    tokens_out: int = 340
    finish_reason: Optional[str] = "stop"  # None: the key is left out
    usage: bool = True  # False: no `usage` in the reply (vLLM and some proxies)
    message_extra: dict[str, Any] = field(default_factory=dict)  # reasoning_content, tool_calls ...
    extra: dict[str, Any] = field(default_factory=dict)  # unknown top-level fields
    choices: Optional[list[Any]] = None  # replaces the choices list ([]: none)
    content_type: str = "application/json"

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

    @classmethod
    def html(cls, status: int, title: str = "502 Bad Gateway", **kw: Any) -> Reply:
        """A proxy's error page (nginx, Cloudflare)."""
        page = (f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n<center><h1>{title}</h1></center>"
                "\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n")
        return cls(status=status, body=page, content_type="text/html", **kw)

    @classmethod
    def error_in_200(cls, message: str, code: Any = None, **kw: Any) -> Reply:
        """An error sent with HTTP 200 instead of choices (OpenRouter, some proxies)."""
        return cls(body=json.dumps({"error": {"message": message, "code": code}}), **kw)

    @classmethod
    def streamed(cls, content: str, finish_reason: str = "stop", **kw: Any) -> Reply:
        """An SSE body although no stream was asked for (some proxies stream regardless)."""
        half = len(content) // 2
        events = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": part}, "finish_reason": None}]}
                  for part in (content[:half], content[half:])]
        events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish_reason}],
                       "usage": {"prompt_tokens": 120, "completion_tokens": 340}})
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return cls(body=body, content_type="text/event-stream", **kw)


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
                 models_endpoint: bool = True, models_reply: Optional[Reply] = None, prefix: str = "/v1",
                 refuse_params: Optional[dict[str, str]] = None, context_window: Optional[int] = None,
                 context_style: str = "vllm", refuse_system_role: bool = False):
        self.script = list(script or [])
        self.default = default or Reply.text("I have nothing to add.")
        self.models = models
        self.api_key = api_key
        self.models_endpoint = models_endpoint
        self.models_reply = models_reply  # answers GET /models instead of the model list
        self.prefix = prefix  # where the API is served: "/v1" (most servers) or "" (the root)
        self.refuse_params = refuse_params or {}  # a parameter in the request -> the 400's message
        self.context_window = context_window  # tokens (4 characters each), checked like vLLM / llama.cpp
        self.context_style = context_style  # vllm | llamacpp
        self.refuse_system_role = refuse_system_role
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
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}{self.prefix}"

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

            def _send(self, status: int, body: str, headers: Optional[dict[str, str]] = None,
                      content_type: str = "application/json") -> None:
                data = body.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
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
                given = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                self._error(401, f"Incorrect API key provided: {given}.", "invalid_api_key")  # proxies echo it
                return False

            def do_GET(self) -> None:
                self._record(None)
                if not server.models_endpoint or self.path.rstrip("/") != f"{server.prefix}/models":
                    self._error(404, f"no route {self.path}", "not_found")
                elif not self._authorized():
                    return
                elif server.models_reply is not None:
                    reply = server.models_reply
                    self._send(reply.status, reply.body or "", reply.headers, reply.content_type)
                else:
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
                if self.path.rstrip("/") != f"{server.prefix}/chat/completions":
                    return self._error(404, f"no route {self.path}", "not_found")
                if not self._authorized():
                    return
                model = (body or {}).get("model")
                if model not in server.models:
                    return self._error(404, f"The model `{model}` does not exist or you do not have access to it.",
                                       "model_not_found")
                refused = next((p for p in server.refuse_params if p in (body or {})), None)
                if refused is not None:
                    return self._error(400, server.refuse_params[refused], "unsupported_parameter")
                roles = [m.get("role") for m in (body or {}).get("messages", [])]
                if "system" in roles and server.refuse_system_role:  # Gemma's chat template, o1-mini
                    return self._error(400, "System role not supported", "invalid_request")
                if server.context_window is not None and self._over_context(body or {}):
                    return
                reply = server._next_reply()
                if reply.delay_s and server._closing.wait(reply.delay_s):
                    return
                if reply.body is not None:
                    return self._send(reply.status, reply.body, reply.headers, reply.content_type)
                choice: dict[str, Any] = {"index": 0, "finish_reason": reply.finish_reason,
                                          "message": {"role": "assistant", "content": reply.content,
                                                      **reply.message_extra}}
                if reply.finish_reason is None:
                    del choice["finish_reason"]
                completion = {
                    "id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion", "created": int(time.time()),
                    "model": model, "choices": [choice] if reply.choices is None else reply.choices, **reply.extra,
                }
                if reply.usage:
                    completion["usage"] = {"prompt_tokens": reply.tokens_in, "completion_tokens": reply.tokens_out,
                                           "total_tokens": reply.tokens_in + reply.tokens_out}
                self._send(reply.status, json.dumps(completion), reply.headers, reply.content_type)

            def _over_context(self, body: dict[str, Any]) -> bool:
                """Refuse a request that does not fit the context window, as vLLM or llama.cpp word it."""
                window = server.context_window or 0
                prompt = sum(len(str(m.get("content", ""))) for m in body.get("messages", [])) // 4
                completion = body.get("max_tokens", body.get("max_completion_tokens", 16))
                if server.context_style == "llamacpp":  # llama.cpp only refuses a prompt that does not fit
                    if prompt <= window:
                        return False
                    self._send(400, json.dumps({"error": {
                        "code": 400, "message": "the request exceeds the available context size, try increasing it",
                        "type": "exceed_context_size_error", "n_prompt_tokens": prompt, "n_ctx": window}}))
                    return True
                if prompt + completion <= window:
                    return False
                self._send(400, json.dumps({
                    "object": "error", "type": "BadRequestError", "param": None, "code": 400,
                    "message": f"This model's maximum context length is {window} tokens. However, you requested "
                               f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the "
                               "completion). Please reduce the length of the messages or completion."}))
                return True

        return Handler
