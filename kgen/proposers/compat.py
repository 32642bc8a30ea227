"""What OpenAI-compatible servers really send, read leniently: the openai proposer's view of a reply
and of an error, whichever server (OpenAI, vLLM, SGLang, llama.cpp, Ollama, LM Studio, TGI, LiteLLM,
OpenRouter, DeepSeek) wrote it.

- base URLs: given with a trailing slash, or as the full `.../v1/chat/completions` URL;
- replies: `usage` missing or partial, `content` null with the answer in `reasoning_content` or
  `reasoning`, content as a list of parts, the legacy `text` of a choice, a streamed (SSE) body sent
  although no stream was asked for, `finish_reason` missing or spelled otherwise, `choices` empty, an
  HTTP 200 carrying `{"error": {...}}` instead of choices;
- errors: bodies that are HTML (a proxy's 502 page) or FastAPI's `{"detail": ...}`, and the many ways
  servers say a request does not fit the model's context (parsed for the numbers they give).
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from typing import Any, Optional
from urllib.parse import urlsplit, urlunsplit

from kgen.core.errors import KgenError

# --- base URLs ----------------------------------------------------------------------------------

_ENDPOINT_SUFFIX = re.compile(r"/(?:chat/completions|completions|models|responses)$")
_VERSION_SEGMENT = re.compile(r"/v\d+\w*$")


def normalize_base_url(url: Optional[str]) -> Optional[str]:
    """The base URL the openai client wants: no trailing slash, no endpoint path after it (users
    paste `http://host:8000/v1/chat/completions` from a curl example). No scheme: a KgenError."""
    if url is None or not url.strip():
        return None
    if "://" not in url:
        raise KgenError(f"the base URL '{url.strip()}' needs its scheme: http://{url.strip()} (or https://)")
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    path = _ENDPOINT_SUFFIX.sub("", path).rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


def versioned_alternative(url: str) -> Optional[str]:
    """`url` + '/v1' when its path ends in no version segment (`http://host:8000`, where vLLM,
    llama.cpp, Ollama, LM Studio and TGI all serve `/v1/...`), else None."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if _VERSION_SEGMENT.search(path):
        return None
    return urlunsplit((parts.scheme, parts.netloc, path + "/v1", parts.query, parts.fragment))


# --- secrets ------------------------------------------------------------------------------------

_SECRET_PATTERNS = (
    (re.compile(r"\b(sk-[A-Za-z0-9]{0,12}[-_]?)[A-Za-z0-9_\-]{12,}"), r"\1***"),
    (re.compile(r"(Bearer\s+)[^\s\"',]+", re.I), r"\1***"),
    (re.compile(r"([?&](?:api[-_]?key|key|token|access_token)=)[^&\s\"']+", re.I), r"\1***"),
    (re.compile(r"(\w+://)[^/\s@\"']+@"), r"\1***@"),
)


def redact(text: Optional[str], secrets: tuple[str, ...] = ()) -> Optional[str]:
    """`text` without the given secrets (the API key) and without what looks like a key, a bearer
    token or a URL's credentials: a server may echo them in an error."""
    if not text:
        return text
    for secret in secrets:
        if secret and len(secret) >= 6:
            text = text.replace(secret, "***")
    for pattern, repl in _SECRET_PATTERNS:
        text = pattern.sub(repl, text)
    return text


# --- errors -------------------------------------------------------------------------------------

