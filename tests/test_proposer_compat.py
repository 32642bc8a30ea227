"""The openai proposer against what real OpenAI-compatible servers do (vLLM, llama.cpp, Ollama, LM
Studio, TGI, LiteLLM and other proxies, OpenRouter, DeepSeek, reasoning models), each quirk played over
real HTTP by the loopback server (tests/llm_server.py), each reply stored in a real SQLite DB."""

from __future__ import annotations

import json
import logging

import pytest
from test_proposer_openai import FAST_RETRY, OTHER_SOURCE, SOURCE, propose_and_store, proposer_for

from kgen.core.errors import KgenError
from kgen.proposers import make_proposer
from kgen.proposers.compat import context_overflow, normalize_base_url, versioned_alternative
from kgen.proposers.extract import extract_candidate
from kgen.proposers.openai_proposer import RetryPolicy
from kgen.store import ledger, queries
from kgen.store.db import Candidate, open_db
from kgen.store.history import History

from conftest import run_kgen
from llm_server import Reply, ScriptedLLMServer

FENCED = f"Idea: online softmax.\n\n```python\n{SOURCE.rstrip()}\n```\n"


@pytest.fixture(autouse=True)
def _no_tracebacks(caplog):
    """No quirk may end in a logged traceback."""
    caplog.set_level(logging.INFO)
    yield
    assert not [r for r in caplog.records if r.exc_info and r.levelno >= logging.INFO]
    assert "Traceback" not in caplog.text


def _ready(server: ScriptedLLMServer, problem, monkeypatch, base_url=None, **kw):
    """make_proposer as the search calls it: configuration checked, the endpoint reached once."""
    monkeypatch.setenv("KGEN_TEST_LLM_KEY", server.api_key)
    args = dict(problem=problem, model="test-model", base_url=base_url or server.base_url,
                api_key_env="KGEN_TEST_LLM_KEY", concurrency=1, request_timeout_s=5)
    args.update(kw)
    proposer = make_proposer("openai", **args)
    proposer.retry = FAST_RETRY
    return proposer


# --- usage ----------------------------------------------------------------------------------------

def test_a_reply_without_usage_stores_unknown_tokens_and_the_ledger_prices_nothing(db, problem, monkeypatch):
    monkeypatch.setenv("KGEN_PRICE_IN", "3")
    monkeypatch.setenv("KGEN_PRICE_OUT", "15")
    run = queries.create_run(db, problem="softmax", problem_path="p", problem_hash=problem.source_hash, size="small",
                             proposer="openai", model="test-model", language="triton", seed=0, rounds=1,
                             candidates_per_round=1, settings={}, device="cpu")
    with ScriptedLLMServer([Reply.code(SOURCE, usage=False)]) as server:
        [proposal] = proposer_for(server, problem).propose(problem, History(), 1, 0)
    cid = queries.add_proposal(db, proposal, run_id=run, round_index=0, problem=problem.name,
                               problem_hash=problem.source_hash)
    with db.reader() as s:
        call = s.get(Candidate, cid).llm_call
        assert call.outcome == "ok" and (call.tokens_in, call.tokens_out) == (None, None)
    cost = ledger.candidate_cost(db, cid)
    assert (cost.tokens_in, cost.tokens_out, cost.usd) == (None, None, None)  # unknown, not free
    assert "tokens unknown" in ledger.candidate_cost_lines(cost)[0]
    run_cost = ledger.run_costs(db, [run])[run]
    assert (run_cost.tokens_in, run_cost.usd, run_cost.calls_without_tokens) == (None, None, 1)
    assert ledger.cost_cells(run_cost)[3] == "-" and run_cost.tokens_per_correct is None


