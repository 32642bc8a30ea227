"""The `openai` proposer: candidates from any OpenAI-compatible chat endpoint.

Requests: up to `concurrency` in flight (threads). The client's own retries are off; ours retry
429, 408, 409, 5xx, connection errors, timeouts and malformed replies with exponential backoff and
jitter, honouring `Retry-After` (seconds, milliseconds or an HTTP date, capped). A 401/403 (key),
a 404 (unknown model or wrong base URL) or a 429 `insufficient_quota` is a KgenError at once. A
request that still fails after its retries becomes a Proposal with no source and the error, stored
as `no_code`; a round in which every request failed to reach the server at all is a KgenError.

Servers differ (kgen/proposers/compat.py reads their replies and errors): a request refused for its
parameters is adapted once (max_tokens -> max_completion_tokens -> no limit; temperature dropped; the
system message folded into the user's for templates without a system role); one
that does not fit the model's context is retried at once with max_tokens lowered to what fits when the
server says how much that is, else it fails without retries, the prompt's size in its error. Errors
stored or raised never hold the API key.

Each round, some requests repair a recent failure (repair.j2) instead of proposing (propose.j2):
`repair_fraction` of the requests on average, spread over rounds (n=4, 0.25: one per round; n=1:
one round in four), each on a different failure that has no child yet, newest first.

Tokens and latency are those of the attempt whose reply is stored; `attempts` counts them all.
"""

from __future__ import annotations

import email.utils
import logging
import math
import random
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Optional

import openai

from kgen.core.errors import KgenError
from kgen.core.records import Proposal
from kgen.judge.static_checks import detect_language
from kgen.problems.problem import Problem
from kgen.proposers.compat import (
    ContextOverflow,
    EmbeddedError,
    UnreadableReply,
    context_overflow,
    error_message,
    estimated_tokens,
    model_ids,
    normalize_base_url,
    parse_chat_reply,
    redact,
    versioned_alternative,
)
from kgen.proposers.compat import one_line as _one_line
from kgen.proposers.extract import extract_candidate
from kgen.proposers.prompts import PromptRenderer, failure_view, prompt_context
from kgen.store.history import History
from kgen.store.queries import ScoredCandidate, normalized_source_hash

log = logging.getLogger("kgen.proposers.openai")

RETRY_STATUS = (408, 409, 429)
CHECK_TIMEOUT_S = 30.0
# a completion budget lowered to fit the context is never made smaller than this
MIN_COMPLETION_TOKENS = 256
CONTEXT_SHRINKS = 2  # per request: once from the server's numbers, once more if they were estimates
ERROR_MAX_CHARS = 500  # a stored error is one short line
ADAPTATIONS = 3  # per request: max_tokens -> max_completion_tokens -> none, and temperature


@dataclass
class RetryPolicy:
    max_retries: int = 5  # retries after the first attempt
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0
    retry_after_max_s: float = 120.0

    def delay_s(self, retry_index: int, retry_after_s: Optional[float]) -> float:
        """Seconds before retry `retry_index` (0-based): the server's Retry-After when it sent one
        (capped), else exponential backoff with jitter."""
        if retry_after_s is not None:
            return min(max(retry_after_s, 0.0), self.retry_after_max_s)
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2 ** retry_index)
        return ceiling * random.uniform(0.5, 1.0)


def parse_retry_after(headers: Any) -> Optional[float]:
    """Retry-After in seconds, from `retry-after-ms`, or `retry-after` as seconds or an HTTP date."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _Retryable(Exception):
    def __init__(self, message: str, retry_after_s: Optional[float] = None, response: Optional[str] = None,
                 unreachable: bool = False):
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.response = response
        self.unreachable = unreachable


class _Adapted(Exception):
    """The server refused a parameter and the requests no longer send it: retry at once, for free."""


class _Final(Exception):
    """The server answered and no retry would change its answer (a 400 for this request)."""


class _Overflow(Exception):
    """The request does not fit the model's context (or asks for more completion tokens than it has)."""

    def __init__(self, message: str, overflow: ContextOverflow):
        super().__init__(message)
        self.overflow = overflow


@dataclass
class _Job:
    template: str  # propose | repair
    messages: list[dict[str, str]]
    parent_ids: list[int]
    origin: str