def one_line(text: Any, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _html_text(text: str) -> Optional[str]:
    """The title (or first heading) of an HTML page, for a proxy's error page."""
    if "<" not in text or not re.search(r"<(?:!doctype|html|head|body|title|h1)\b", text, re.I):
        return None
    for tag in ("title", "h1", "h2"):
        m = re.search(rf"<{tag}[^>]*>(.*?)</{tag}>", text, re.I | re.S)
        if m and m.group(1).strip():
            return "an HTML page: " + one_line(html.unescape(re.sub(r"<[^>]+>", "", m.group(1))), 120)
    return "an HTML page"


def error_message(body: Any, raw: Optional[str] = None) -> Optional[str]:
    """The message in an error body: `{"error": {"message"}}` (OpenAI), `{"error": "..."}` (Ollama),
    `{"message": ...}` (vLLM), `{"detail": ...}` (FastAPI servers), else the raw text, an HTML page
    reduced to its title."""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            for key in ("message", "msg", "detail"):
                if err.get(key):
                    return one_line(_detail_text(err[key]))
        elif isinstance(err, str) and err:
            return one_line(err)
        for key in ("message", "detail"):
            if body.get(key):
                return one_line(_detail_text(body[key]))
    if isinstance(body, str) and body.strip():
        raw = body
    if raw and raw.strip():
        return _html_text(raw) or one_line(raw, 200)
    return None


def _detail_text(detail: Any) -> str:
    """FastAPI's validation detail, `[{"loc": ["body", "max_tokens"], "msg": "..."}]`, as one line."""
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                loc = ".".join(str(p) for p in item.get("loc", []) if p != "body")
                parts.append(f"{loc}: {item.get('msg', '')}" if loc else str(item.get("msg", item)))
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)


def embedded_status(err: Any) -> Optional[int]:
    """The HTTP status an `{"error": {...}}` body sent with a 200 stands for, when it says."""
    if not isinstance(err, dict):
        return None
    for key in ("code", "status", "status_code"):
        value = err.get(key)
        if isinstance(value, int) and 400 <= value < 600:
            return value
        if isinstance(value, str) and value.isdigit() and 400 <= int(value) < 600:
            return int(value)
    kind = str(err.get("type") or err.get("code") or "").lower()
    if "rate_limit" in kind:
        return 429
    if "auth" in kind or "invalid_api_key" in kind:
        return 401
    if "context" in kind or "invalid_request" in kind:
        return 400
    return None


# --- context length -----------------------------------------------------------------------------

_CONTEXT_WORDS = re.compile(
    r"context[ _-]?(?:length|window|size|limit)|maximum context|exceed_context|n_ctx|prompt is too long|"
    r"input is too long|too many (?:input )?tokens|reduce the length|`inputs` tokens|input length and", re.I)
_WINDOW = (
    re.compile(r"maximum context length is (\d+)", re.I),
    re.compile(r"context (?:length|window|size|limit) (?:is |of )?(?:only )?(\d+)", re.I),
    re.compile(r"\"?n_ctx\"?\s*[:=]\s*(\d+)", re.I),
    re.compile(r"must be <= (\d+)\. Given: \d+ `inputs` tokens", re.I),  # TGI
    re.compile(r"exceed context limit: \d+ \+ \d+ > (\d+)", re.I),  # Anthropic behind a proxy
    re.compile(r"prompt is too long: \d+ tokens > (\d+)", re.I),
)
_PROMPT = (
    re.compile(r"(\d+) in the messages", re.I),
    re.compile(r"(?:has|with|contains|of) (\d+) input tokens", re.I),
    re.compile(r"messages resulted in (\d+) tokens", re.I),
    re.compile(r"Given: (\d+) `inputs` tokens", re.I),
    re.compile(r"\"?n_prompt_tokens\"?\s*[:=]\s*(\d+)", re.I),
    re.compile(r"exceed context limit: (\d+) \+", re.I),
    re.compile(r"prompt is too long: (\d+) tokens", re.I),
    re.compile(r"prompt (?:has|contains) (\d+) tokens", re.I),
)
# the model's own cap on completion tokens (not the context): max_tokens can simply be lowered to it
_COMPLETION_CAP = (
    re.compile(r"at most (\d+) completion tokens", re.I),
    re.compile(r"(?:max_tokens|max_completion_tokens|max_new_tokens)`?[^.\d]{0,40}?(?:<=|less than or equal to|"
               r"at most|maximum value for `?\w+`? is)\s*`?(\d+)", re.I),
    re.compile(r"valid range of max_tokens is \[\d+,\s*(\d+)\]", re.I),
    re.compile(r"> (\d+), which is the maximum allowed number of output tokens", re.I),
)