# --- /models ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("models_reply", [
    Reply.error(404, "Not Found"),
    Reply(status=405, body="Method Not Allowed", content_type="text/plain"),
    Reply.html(200, "LiteLLM admin"),
    Reply(body=json.dumps({"object": "list", "data": None})),
    Reply(body=json.dumps({"object": "list", "data": [{"object": "model"}]})),
    Reply.error(403, "You have insufficient permissions for this operation. Missing scopes: api.model.read."),
    Reply.error(500, "boom"),
], ids=["404", "405-text", "html", "data-null", "no-ids", "403-scope", "500"])
def test_a_missing_or_odd_models_endpoint_only_warns(db, problem, monkeypatch, caplog, models_reply):
    with ScriptedLLMServer([Reply.code(SOURCE)], models_reply=models_reply) as server:
        proposer = _ready(server, problem, monkeypatch)
        [proposal] = proposer.propose(problem, History(), 1, 0)
    assert proposal.source and proposal.error is None
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("/models" in w and "not checked" in w for w in warned) and all("\n" not in w for w in warned)


def test_odd_models_lists_are_read_leniently(problem, monkeypatch):
    listing = Reply(body=json.dumps({"models": [{"name": "qwen2.5-coder:7b", "model": "qwen2.5-coder:7b"}]}))
    with ScriptedLLMServer(models=("qwen2.5-coder:7b",), models_reply=listing) as server:
        proposer = _ready(server, problem, monkeypatch, model=None)
    assert proposer.model == "qwen2.5-coder:7b"


def test_without_models_a_server_that_rejects_the_chat_still_stops_the_search(problem, monkeypatch):
    with ScriptedLLMServer(models_reply=Reply.error(405, "no")) as server:
        proposer = _ready(server, problem, monkeypatch, model="no-such-model")
        with pytest.raises(KgenError, match="unknown model 'no-such-model'"):
            proposer.propose(problem, History(), 1, 0)


# --- reasoning and content shapes ---------------------------------------------------------------

@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_content_null_with_the_answer_in_the_reasoning_field(db, problem, field):
    reply = Reply(content=None, message_extra={field: f"Let me think.\n\n{FENCED}"})
    with ScriptedLLMServer([reply]) as server:
        [(cand, call, _)] = propose_and_store(db, problem, server)
    assert cand.source.strip() == SOURCE.strip() and call.outcome == "ok"
    assert call.response.startswith("<think>\nLet me think.")  # the reasoning is kept with the reply


def test_the_answer_wins_over_drafts_in_the_reasoning_field(db, problem):
    draft = FENCED.replace("BLOCK_SIZE = 8192", "BLOCK_SIZE = 1024")
    reply = Reply(content=f"Idea: smaller blocks.\n```python\n{OTHER_SOURCE}```", message_extra={"reasoning": draft})
    with ScriptedLLMServer([reply]) as server:
        [(cand, _, _)] = propose_and_store(db, problem, server)
    assert "BLOCK_SIZE = 4096" in cand.source and cand.idea == "smaller blocks."


def test_reasoning_cut_off_at_max_tokens_says_so(db, problem):
    reply = Reply(content=None, finish_reason="length", message_extra={"reasoning_content": "First I will ..."})
    with ScriptedLLMServer([reply]) as server:
        [(_, call, ev)] = propose_and_store(db, problem, server)
    assert ev.outcome == "no_code" and "while still reasoning" in ev.message and call.outcome == "no_code"


def test_code_only_inside_a_finished_think_block_is_taken():
    reply = f"<think>\nI'll write it.\n{FENCED}</think>\n\nThe kernel above fuses both passes."
    assert extract_candidate(reply).source.strip() == SOURCE.strip()
    # Qwen3/DeepSeek-R1 templates open <think> in the prompt: the reply only closes it
    draft = FENCED.replace("BLOCK_SIZE = 8192", "BLOCK_SIZE = 1024")
    got = extract_candidate(f"Hmm.\n{draft}</think>\n\n{FENCED}")
    assert "BLOCK_SIZE = 8192" in got.source and got.idea == "online softmax."
    assert extract_candidate(f"<thinking>{FENCED}").source is None  # never finished thinking


def test_crlf_line_endings_are_read():
    got = extract_candidate(FENCED.replace("\n", "\r\n") + "\r\nThat is all.\r\n")
    assert got.source.strip() == SOURCE.strip() and got.idea == "online softmax."


