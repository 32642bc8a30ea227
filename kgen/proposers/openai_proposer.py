"""The `openai` proposer: candidates from any OpenAI-compatible chat endpoint.

Requests: up to `concurrency` in flight (threads). The client's own retries are off; ours retry
429, 408, 409, 5xx, connection errors, timeouts and malformed replies with exponential backoff and
jitter, honouring `Retry-After` (seconds, milliseconds or an HTTP date, capped). A 401/403 (key),
a 404 (unknown model or wrong base URL) or a 429 `insufficient_quota` is a KgenError at once. A
request that still fails after its retries becomes a Proposal with no source and the error, stored
as `no_code`; a round in which every request failed to reach the server at all is a KgenError.

Each round, some requests repair a recent failure (repair.j2) instead of proposing (propose.j2):
`repair_fraction` of the requests on average, spread over rounds (n=4, 0.25: one per round; n=1:
one round in four), each on a different failure that has no child yet, newest first.

Tokens and latency are those of the attempt whose reply is stored; `attempts` counts them all.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Optional

import openai

from kgen.errors import KgenError
from kgen.history import History
from kgen.problems import Problem
from kgen.prompts import PromptRenderer, failure_view, prompt_context
from kgen.proposers.extract import extract_candidate
from kgen.records import Proposal
from kgen.static_checks import detect_language
from kgen.store import ScoredCandidate, normalized_source_hash

log = logging.getLogger("kgen.proposers.openai")

RETRY_STATUS = (408, 409, 429)
CHECK_TIMEOUT_S = 30.0


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


@dataclass
class _Reply:
    content: Optional[str]
    truncated: bool
    tokens_in: Optional[int]
    tokens_out: Optional[int]


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
    tokens_in: Optional[int] = None
    tokens_out: Optional[int] = None
    latency_s: Optional[float] = None
    attempts: int = 0
    error: Optional[str] = None
    unreachable: bool = False  # every attempt failed before the server answered


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _status_message(e: openai.APIStatusError) -> str:
    body = e.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return _one_line(err["message"])
        if isinstance(err, str):
            return _one_line(err)
    return _one_line(e.message)


def _parse_reply(text: str) -> _Reply:
    """The assistant's text from a chat completion body; _Retryable if the body is not one."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise _Retryable(f"malformed JSON in the reply: {e}", response=text) from e
    try:
        choice = data["choices"][0]
        content = choice["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError) as e:
        err = data.get("error") if isinstance(data, dict) else None
        why = f"error in the reply: {_one_line(json.dumps(err))}" if err else "a reply with no choices[0].message"
        raise _Retryable(why, response=text) from e
    if isinstance(content, list):  # content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    usage = data.get("usage") or {}
    if not isinstance(usage, dict):
        usage = {}
    return _Reply(content=content if isinstance(content, str) else None,
                  truncated=choice.get("finish_reason") == "length",
                  tokens_in=usage.get("prompt_tokens"), tokens_out=usage.get("completion_tokens"))


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
        self.client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=request_timeout_s)
        self.base_url = str(self.client.base_url).rstrip("/")
        self._stop = threading.Event()
        self._params_lock = threading.Lock()
        self._token_param = "max_tokens"
        self._send_temperature = True

    # --- fail fast ---------------------------------------------------------------------------

    def check(self) -> None:
        """Render the templates, then reach the endpoint once (GET /models; a one-token chat only if
        the model is not listed), so that a bad template, a bad key, an unknown model or an
        unreachable server stops here, in one line. A model left unset is the endpoint's only
        model, when it serves exactly one."""
        self._check_templates()
        offered: Optional[list[str]] = None
        try:
            page = self.client.models.list(timeout=min(self.request_timeout_s, CHECK_TIMEOUT_S))
            offered = [m.id for m in page.data if getattr(m, "id", None)]
        except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
            raise self._auth_error(e) from e
        except openai.APIConnectionError as e:
            raise KgenError(f"cannot reach the OpenAI-compatible endpoint at {self.base_url}: "
                            f"{self._connection_reason(e)} (is the server running? "
                            "check OPENAI_BASE_URL / --base-url)") from e
        except (openai.APIError, ValueError, AttributeError, TypeError) as e:
            log.info("GET %s/models failed (%s); the first request will check the model", self.base_url,
                     _one_line(str(e)))
        if self.model is None:
            if offered and len(offered) == 1:
                self.model = offered[0]
                log.info("using the endpoint's only model, %s", self.model)
            else:
                listed = f" (it offers: {', '.join(offered[:10])})" if offered else ""
                raise KgenError(f"no model given: pass --model or set KGEN_MODEL{listed}")
        if offered and not ({self.model, f"{self.model}:latest"} & set(offered)):
            self._probe_model(offered)

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

    def _probe_model(self, offered: list[str]) -> None:
        try:
            self.client.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "Say OK."}],
                                                max_tokens=1, timeout=min(self.request_timeout_s, CHECK_TIMEOUT_S))
        except openai.NotFoundError as e:
            raise KgenError(f"unknown model '{self.model}' at {self.base_url} (404: {_status_message(e)}; "
                            f"it offers: {', '.join(offered[:10])})") from e
        except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
            raise self._auth_error(e) from e
        except (openai.APIError, ValueError) as e:  # any other answer: the model exists
            log.info("model probe answered %s", _one_line(str(e)))

    def _auth_error(self, e: openai.APIStatusError) -> KgenError:
        return KgenError(f"{self.base_url} refused the API key ({e.status_code}: {_status_message(e)}); "
                         f"check {self.api_key_env}")

    def _connection_reason(self, e: openai.APIConnectionError) -> str:
        if isinstance(e, openai.APITimeoutError):
            return "the request timed out"
        cause = e.__cause__ or e.__context__
        return _one_line(str(cause) if cause else e.message) or "connection failed"

    # --- one request, with retries ---------------------------------------------------------

    def _request_args(self) -> dict[str, Any]:
        with self._params_lock:
            args: dict[str, Any] = {self._token_param: self.max_tokens}
            if self._send_temperature:
                args["temperature"] = self.temperature
            return args

    def _adapt_to(self, e: openai.BadRequestError) -> bool:
        """Reasoning models refuse max_tokens (they take max_completion_tokens) and temperature:
        adapt once, and say whether a retry is worth it."""
        text = _status_message(e).lower()
        with self._params_lock:
            if "max_tokens" in text and self._token_param == "max_tokens":
                self._token_param = "max_completion_tokens"
                return True
            if "temperature" in text and self._send_temperature:
                self._send_temperature = False
                return True
        return False

    def _attempt(self, messages: list[dict[str, str]]) -> _Reply:
        try:
            raw = self.client.chat.completions.with_raw_response.create(
                model=self.model, messages=messages, timeout=self.request_timeout_s, **self._request_args())
            text = raw.http_response.text
        except openai.BadRequestError as e:
            if self._adapt_to(e):
                raise _Retryable(f"400: {_status_message(e)} (adapting the request)", retry_after_s=0.0) from e
            raise
        except openai.RateLimitError as e:
            if isinstance(e.body, dict) and "insufficient_quota" in json.dumps(e.body):
                raise KgenError(f"{self.base_url}: quota exceeded (429: {_status_message(e)})") from e
            raise _Retryable(f"429: {_status_message(e)}", parse_retry_after(e.response.headers)) from e
        except openai.APIStatusError as e:
            if e.status_code in (401, 403):
                raise self._auth_error(e) from e
            if e.status_code == 404:
                raise KgenError(f"unknown model '{self.model}' or wrong base URL at {self.base_url} "
                                f"(404: {_status_message(e)})") from e
            if e.status_code in RETRY_STATUS or e.status_code >= 500:
                raise _Retryable(f"{e.status_code}: {_status_message(e)}",
                                 parse_retry_after(e.response.headers)) from e
            raise
        except openai.APIConnectionError as e:
            raise _Retryable(f"{self._connection_reason(e)} ({self.base_url})",
                             unreachable=not isinstance(e, openai.APITimeoutError)) from e
        return _parse_reply(text)

    def complete(self, messages: list[dict[str, str]]) -> CallResult:
        """One chat request with retries; KgenError for what no retry can fix."""
        result = CallResult()
        ever_answered = False
        for retry_index in range(self.retry.max_retries + 1):
            if self._stop.is_set():
                result.error = result.error or "cancelled: another request hit a fatal error"
                break
            result.attempts += 1
            start = time.monotonic()
            try:
                reply = self._attempt(messages)
            except _Retryable as e:
                result.latency_s = time.monotonic() - start
                result.error, result.content = str(e), e.response
                ever_answered = ever_answered or not e.unreachable
                if retry_index == self.retry.max_retries:
                    break
                delay = self.retry.delay_s(retry_index, e.retry_after_s)
                log.warning("%s; retry %d/%d in %.1f s", e, retry_index + 1, self.retry.max_retries, delay)
                self._stop.wait(delay)
                continue
            except openai.APIStatusError as e:
                result.latency_s = time.monotonic() - start
                result.error = f"{e.status_code}: {_status_message(e)}"
                ever_answered = True
                break
            result.latency_s = time.monotonic() - start
            result.content, result.truncated = reply.content, reply.truncated
            result.tokens_in, result.tokens_out = reply.tokens_in, reply.tokens_out
            result.error = None
            return result
        result.unreachable = not ever_answered
        if result.attempts > 1:
            result.error = f"gave up after {result.attempts} attempts: {result.error}"
        return result

    # --- a round -----------------------------------------------------------------------------

    def repair_count(self, n: int, round_index: int, targets: int) -> int:
        """How many of a round's n requests repair a failure: repair_fraction of them on average
        over rounds, at most one per target."""
        def upto(r: int) -> int:
            return math.floor(r * n * self.repair_fraction + 0.5)

        return max(0, min(targets, n, upto(round_index + 1) - upto(round_index)))

    def propose(self, problem: Problem, history: History, n: int, round_index: int) -> list[Proposal]:
        if n <= 0:
            return []
        context = prompt_context(problem, history, self.language, round_index)
        targets = [f for f in history.failures if f.id not in history.parent_ids]
        n_repair = self.repair_count(n, round_index, len(targets))
        jobs = [_Job("repair", self.renderer.messages("repair.j2", dict(context, failure=failure_view(f))), [f.id],
                     f"repair of candidate #{f.id} ({f.outcome})") for f in targets[:n_repair]]
        if len(jobs) < n:
            propose = _Job("propose", self.renderer.messages("propose.j2", context), [c.id for c in history.best],
                           f"openai proposal, round {round_index + 1}")
            jobs += [propose] * (n - len(jobs))
        self._stop.clear()
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(jobs))) as pool:
            futures = [pool.submit(self._guarded_complete, job.messages) for job in jobs]
            results = [f.result() for f in futures]
        fatal = next((r for r in results if isinstance(r, KgenError)), None)
        if fatal is not None:
            raise fatal
        calls: list[CallResult] = results  # type: ignore[assignment]
        if all(c.unreachable for c in calls):
            raise KgenError(f"cannot reach the OpenAI-compatible endpoint at {self.base_url}: "
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
            return e
        except Exception as e:
            log.exception("request failed unexpectedly")
            return CallResult(attempts=1, error=f"{type(e).__name__}: {_one_line(str(e))}")

    def _proposal(self, job: _Job, call: CallResult, seen: set[str]) -> Proposal:
        proposal = Proposal(source=None, proposer=self.name, model=self.model, base_url=self.base_url,
                            parent_ids=list(job.parent_ids),
                            origin=job.origin, prompt=job.messages, response=call.content, template=job.template,
                            tokens_in=call.tokens_in, tokens_out=call.tokens_out, latency_s=call.latency_s,
                            attempts=call.attempts, error=call.error)
        if call.error is not None:
            return proposal
        extracted = extract_candidate(call.content, truncated=call.truncated)
        proposal.idea, proposal.error = extracted.idea, extracted.error
        if extracted.source is None:
            return proposal
        digest = normalized_source_hash(extracted.source)
        if digest in seen:
            proposal.error = "duplicate: this source (up to comments and blank lines) was already proposed"
            return proposal
        seen.add(digest)
        proposal.source, proposal.language = extracted.source, detect_language(extracted.source)
        return proposal