@dataclass
class ContextOverflow:
    """A request the model could not take for its size, with the numbers the server gave."""

    window: Optional[int] = None  # the model's context, in tokens
    prompt_tokens: Optional[int] = None
    completion_cap: Optional[int] = None  # the most completion tokens the model allows


def _first_int(patterns: tuple[re.Pattern, ...], text: str) -> Optional[int]:
    for pattern in patterns:
        m = pattern.search(text)
        if m:
            return int(m.group(1))
    return None


def context_overflow(text: str) -> Optional[ContextOverflow]:
    """The overflow `text` (an error's message and body) reports, or None if it reports none."""
    if _CONTEXT_WORDS.search(text):
        return ContextOverflow(window=_first_int(_WINDOW, text), prompt_tokens=_first_int(_PROMPT, text))
    cap = _first_int(_COMPLETION_CAP, text)
    if cap is not None and re.search(r"too large|maximum|at most|<=|less than|range", text, re.I):
        return ContextOverflow(completion_cap=cap)
    return None


def estimated_tokens(messages: list[dict[str, Any]]) -> int:
    """A rough token count of the messages (4 characters a token), for messages, never for limits."""
    return sum(len(str(m.get("content", ""))) for m in messages) // 4


# --- replies ------------------------------------------------------------------------------------

TRUNCATED_REASONS = {"length", "max_tokens", "max_output_tokens", "model_length", "max_length", "token_limit"}


class EmbeddedError(Exception):
    """An HTTP 200 whose body is an error (some proxies), with the status it stands for if it says."""

    def __init__(self, message: str, status: Optional[int]):
        super().__init__(message)
        self.status = status


class UnreadableReply(Exception):
    """A body that is no chat completion at all."""


@dataclass
class ChatReply:
    content: Optional[str]
    reasoning: Optional[str]
    finish_reason: Optional[str]
    tokens_in: Optional[int]
    tokens_out: Optional[int]

    @property
    def truncated(self) -> bool:
        return (self.finish_reason or "").lower() in TRUNCATED_REASONS

    def transcript(self) -> Optional[str]:
        """The text to store and extract from: the reasoning (if the server split it off) in a
        <think> block, closed unless the reply was cut off while reasoning, then the answer."""
        if not self.reasoning:
            return self.content
        if not self.content and self.truncated:
            return f"<think>\n{self.reasoning}"
        return f"<think>\n{self.reasoning}\n</think>\n\n{self.content or ''}"


