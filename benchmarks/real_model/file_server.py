"""An OpenAI-compatible server on 127.0.0.1 that answers each chat request with a reply file,
verbatim: the model's reply to the prompt the harness rendered for that request.

Replies are looked up by the request's messages (the exact system and user text the harness
rendered), so requests that arrive in any order get their own reply. A request whose messages
match no rendered prompt means the search sent something other than what the model read (the
prompt and the search drifted apart): it still gets the next unserved reply, so the round goes on,
and it is recorded in `drifted` for the harness to report.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional


def messages_key(messages: list[dict[str, Any]]) -> str:
    """The identity of a chat: roles and texts, nothing else."""
    plain = [{"role": m.get("role"), "content": m.get("content")} for m in messages]
    return hashlib.sha256(json.dumps(plain, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class FileReplyServer:
    """Serves `replies` (a list of (messages, reply text)) on a free loopback port."""

    def __init__(self, replies: list[tuple[list[dict[str, Any]], str]], model: str = "file-model"):
        self.model = model
        self._by_key: dict[str, list[str]] = {}
        self._unserved: list[str] = []
        for messages, text in replies:
            self._by_key.setdefault(messages_key(messages), []).append(text)
            self._unserved.append(text)
        self.served: list[dict[str, Any]] = []  # {"messages", "reply", "matched"} per chat request
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread: Optional[threading.Thread] = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def drifted(self) -> list[dict[str, Any]]:
        return [s for s in self.served if not s["matched"]]

    def _answer(self, messages: list[dict[str, Any]]) -> Optional[str]:
        with self._lock:
            queue = self._by_key.get(messages_key(messages)) or []
            matched = bool(queue)
            text = queue.pop(0) if queue else (self._unserved[0] if self._unserved else None)
            if text is not None:
                self._unserved.remove(text)
                if not matched:  # the same text must not be served again under its own prompt
                    for texts in self._by_key.values():
                        if text in texts:
                            texts.remove(text)
                            break
            self.served.append({"messages": messages, "reply": text, "matched": matched})
            return text

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet: the harness reports what matters
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "the request body is not JSON"}})
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                text = server._answer(body.get("messages") or [])
                if text is None:  # more requests than replies: the harness's own mistake, said plainly
                    self._send(503, {"error": {"message": "the harness has no reply file left for this request"}})
                    return
                self._send(200, {"id": f"chatcmpl-{len(server.served)}", "object": "chat.completion",
                                 "created": int(time.time()), "model": server.model,
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": text}}]})

        return Handler

    def __enter__(self) -> FileReplyServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