@dataclass
class CallResult:
    """One chat request after its retries."""

    content: Optional[str] = None  # the reply's text, or the raw body of a malformed reply
    truncated: bool = False
    tokens_in: Optional[int] = None  # None: the server did not say (no `usage`)
    tokens_out: Optional[int] = None
    latency_s: Optional[float] = None
    attempts: int = 0
    error: Optional[str] = None
    unreachable: bool = False  # every attempt failed before the server answered
    finish_reason: Optional[str] = None


_UNSUPPORTED = re.compile(r"unsupported|not supported|unrecognized|unknown|extra (?:inputs|fields)|not permitted|"
                          r"not allowed|does not support|invalid|use 'max_completion_tokens'", re.I)


class OpenAIProposer:
    name = "openai"

    def __init__(self, *, problem: Problem, model: Optional[str], base_url: Optional[str], api_key: str,
                 language: str = "any", temperature: float = 0.8, max_tokens: int = 8192, concurrency: int = 4,
                 request_timeout_s: float = 600, retry: Optional[RetryPolicy] = None,
                 renderer: Optional[PromptRenderer] = None, repair_fraction: float = 0.25,
                 api_key_env: str = "OPENAI_API_KEY"):
        self.problem = problem
        self.model = model
        self.language = language
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.concurrency = concurrency
        self.request_timeout_s = request_timeout_s
        self.retry = retry or RetryPolicy()
        self.renderer = renderer or PromptRenderer()
        self.repair_fraction = repair_fraction
        self.api_key_env = api_key_env
        self._secrets = (api_key,)
        self.client = openai.OpenAI(api_key=api_key, base_url=normalize_base_url(base_url), max_retries=0,
                                    timeout=request_timeout_s)
        self.base_url = str(self.client.base_url).rstrip("/")
        self._stop = threading.Event()
        self._params_lock = threading.Lock()
        self._token_param: Optional[str] = "max_tokens"  # None: the server takes no limit we know of
        self._send_temperature = True
        self._merge_system = False  # the model's chat template takes no system role (Gemma, o1-mini)
        self._completion_cap: Optional[int] = None  # the model's own cap on completion tokens
        self._context_window: Optional[int] = None  # the model's context, once a server has said it

    @property
    def shown_url(self) -> str:
        """The base URL for messages and the DB: without credentials or a key in its query."""
        return redact(self.base_url) or ""

    def _redact(self, text: Optional[str]) -> Optional[str]:
        return redact(text, self._secrets)

    def _use_base_url(self, url: str, why: str) -> None:
        log.warning("%s; using %s (pass it as --base-url to skip this)", why, redact(url))
        self.client = self.client.copy(base_url=url)
        self.base_url = url.rstrip("/")

    # --- fail fast ---------------------------------------------------------------------------

    def check(self) -> None:
        """Render the templates, then reach the endpoint once (GET /models; a one-token chat only if
        the model is not listed), so that a bad template, a bad key, an unknown model or an
        unreachable server stops here, in one line. A model left unset is the endpoint's only
        model, when it serves exactly one. A server without /models (or with an odd one) is not
        checked: a warning, and the first request finds out. A base URL without /v1 whose /models
        or chat route only answers under /v1 is completed with it."""
        self._check_templates()
        alternative = versioned_alternative(self.base_url)
        offered = self._offered_models(alternative)
        if self.model is None:
            if offered and len(offered) == 1:
                self.model = offered[0]
                log.info("using the endpoint's only model, %s", self.model)
            else:
                listed = f" (it offers: {', '.join(offered[:10])})" if offered else ""
                raise KgenError(f"no model given: pass --model or set KGEN_MODEL{listed}")
        if offered and not ({self.model, f"{self.model}:latest"} & set(offered)):
            self._probe_model(offered)
        elif offered is None and alternative is not None:
            self._probe_route(alternative)

    def _offered_models(self, alternative: Optional[str]) -> Optional[list[str]]:
        """The models GET /models lists (trying `alternative` too when the base URL's has none), or
        None when the endpoint lists none we can read. A 401, or no server at all, is a KgenError."""
        why = None
        for url in [self.base_url, *([alternative] if alternative else [])]:
            client = self.client if url == self.base_url else self.client.copy(base_url=url)
            try:
                raw = client.models.with_raw_response.list(timeout=min(self.request_timeout_s, CHECK_TIMEOUT_S))
                offered = model_ids(raw.http_response.text)
                why = why or (None if offered else f"an unexpected reply ({error_message(raw.http_response.text)})")
            except openai.AuthenticationError as e:
                raise self._auth_error(e) from e
            except openai.APITimeoutError:
                why = why or "no answer in time"
                break
            except openai.APIConnectionError as e:
                raise KgenError(f"cannot reach the OpenAI-compatible endpoint at {self.shown_url}: "
                                f"{self._connection_reason(e)} (is the server running? "
                                "check OPENAI_BASE_URL / --base-url)") from e
            except openai.APIStatusError as e:
                why = why or f"{e.status_code} ({self._status_message(e)})"
                if e.status_code == 403:
                    break  # a key allowed to chat but not to list models: the first request checks it
                continue
            except (openai.APIError, ValueError, AttributeError, TypeError) as e:
                why = why or _one_line(str(e))
                continue
            if offered:
                if url != self.base_url:
                    self._use_base_url(url, f"{self.shown_url}/models answered {why}")
                return offered
        log.warning("GET %s/models: %s; the model is not checked before the first request",
                    self.shown_url, self._redact(why))
        return None

    def _check_templates(self) -> None:
        """Render every template once, with a candidate and a failure in the history, so that a user
        template's undefined variable stops the search before its first request."""
        sample = ScoredCandidate(id=0, run_id=None, round=1, source="class ModelNew: ...", language="triton",
                                 idea="an idea", proposer="openai", parent_ids=[], outcome="correct", message="",
                                 runtime_ms=1.0, speedup_eager=1.0, speedup_compile=1.0, roofline_pct=50.0,
                                 device="cpu", torch_ops=[])
        failed = replace(sample, id=1, outcome="compile_error", message="error: ...", runtime_ms=None)
        context = prompt_context(self.problem, History(best=[sample], failures=[failed],
                                                       ideas_that_worked=["an idea"]), self.language)
        self.renderer.messages("propose.j2", context)
        self.renderer.messages("repair.j2", dict(context, failure=failure_view(failed)))

    def _probe(self, client: openai.OpenAI) -> Optional[openai.NotFoundError]:
        """A one-token chat: the 404 it got, or None when the server took the model (any other answer,
        a 400 for the parameters included, says it exists)."""
        try:
            client.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "Say OK."}],
                                           max_tokens=1, timeout=min(self.request_timeout_s, CHECK_TIMEOUT_S))
        except openai.NotFoundError as e:
            return e
        except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
            raise self._auth_error(e) from e
        except (openai.APIError, ValueError) as e:
            log.info("model probe answered %s", self._redact(_one_line(str(e))))
        return None

    def _probe_model(self, offered: list[str]) -> None:
        e = self._probe(self.client)
        if e is not None:
            raise KgenError(f"unknown model '{self.model}' at {self.shown_url} (404: {self._status_message(e)}; "
                            f"it offers: {', '.join(offered[:10])})") from e

    def _probe_route(self, alternative: str) -> None:
        """A base URL with no version and no /models: find whether chat is served there or under /v1."""
        e = self._probe(self.client)
        if e is None:
            return
        if self._probe(self.client.copy(base_url=alternative)) is None:
            self._use_base_url(alternative, f"{self.shown_url}/chat/completions answered 404")
            return
        raise KgenError(f"unknown model '{self.model}' or wrong base URL: {self.shown_url} and {redact(alternative)} "
                        f"both answered 404 ({self._status_message(e)})") from e

    def _status_message(self, e: openai.APIStatusError) -> str:
        try:
            raw = e.response.text
        except Exception:  # noqa: BLE001 - a body that cannot be read has no message to give
            raw = None
        return self._redact(error_message(e.body, raw) or _one_line(e.message)) or ""

    def _auth_error(self, e: openai.APIStatusError) -> KgenError:
        return KgenError(f"{self.shown_url} refused the API key ({e.status_code}: {self._status_message(e)}); "
                         f"check {self.api_key_env}")

    def _connection_reason(self, e: openai.APIConnectionError) -> str:
        if isinstance(e, openai.APITimeoutError):
            return "the request timed out"
        cause = e.__cause__ or e.__context__
        return self._redact(_one_line(str(cause) if cause else e.message)) or "connection failed"

    # --- one request, with retries ---------------------------------------------------------

    def _completion_limit(self, messages: list[dict[str, str]]) -> int:
        """max_tokens for these messages: the configured one, within the model's cap and, once the
        server has told the context's size, within what this prompt leaves of it."""
        with self._params_lock:
            limit = min(self.max_tokens, self._completion_cap or self.max_tokens)
            window = self._context_window
        if window:
            room = window - estimated_tokens(messages) * 4 // 3 - max(16, window // 100)
            if room >= MIN_COMPLETION_TOKENS:
                limit = min(limit, room)
        return limit

    def _request_args(self, limit: int) -> dict[str, Any]:
        with self._params_lock:
            args: dict[str, Any] = {self._token_param: limit} if self._token_param else {}
            if self._send_temperature:
                args["temperature"] = self.temperature
            return args

    def _adapt_to(self, message: str, sent: dict[str, Any]) -> bool:
        """Reasoning models refuse max_tokens (they take max_completion_tokens), some servers refuse
        that too, and temperature, and some chat templates a system message: stop sending it, and say
        whether a retry is worth it (also when a concurrent request has already adapted to the same
        refusal)."""
        text = message.lower()
        refused = _UNSUPPORTED.search(text) is not None
        names_max_tokens = "max_tokens" in text.replace("max_completion_tokens", "")
        with self._params_lock:
            if "max_tokens" in sent and names_max_tokens and (refused or "max_completion_tokens" in text):
                changed = self._token_param == "max_tokens"
                self._token_param = "max_completion_tokens" if changed else self._token_param
            elif "max_completion_tokens" in sent and "max_completion_tokens" in text and refused:
                changed = self._token_param == "max_completion_tokens"
                self._token_param = None if changed else self._token_param
            elif "temperature" in sent and "temperature" in text:
                changed, self._send_temperature = self._send_temperature, False
            elif "system" in text and "role" in text and any(m.get("role") == "system" for m in sent["messages"]):
                changed, self._merge_system = not self._merge_system, True
            else:
                return False
        if changed:
            log.warning("the server refused a parameter (%s); adapting the requests", message)
        return True

    def _failure(self, status: Optional[int], message: str, raw: str, headers: Any,
                 sent: dict[str, Any]) -> Exception:
        """What an error answer means for this request: an exception to raise."""
        if status not in (401, 403, 404, 429):
            overflow = context_overflow(f"{message} {raw[:2000]}")
            if overflow is not None:
                return _Overflow(message, overflow)
        if status in (401, 403):
            return KgenError(f"{self.shown_url} refused the API key ({status}: {message}); check {self.api_key_env}")
        if status == 429:
            if "insufficient_quota" in raw:
                return KgenError(f"{self.shown_url}: quota exceeded (429: {message})")
            return _Retryable(f"429: {message}", parse_retry_after(headers))
        if status == 404:
            return KgenError(f"unknown model '{self.model}' or wrong base URL at {self.shown_url} (404: {message})")
        if status in (400, 422) and self._adapt_to(message, sent):
            return _Adapted(f"{status}: {message}")
        if status is None or status in RETRY_STATUS or status >= 500:
            label = f"{status}" if status else "error in the reply"
            return _Retryable(f"{label}: {message}", parse_retry_after(headers))
        return _Final(f"{status}: {message}")

    def _wire_messages(self, messages: list[dict[str, str]]) -> list[dict[str, str]]:
        """The messages as this server takes them: the system message folded into the first user
        message when the model's template has no system role (the stored prompt keeps both)."""
        with self._params_lock:
            merge = self._merge_system
        system = [m["content"] for m in messages if m.get("role") == "system"]
        if not merge or not system:
            return messages
        rest = [dict(m) for m in messages if m.get("role") != "system"]
        first_user = next((m for m in rest if m.get("role") == "user"), None)
        if first_user is None:
            return [{"role": "user", "content": "\n\n".join(system)}, *rest]
        first_user["content"] = "\n\n".join([*system, first_user["content"]])
        return rest

    def _attempt(self, messages: list[dict[str, str]], limit: int) -> CallResult:
        args = self._request_args(limit)
        wire = self._wire_messages(messages)
        sent = dict(args, messages=wire)
        try:
            raw = self.client.chat.completions.with_raw_response.create(
                model=self.model, messages=wire, timeout=self.request_timeout_s, **args)
            text = raw.http_response.text
        except openai.APIStatusError as e:
            try:
                body_text = e.response.text
            except Exception:  # noqa: BLE001 - an unreadable body: the message is all there is
                body_text = ""
            raise self._failure(e.status_code, self._status_message(e), body_text, e.response.headers, sent) from e
        except openai.APIConnectionError as e:
            raise _Retryable(f"{self._connection_reason(e)} ({self.shown_url})",
                             unreachable=not isinstance(e, openai.APITimeoutError)) from e
        try:
            reply = parse_chat_reply(text)
        except EmbeddedError as e:  # a 200 carrying an error (OpenRouter, some proxies)
            raise self._failure(e.status, self._redact(str(e)) or "", text, raw.http_response.headers, sent) from e
        except UnreadableReply as e:
            raise _Retryable(str(e), response=text) from e
        return CallResult(content=reply.transcript(), truncated=reply.truncated, tokens_in=reply.tokens_in,
                          tokens_out=reply.tokens_out, finish_reason=reply.finish_reason)

    def _fitted_limit(self, overflow: ContextOverflow, messages: list[dict[str, str]], limit: int) -> Optional[int]:
        """A smaller max_tokens that the server's numbers say would fit, or None when none would."""
        if overflow.completion_cap is not None:
            with self._params_lock:
                self._completion_cap = overflow.completion_cap
            return overflow.completion_cap if overflow.completion_cap < limit else None
        if overflow.window is None:
            return None
        with self._params_lock:
            self._context_window = overflow.window
        prompt = overflow.prompt_tokens or estimated_tokens(messages) * 4 // 3
        room = overflow.window - prompt - max(16, overflow.window // 100)
        return room if MIN_COMPLETION_TOKENS <= room < limit else None

    def _overflow_error(self, e: _Overflow, messages: list[dict[str, str]], limit: int) -> str:
        o = e.overflow
        chars = sum(len(str(m.get("content", ""))) for m in messages)
        prompt = (f"{o.prompt_tokens} prompt tokens" if o.prompt_tokens is not None
                  else f"a prompt of {chars} characters, ~{estimated_tokens(messages)} tokens")
        window = f"context of {o.window} tokens" if o.window else "context"
        return (f"context length exceeded: {prompt} and max_tokens {limit} do not fit the model's {window} "
                f"(shorten the prompt or raise the server's context): {_one_line(str(e), 160)}")

    def complete(self, messages: list[dict[str, str]]) -> CallResult:
        """One chat request with retries; KgenError for what no retry can fix."""
        result = CallResult()
        ever_answered = False
        limit = self._completion_limit(messages)
        shrinks = adaptations = 0  # retries that cost no backoff and no retry of max_retries
        for retry_index in range(self.retry.max_retries + 1 + CONTEXT_SHRINKS + ADAPTATIONS):
            if self._stop.is_set():
                result.error = result.error or "cancelled: another request hit a fatal error"
                break
            result.attempts += 1
            start = time.monotonic()
            try:
                reply = self._attempt(messages, limit)
            except _Overflow as e:
                result.latency_s = time.monotonic() - start
                ever_answered = True
                fitted = self._fitted_limit(e.overflow, messages, limit) if shrinks < CONTEXT_SHRINKS else None
                if fitted is None:
                    result.error = self._overflow_error(e, messages, limit)
                    break
                log.warning("the request does not fit the model's context (%s); retrying with max_tokens %d",
                            _one_line(str(e), 160), fitted)
                limit, shrinks = fitted, shrinks + 1
                continue
            except _Adapted as e:
                result.latency_s = time.monotonic() - start
                result.error, ever_answered = str(e), True
                adaptations += 1
                if adaptations > ADAPTATIONS:
                    break
                continue
            except _Retryable as e:
                result.latency_s = time.monotonic() - start
                result.error, result.content = str(e), e.response
                ever_answered = ever_answered or not e.unreachable
                retries = retry_index - shrinks - adaptations
                if retries >= self.retry.max_retries:
                    break
                delay = self.retry.delay_s(retries, e.retry_after_s)
                log.warning("%s; retry %d/%d in %.1f s", self._redact(str(e)), retries + 1, self.retry.max_retries,
                            delay)
                self._stop.wait(delay)
                continue
            except _Final as e:
                result.latency_s = time.monotonic() - start
                result.error = str(e)
                ever_answered = True
                break
            reply.latency_s, reply.attempts = time.monotonic() - start, result.attempts
            return reply
        result.unreachable = not ever_answered
        if result.attempts > 1 and result.error and not result.error.startswith("context length exceeded"):
            result.error = f"gave up after {result.attempts} attempts: {result.error}"
        result.error = self._redact(_one_line(result.error, ERROR_MAX_CHARS) if result.error else None)
        result.content = self._redact(result.content)
        return result

    # --- a round -----------------------------------------------------------------------------

    def repair_count(self, n: int, round_index: int, targets: int) -> int:
        """How many of a round's n requests repair a failure: repair_fraction of them on average
        over rounds, at most one per target."""
        def upto(r: int) -> int:
            return math.floor(r * n * self.repair_fraction + 0.5)

        return max(0, min(targets, n, upto(round_index + 1) - upto(round_index)))

    def round_jobs(self, problem: Problem, history: History, n: int, round_index: int) -> list[_Job]:
        """The round's n requests (repairs first, then proposals), each with the messages it sends:
        what benchmarks/real_model renders to files before the search sends them."""
        context = prompt_context(problem, history, self.language, round_index)
        targets = [f for f in history.failures if f.id not in history.parent_ids]
        n_repair = self.repair_count(n, round_index, len(targets))
        jobs = [_Job("repair", self.renderer.messages("repair.j2", dict(context, failure=failure_view(f))), [f.id],
                     f"repair of candidate #{f.id} ({f.outcome})") for f in targets[:n_repair]]
        if len(jobs) < n:
            propose = _Job("propose", self.renderer.messages("propose.j2", context), [c.id for c in history.best],
                           f"openai proposal, round {round_index + 1}")
            jobs += [propose] * (n - len(jobs))
        return jobs

    def propose(self, problem: Problem, history: History, n: int, round_index: int) -> list[Proposal]:
        if n <= 0:
            return []
        jobs = self.round_jobs(problem, history, n, round_index)
        self._stop.clear()
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(jobs))) as pool:
            futures = [pool.submit(self._guarded_complete, job.messages) for job in jobs]
            results = [f.result() for f in futures]
        fatal = next((r for r in results if isinstance(r, KgenError)), None)
        if fatal is not None:
            raise fatal
        calls: list[CallResult] = results  # type: ignore[assignment]
        if all(c.unreachable for c in calls):
            raise KgenError(f"cannot reach the OpenAI-compatible endpoint at {self.shown_url}: "
                            f"{_one_line(calls[0].error or 'no answer')}")
        seen = set(history.tried_hashes)
        return [self._proposal(job, call, seen) for job, call in zip(jobs, calls)]

    def _guarded_complete(self, messages: list[dict[str, str]]) -> CallResult | KgenError:
        """The request's result; a KgenError is returned (and stops the other requests) so the round
        raises it once, and anything unforeseen becomes a failed proposal, never a crash."""
        try:
            return self.complete(messages)
        except KgenError as e:
            self._stop.set()
            return KgenError(self._redact(str(e)))
        except Exception as e:  # one odd reply must not end the search
            log.warning("request failed unexpectedly: %s: %s", type(e).__name__, self._redact(_one_line(str(e))))
            log.debug("the unexpected failure", exc_info=True)
            return CallResult(attempts=1, error=self._redact(f"{type(e).__name__}: {_one_line(str(e))}"))

    def _proposal(self, job: _Job, call: CallResult, seen: set[str]) -> Proposal:
        proposal = Proposal(source=None, proposer=self.name, model=self.model, base_url=self.shown_url,
                            parent_ids=list(job.parent_ids),
                            origin=job.origin, prompt=job.messages, response=call.content, template=job.template,
                            tokens_in=call.tokens_in, tokens_out=call.tokens_out, latency_s=call.latency_s,
                            attempts=call.attempts, error=call.error)
        if call.error is not None:
            return proposal
        extracted = extract_candidate(call.content, truncated=call.truncated)
        proposal.idea, proposal.error = extracted.idea, extracted.error
        if extracted.source is None:
            if (call.finish_reason or "").lower() == "content_filter":
                proposal.error = f"{extracted.error} (the server's content filter stopped the reply)"
            return proposal
        digest = normalized_source_hash(extracted.source)
        if digest in seen:
            proposal.error = "duplicate: this source (up to comments and blank lines) was already proposed"
            return proposal
        seen.add(digest)
        proposal.source, proposal.language = extracted.source, detect_language(extracted.source)
        return proposal