def _count(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and value >= 0:
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _usage(data: dict) -> tuple[Optional[int], Optional[int]]:
    """(prompt, completion) tokens; None where the server did not say (vLLM's usage is optional,
    some proxies drop it, others name the fields input_tokens/output_tokens)."""
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return None, None
    tokens_in = _count(usage.get("prompt_tokens", usage.get("input_tokens")))
    tokens_out = _count(usage.get("completion_tokens", usage.get("output_tokens")))
    return tokens_in, tokens_out


def _text_of(value: Any) -> Optional[str]:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(t for t in (_text_of(v) for v in value) if t) or None
    if isinstance(value, dict):
        return _text_of(value.get("text", value.get("content")))
    return None


def _message_texts(message: dict) -> tuple[Optional[str], Optional[str]]:
    """(content, reasoning) of a message or a stream's delta."""
    content = message.get("content")
    reasoning = _text_of(message.get("reasoning_content")) or _text_of(message.get("reasoning"))
    if isinstance(content, dict):
        content = _text_of(content)
    if isinstance(content, list):  # content parts; Mistral's reasoning models add "thinking" parts
        said, thought = [], []
        for part in content:
            if isinstance(part, str):
                said.append(part)
            elif isinstance(part, dict):
                kind = str(part.get("type", "text"))
                if kind in ("thinking", "reasoning"):
                    thought.append(_text_of(part.get(kind)) or _text_of(part.get("text")) or "")
                elif kind in ("text", "output_text") or "text" in part:
                    said.append(_text_of(part.get("text")) or "")
        content = "".join(said) or None
        reasoning = reasoning or "".join(thought) or None
    return (content if isinstance(content, str) else None), reasoning


def _from_json(data: Any) -> ChatReply:
    if not isinstance(data, dict):
        raise UnreadableReply(f"a reply that is not a chat completion (JSON {type(data).__name__})")
    choices = data.get("choices")
    if not choices and data.get("error"):
        err = data["error"]
        raise EmbeddedError(error_message({"error": err}) or "an error", embedded_status(err))
    if not choices and (data.get("object") == "error" or data.get("detail")):  # vLLM's or FastAPI's error shape
        raise EmbeddedError(error_message(data) or "an error", embedded_status(data))
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UnreadableReply("a reply with no choices" if isinstance(choices, list) or choices is None
                              else "a reply whose choices are not a list")
    choice = choices[0]
    message = choice.get("message") or choice.get("delta")
    if isinstance(message, dict):
        content, reasoning = _message_texts(message)
    elif isinstance(choice.get("text"), str):  # the legacy completions shape
        content, reasoning = choice["text"], None
    else:
        raise UnreadableReply("a reply with no choices[0].message")
    finish = choice.get("finish_reason")
    tokens_in, tokens_out = _usage(data)
    return ChatReply(content, reasoning, finish if isinstance(finish, str) else None, tokens_in, tokens_out)


def _from_sse(text: str) -> ChatReply:
    """A streamed body (`data: {...}` events) from a server or proxy that streams regardless."""
    content, reasoning, finish = [], [], None
    tokens_in = tokens_out = None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        try:
            event = json.loads(payload)
        except ValueError as e:
            raise UnreadableReply(f"malformed JSON in a streamed reply: {e}") from e
        if not isinstance(event, dict):
            continue
        if event.get("error") and not event.get("choices"):
            raise EmbeddedError(error_message({"error": event["error"]}) or "an error",
                                embedded_status(event["error"]))
        ins, outs = _usage(event)
        tokens_in, tokens_out = ins if ins is not None else tokens_in, outs if outs is not None else tokens_out
        for choice in event.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            said, thought = _message_texts(delta) if isinstance(delta, dict) else (None, None)
            content.append(said or choice.get("text") or "")
            reasoning.append(thought or "")
            finish = choice.get("finish_reason") or finish
    return ChatReply("".join(content) or None, "".join(reasoning) or None, finish, tokens_in, tokens_out)


def parse_chat_reply(text: str) -> ChatReply:
    """The reply in a chat completion body. Raises EmbeddedError for an error sent as a reply,
    UnreadableReply for a body that holds none (malformed JSON, an HTML page, no choices)."""
    stripped = text.lstrip()
    if stripped.startswith(("data:", "event:")):
        return _from_sse(stripped)
    try:
        data = json.loads(text)
    except ValueError as e:
        page = _html_text(text)
        if page:
            raise UnreadableReply(f"{page} instead of JSON (is the base URL the API's, ending in /v1?)") from e
        raise UnreadableReply(f"malformed JSON in the reply: {e}") from e
    return _from_json(data)


def model_ids(text: str) -> Optional[list[str]]:
    """The model names in a `GET /models` body: OpenAI's `{"data": [{"id"}]}`, and, leniently, a bare
    list, `{"models": [...]}` (Ollama's own shape) or entries named by `name`/`model`. None when the
    body lists nothing recognisable."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if isinstance(data, dict):
        data = data.get("data") if isinstance(data.get("data"), list) else data.get("models")
    if not isinstance(data, list):
        return None
    ids = []
    for item in data:
        if isinstance(item, str):
            ids.append(item)
        elif isinstance(item, dict):
            name = item.get("id") or item.get("name") or item.get("model")
            if isinstance(name, str) and name:
                ids.append(name)
    return ids or None