def test_content_as_a_list_of_parts(db, problem):
    parts = [{"type": "thinking", "thinking": [{"type": "text", "text": "hmm"}]},
             {"type": "text", "text": FENCED[:40]}, {"type": "text", "text": FENCED[40:]}]
    with ScriptedLLMServer([Reply(content=parts)]) as server:
        [(cand, call, _)] = propose_and_store(db, problem, server)
    assert cand.source.strip() == SOURCE.strip() and "hmm" in call.response


def test_a_streamed_body_sent_without_being_asked_is_read(db, problem):
    with ScriptedLLMServer([Reply.streamed(FENCED)]) as server:
        [(cand, call, _)] = propose_and_store(db, problem, server)
        assert "stream" not in server.chat_requests()[0].body
    assert cand.source.strip() == SOURCE.strip() and call.tokens_out == 340


# --- finish_reason, choices, unknown fields -----------------------------------------------------

@pytest.mark.parametrize("finish_reason", [None, "eos_token", "stop_sequence", "end_turn", "STOP"])
def test_missing_or_unusual_finish_reasons_are_not_errors(db, problem, finish_reason):
    with ScriptedLLMServer([Reply.code(SOURCE, finish_reason=finish_reason)]) as server:
        [(cand, call, _)] = propose_and_store(db, problem, server)
    assert cand.source and call.outcome == "ok"


@pytest.mark.parametrize("finish_reason", ["length", "max_tokens", "MAX_TOKENS", "model_length"])
def test_every_spelling_of_cut_off_is_a_truncation(db, problem, finish_reason):
    cut = "Idea: tile it.\n```python\n" + SOURCE[: len(SOURCE) // 2]
    with ScriptedLLMServer([Reply.text(cut, finish_reason=finish_reason)]) as server:
        [(_, _, ev)] = propose_and_store(db, problem, server)
    assert ev.outcome == "no_code" and "max_tokens" in ev.message


def test_a_content_filter_stop_is_named(db, problem):
    with ScriptedLLMServer([Reply.text("", finish_reason="content_filter")]) as server:
        [(_, _, ev)] = propose_and_store(db, problem, server)
    assert ev.outcome == "no_code" and "content filter" in ev.message


def test_empty_choices_are_retried_then_a_failed_proposal(db, problem):
    with ScriptedLLMServer([Reply(choices=[]), Reply.code(SOURCE)]) as server:
        [(cand, call, _)] = propose_and_store(db, problem, server)
    assert cand.source and call.attempts == 2
    with ScriptedLLMServer(default=Reply(choices=[])) as server:
        [(cand, call, ev)] = propose_and_store(db, problem, server)
    assert ev.outcome == "no_code" and "no choices" in ev.message and call.attempts == FAST_RETRY.max_retries + 1


def test_unknown_fields_and_extra_choices_are_ignored(db, problem):
    second = {"index": 1, "finish_reason": "stop", "message": {"role": "assistant", "content": "other"}}
    first = {"index": 0, "finish_reason": "stop", "logprobs": None, "stop_reason": 151643,
             "message": {"role": "assistant", "content": FENCED, "tool_calls": [], "refusal": None, "audio": None}}
    reply = Reply(choices=[first, second], extra={"system_fingerprint": None, "prompt_logprobs": None,
                                                  "kv_transfer_params": {"x": 1}, "service_tier": "default"})
    with ScriptedLLMServer([reply], default=Reply.code(OTHER_SOURCE)) as server:
        rows = propose_and_store(db, problem, server, script_len=2)
        sent = server.chat_requests()
    assert [bool(c.source) for c, _, _ in rows] == [True, True]  # one request, one candidate, each
    assert len(sent) == 2 and all("n" not in r.body for r in sent)  # kgen never relies on `n`


# --- error bodies -------------------------------------------------------------------------------

def test_an_html_502_from_a_proxy_is_retried_and_reported_in_one_short_line(db, problem):
    with ScriptedLLMServer([Reply.html(502), Reply.code(SOURCE)]) as server:
        [(cand, call, _)] = propose_and_store(db, problem, server)
    assert cand.source and call.attempts == 2
    with ScriptedLLMServer(default=Reply.html(502)) as server:
        [(_, call, ev)] = propose_and_store(db, problem, server)
    assert "502: an HTML page: 502 Bad Gateway" in ev.message and "<" not in call.error and len(call.error) < 200


def test_an_html_page_with_status_200_is_a_clear_failure(db, problem):
    with ScriptedLLMServer(default=Reply.html(200, "Open WebUI")) as server:
        [(_, _, ev)] = propose_and_store(db, problem, server, retry=RetryPolicy(max_retries=1, backoff_base_s=0.01))
    assert ev.outcome == "no_code" and "HTML page: Open WebUI" in ev.message and "/v1" in ev.message


def test_an_error_inside_a_200_is_retried_like_its_code(db, problem):
    script = [Reply.error_in_200("Upstream provider returned 502", code=502), Reply.code(SOURCE)]
    with ScriptedLLMServer(script) as server:
        [(cand, call, _)] = propose_and_store(db, problem, server)
    assert cand.source and call.attempts == 2
    with ScriptedLLMServer(default=Reply.error_in_200("Provider returned error")) as server:
        [(_, call, ev)] = propose_and_store(db, problem, server)
    assert ev.outcome == "no_code" and "Provider returned error" in ev.message and call.attempts == 4


def test_a_vllm_style_error_object_inside_a_200_is_understood(db, problem):
    body = json.dumps({"object": "error", "message": "messages: roles must alternate", "type": "BadRequestError",
                       "code": 400})
    with ScriptedLLMServer(default=Reply(body=body)) as server:
        [(_, call, _)] = propose_and_store(db, problem, server)
        assert len(server.chat_requests()) == 1  # a 400 in disguise: not retried
    assert call.error == "400: messages: roles must alternate"


def test_an_auth_error_inside_a_200_stops_the_search(problem):
    with ScriptedLLMServer([Reply.error_in_200("User not found.", code=401)]) as server, \
            pytest.raises(KgenError, match="refused the API key"):
        proposer_for(server, problem).propose(problem, History(), 1, 0)


def test_a_503_waits_as_long_as_retry_after_says(db, problem):
    script = [Reply.html(503, "503 Service Unavailable", headers={"Retry-After": "0.4"}), Reply.code(SOURCE)]
    with ScriptedLLMServer(script) as server:
        [(cand, call, _)] = propose_and_store(db, problem, server)
        first, second = server.chat_requests()
    assert cand.source and call.attempts == 2 and second.at - first.at >= 0.4


# --- context length -----------------------------------------------------------------------------

def test_a_prompt_too_long_for_the_context_fails_at_once_with_its_size(db, problem):
    with ScriptedLLMServer(default=Reply.code(SOURCE), context_window=300) as server:
        [(_, call, ev)] = propose_and_store(db, problem, server)
        assert len(server.chat_requests()) == 1  # no retries: none would fit
    assert ev.outcome == "no_code" and call.outcome == "no_code" and call.attempts == 1
    assert "context length exceeded" in call.error and "in the messages" in call.error
    assert "prompt tokens" in call.error and "context of 300 tokens" in call.error and "\n" not in call.error


def test_max_tokens_is_lowered_to_what_the_context_leaves(problem):
    with ScriptedLLMServer([Reply.code(SOURCE), Reply.code(OTHER_SOURCE)], context_window=4096) as server:
        proposer = proposer_for(server, problem)
        [first] = proposer.propose(problem, History(), 1, 0)
        [again] = proposer.propose(problem, History(), 1, 1)  # a later request fits at once
        limits = [r.body["max_tokens"] for r in server.chat_requests()]
    assert first.source and first.attempts == 2 and first.error is None
    assert again.source and again.attempts == 1
    assert limits[0] == 8192 and 256 <= limits[1] < 4096 - 800 and limits[2] < 4096 - 800


def test_llama_cpp_context_errors_are_understood(db, problem):
    with ScriptedLLMServer(default=Reply.code(SOURCE), context_window=200, context_style="llamacpp") as server:
        [(_, call, _)] = propose_and_store(db, problem, server)
    assert call.attempts == 1 and "context length exceeded" in call.error and "context of 200 tokens" in call.error


def test_vllms_too_large_max_tokens_is_a_context_error_not_a_refused_parameter(db, problem):
    too_large = Reply.error(400, "'max_tokens' or 'max_completion_tokens' is too large: 8192. This model's maximum "
                                 "context length is 4096 tokens and your request has 808 input tokens "
                                 "(8192 > 4096 - 808).")
    with ScriptedLLMServer([too_large, Reply.code(SOURCE)]) as server:
        [(cand, _, _)] = propose_and_store(db, problem, server)
        retried = server.chat_requests()[1].body
    assert cand.source and "max_completion_tokens" not in retried and retried["max_tokens"] == 4096 - 808 - 40


def test_insufficient_quota_still_stops_the_search(problem):
    quota = Reply.error(429, "You exceeded your current quota.", code="insufficient_quota")
    with ScriptedLLMServer([quota]) as server, pytest.raises(KgenError, match="quota exceeded"):
        proposer_for(server, problem).propose(problem, History(), 1, 0)


def test_a_completion_cap_lowers_max_tokens(db, problem):
    cap = Reply.error(400, "max_tokens is too large: 8192. This model supports at most 4096 completion tokens, "
                           "whereas you provided 8192.", code="invalid_value")
    with ScriptedLLMServer([cap, Reply.code(SOURCE)]) as server:
        [(cand, _, _)] = propose_and_store(db, problem, server)
        assert server.chat_requests()[1].body["max_tokens"] == 4096
    assert cand.source


@pytest.mark.parametrize("message, window, prompt, cap", [
    ("This model's maximum context length is 65536 tokens. However, you requested 70000 tokens (61808 in the "
     "messages, 8192 in the completion). Please reduce the length of the messages or completion.", 65536, 61808, None),
    ("'max_tokens' or 'max_completion_tokens' is too large: 8192. This model's maximum context length is 4096 tokens "
     "and your request has 808 input tokens (8192 > 4096 - 808).", 4096, 808, None),  # vLLM 0.10+
    ("Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 809 `inputs` tokens and "
     "8192 `max_new_tokens`", 4096, 809, None),  # TGI (a 422)
    ('the request exceeds the available context size {"n_prompt_tokens": 14429, "n_ctx": 8192}', 8192, 14429, None),
    ("input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease input length",
     200000, 178959, None),  # Anthropic behind LiteLLM
    ("max_tokens is too large: 100000. This model supports at most 16384 completion tokens, whereas you provided "
     "100000.", None, None, 16384),  # OpenAI
    ("Invalid max_tokens value, the valid range of max_tokens is [1, 8192]", None, None, 8192),  # DeepSeek
])
def test_context_errors_as_servers_word_them(message, window, prompt, cap):
    overflow = context_overflow(message)
    assert (overflow.window, overflow.prompt_tokens, overflow.completion_cap) == (window, prompt, cap)
    assert context_overflow("Unsupported parameter: 'max_tokens' is not supported with this model.") is None


# --- parameters ---------------------------------------------------------------------------------

def test_a_server_refusing_max_tokens_gets_max_completion_tokens(db, problem):
    refuse = {"max_tokens": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                            "Use 'max_completion_tokens' instead."}
    with ScriptedLLMServer([Reply.code(SOURCE)], refuse_params=refuse) as server:
        [(cand, _, _)] = propose_and_store(db, problem, server)
        last = server.chat_requests()[-1].body
    assert cand.source and last["max_completion_tokens"] == 8192 and "max_tokens" not in last


def test_concurrent_requests_all_adapt_even_without_retries(problem):
    refuse = {"max_tokens": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                            "Use 'max_completion_tokens' instead."}
    with ScriptedLLMServer(default=Reply.code(SOURCE, delay_s=0.2), refuse_params=refuse) as server:
        proposals = proposer_for(server, problem, concurrency=4, retry=RetryPolicy(max_retries=0)).propose(
            problem, History(), 4, 0)
    assert [p.error for p in proposals] == [None] + ["duplicate: this source (up to comments and blank lines) was "
                                                     "already proposed"] * 3  # every request got its reply


def test_a_server_refusing_both_token_limits_gets_none(db, problem):
    refuse = {"max_tokens": "Unsupported parameter: 'max_tokens'. Use 'max_completion_tokens' instead.",
              "max_completion_tokens": "Unrecognized request argument supplied: max_completion_tokens"}
    with ScriptedLLMServer([Reply.code(SOURCE)], refuse_params=refuse) as server:
        [(cand, _, _)] = propose_and_store(db, problem, server)
        last = server.chat_requests()[-1].body
    assert cand.source and "max_tokens" not in last and "max_completion_tokens" not in last


def test_a_reasoning_model_refusing_temperature_gets_none(db, problem):
    refuse = {"temperature": "Unsupported value: 'temperature' does not support 0.8 with this model. "
                             "Only the default (1) value is supported."}
    with ScriptedLLMServer([Reply.code(SOURCE)], refuse_params=refuse) as server:
        [(cand, _, _)] = propose_and_store(db, problem, server)
        assert "temperature" not in server.chat_requests()[-1].body
    assert cand.source


def test_a_template_without_a_system_role_gets_it_folded_into_the_user_message(db, problem):
    with ScriptedLLMServer([Reply.code(SOURCE)], refuse_system_role=True) as server:
        [(cand, call, _)] = propose_and_store(db, problem, server)
        sent = server.chat_requests()[-1].body["messages"]
    assert cand.source and [m["role"] for m in sent] == ["user"]
    assert sent[0]["content"] == call.prompt[0]["content"] + "\n\n" + call.prompt[1]["content"]
    assert [m["role"] for m in call.prompt] == ["system", "user"]  # the stored prompt is the one rendered


def test_a_fastapi_422_naming_a_parameter_is_adapted_to(db, problem):
    detail = json.dumps({"detail": [{"type": "extra_forbidden", "loc": ["body", "temperature"],
                                     "msg": "Extra inputs are not permitted"}]})
    with ScriptedLLMServer([Reply(status=422, body=detail), Reply.code(SOURCE)]) as server:
        [(cand, _, _)] = propose_and_store(db, problem, server)
        assert "temperature" not in server.chat_requests()[-1].body
    assert cand.source


def test_any_other_400_is_not_retried(db, problem):
    with ScriptedLLMServer(default=Reply.error(400, "messages.1.content: Input should be a valid string")) as server:
        [(_, call, ev)] = propose_and_store(db, problem, server)
        assert len(server.chat_requests()) == 1
    assert ev.outcome == "no_code" and call.error == "400: messages.1.content: Input should be a valid string"


# --- base URLs ----------------------------------------------------------------------------------

@pytest.mark.parametrize("form", ["{root}", "{root}/", "{root}/v1/", "{root}/v1/chat/completions",
                                  "{root}/v1/chat/completions/"])
def test_a_base_url_with_or_without_v1_or_the_full_endpoint(problem, monkeypatch, form):
    with ScriptedLLMServer([Reply.code(SOURCE)]) as server:
        proposer = _ready(server, problem, monkeypatch, base_url=form.format(root=server.root_url))
        [proposal] = proposer.propose(problem, History(), 1, 0)
        assert server.chat_requests()[-1].path == "/v1/chat/completions"
    assert proposal.source and proposal.base_url == server.base_url


def test_a_root_url_without_models_finds_the_v1_chat_route(problem, monkeypatch):
    with ScriptedLLMServer([Reply.text("OK"), Reply.code(SOURCE)], models_endpoint=False) as server:
        proposer = _ready(server, problem, monkeypatch, base_url=server.root_url)
        [proposal] = proposer.propose(problem, History(), 1, 0)
    assert proposal.source and proposal.base_url == server.base_url


def test_a_server_at_the_root_is_used_there(problem, monkeypatch):
    with ScriptedLLMServer([Reply.code(SOURCE)], prefix="") as server:
        proposer = _ready(server, problem, monkeypatch, base_url=server.root_url + "/")
        [proposal] = proposer.propose(problem, History(), 1, 0)
        assert server.chat_requests()[-1].path == "/chat/completions"
    assert proposal.source


def test_a_base_url_without_a_scheme_is_one_clear_line(problem, monkeypatch):
    monkeypatch.setenv("KGEN_TEST_LLM_KEY", "k")
    with pytest.raises(KgenError, match=r"needs its scheme: http://localhost:8000/v1 \(or https://\)$"):
        make_proposer("openai", problem=problem, model="m", base_url="localhost:8000/v1",
                      api_key_env="KGEN_TEST_LLM_KEY")


def test_base_url_forms():
    assert normalize_base_url(" http://h:8000/v1/chat/completions/ ") == "http://h:8000/v1"
    assert normalize_base_url("https://openrouter.ai/api/v1/") == "https://openrouter.ai/api/v1"
    assert versioned_alternative("http://h:11434") == "http://h:11434/v1"
    assert versioned_alternative("https://generativelanguage.googleapis.com/v1beta") is None


# --- secrets ------------------------------------------------------------------------------------

SECRET = "sk-proj-Zq3XbT9wLm2VkR8sPq4N"


def test_errors_never_hold_the_api_key(db, problem, monkeypatch, caplog):
    echo = Reply.error(500, f"upstream rejected Authorization: Bearer {SECRET} for key {SECRET}")
    with ScriptedLLMServer(default=echo, api_key=SECRET) as server:
        [(_, call, ev)] = propose_and_store(db, problem, server)
    assert "500" in call.error and SECRET not in call.error and SECRET not in ev.message
    assert SECRET not in caplog.text
    with ScriptedLLMServer(api_key="sk-other-key-0000000000") as server:
        monkeypatch.setenv("KGEN_TEST_LLM_KEY", SECRET)
        with pytest.raises(KgenError) as err:
            make_proposer("openai", problem=problem, model="test-model", base_url=server.base_url,
                          api_key_env="KGEN_TEST_LLM_KEY")
    assert "401" in str(err.value) and SECRET not in str(err.value)


# --- the whole search -----------------------------------------------------------------------------

@pytest.mark.slow  # a real search: a local Ray cluster, tens of seconds
def test_a_search_against_a_quirky_server_finishes_and_stores_what_it_got(tmp_path):
    """No /models, a root URL, no usage, the answer in reasoning_content, a proxy's 502 page, a prompt
    too long once: the search runs its round, exit 0, no traceback, each call stored."""
    script = [Reply.text("OK"),  # the one-token probe that finds the chat route under /v1
              Reply.html(502), Reply(content=None, usage=False, message_extra={"reasoning_content": FENCED}),
              Reply.error(400, "This model's maximum context length is 1000 tokens. However, your messages "
                               "resulted in 1200 tokens. Please reduce the length of the messages.")]
    db = tmp_path / "results.db"
    with ScriptedLLMServer(script, models_reply=Reply(status=405, body="Method Not Allowed")) as server:
        result = run_kgen("search", "--problem", "softmax", "--rounds", "1", "--candidates", "2", "--language",
                          "triton", "--size", "small", "--proposer", "openai", "--base-url", server.root_url,
                          "--model", "test-model", "--api-key-env", "KGEN_TEST_LLM_KEY", "--db", str(db), "--quiet",
                          cwd=tmp_path, env={"KGEN_TEST_LLM_KEY": server.api_key,
                                             "KGEN_CACHE_DIR": str(tmp_path / "cache")}, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "tokens: 0 in, 0 out (and 1 reply whose server reported no usage)" in result.stdout
    database = open_db(str(db), create=False)
    with database.reader() as s:
        calls = sorted((c.llm_call for c in s.query(Candidate)), key=lambda c: c.outcome)
        rows = [(c.outcome, c.tokens_in, c.tokens_out, c.base_url) for c in calls]
        errors = [c.error for c in calls]
        attempts = sum(c.attempts for c in calls)
    database.close()
    assert rows == [("no_code", None, None, server.base_url), ("ok", None, None, server.base_url)]
    assert attempts == 3  # the two requests run concurrently: either one met the 502 and retried
    assert "context length exceeded" in errors[0] and "1200 prompt tokens" in errors[0] and errors[1] is None
