"""The openai proposer against a real HTTP server (tests/llm_server.py) through the real openai
client, each reply stored in a real SQLite DB the way a search stores it."""

from __future__ import annotations

import email.utils
import time
from pathlib import Path

import pytest

from kgen.core.errors import KgenError
from kgen.core.records import EvalResult, Proposal
from kgen.proposers import default_proposer_kind, make_proposer
from kgen.proposers.openai_proposer import OpenAIProposer, RetryPolicy, parse_retry_after
from kgen.store.db import Candidate
from kgen.store.history import History, build_history
from kgen.store.queries import add_evaluation, add_proposal

from llm_server import Reply, ScriptedLLMServer

REPO = Path(__file__).resolve().parent.parent
SOURCE = (REPO / "problems/starters/softmax/triton_online_two_pass.py").read_text()
OTHER_SOURCE = SOURCE.replace("BLOCK_SIZE = 8192", "BLOCK_SIZE = 4096")
FAST_RETRY = RetryPolicy(max_retries=3, backoff_base_s=0.01, backoff_max_s=0.05)


def proposer_for(server: ScriptedLLMServer, problem, **kw) -> OpenAIProposer:
    args = dict(problem=problem, model="test-model", base_url=server.base_url, api_key=server.api_key,
                concurrency=1, request_timeout_s=5, retry=FAST_RETRY)
    args.update(kw)
    return OpenAIProposer(**args)


def propose_and_store(db, problem, server, script_len=1, history=None, **kw):
    """One round through the proposer; returns the stored (candidate, llm_call, evaluation) rows."""
    proposals = proposer_for(server, problem, **kw).propose(problem, history or History(), script_len, 0)
    ids = [add_proposal(db, p, run_id=None, round_index=0, problem=problem.name, problem_hash=problem.source_hash)
           for p in proposals]
    with db.reader() as s:
        rows = []
        for cid in ids:
            cand = s.get(Candidate, cid)
            rows.append((cand, cand.llm_call, cand.evaluations[-1] if cand.evaluations else None))
        return rows


def test_good_code_is_stored_with_its_idea_tokens_and_latency(db, problem):
    with ScriptedLLMServer([Reply.code(SOURCE, idea="Online softmax in two passes.")]) as server:
        [(cand, call, ev)] = propose_and_store(db, problem, server)
        sent = server.chat_requests()[0].body
    assert cand.source.strip() == SOURCE.strip()
    assert cand.language == "triton" and cand.proposer == "openai" and cand.model == "test-model"
    assert cand.idea == "Online softmax in two passes."
    assert ev is None  # waits for the evaluator
    assert call.outcome == "ok" and call.template == "propose" and call.attempts == 1
    assert call.base_url == server.base_url.rstrip("/")  # which endpoint served it
    assert (call.tokens_in, call.tokens_out) == (120, 340)
    assert 0 < call.latency_s < 5
    assert call.prompt == sent["messages"] and [m["role"] for m in call.prompt] == ["system", "user"]
    assert "torch.softmax(x, dim=1)" in call.prompt[1]["content"]
    assert sent["max_tokens"] == 8192 and sent["temperature"] == 0.8


def test_a_reply_without_code_is_stored_as_no_code(db, problem):
    with ScriptedLLMServer([Reply.text("I would tile the rows, but I am not sure how.")]) as server:
        [(cand, call, ev)] = propose_and_store(db, problem, server)
    assert cand.source == "" and ev.outcome == "no_code" and "no code block" in ev.message
    assert call.outcome == "no_code" and call.response.startswith("I would tile")
    assert call.tokens_out == 340


def test_a_code_block_without_model_new_is_no_code(db, problem):
    reply = Reply.text("Here is a helper:\n```python\ndef helper():\n    return 1\n```\n")
    with ScriptedLLMServer([reply]) as server:
        [(cand, _, ev)] = propose_and_store(db, problem, server)
    assert ev.outcome == "no_code" and "none defining class ModelNew" in ev.message


def test_of_two_code_blocks_the_last_wins(db, problem):
    reply = Reply.text(f"A first draft:\n```python\n{SOURCE}```\n\nSmaller blocks are better here.\n\n"
                       f"```python\n{OTHER_SOURCE}```\n")
    with ScriptedLLMServer([reply]) as server:
        [(cand, _, _)] = propose_and_store(db, problem, server)
    assert "BLOCK_SIZE = 4096" in cand.source and "BLOCK_SIZE = 8192" not in cand.source
    assert cand.idea == "Smaller blocks are better here."


def test_malformed_json_is_retried(db, problem):
    with ScriptedLLMServer([Reply.malformed(), Reply.code(SOURCE)]) as server:
        [(cand, call, _)] = propose_and_store(db, problem, server)
    assert cand.source and call.attempts == 2 and call.error is None


def test_malformed_json_every_time_is_a_failed_proposal_not_a_crash(db, problem):
    with ScriptedLLMServer(default=Reply.malformed()) as server:
        [(cand, call, ev)] = propose_and_store(db, problem, server)
        assert len(server.chat_requests()) == FAST_RETRY.max_retries + 1
    assert ev.outcome == "no_code" and "malformed JSON" in ev.message
    assert call.attempts == FAST_RETRY.max_retries + 1 and call.response.startswith('{"id"')


def test_429_waits_as_long_as_retry_after_says(db, problem):
    script = [Reply.error(429, "slow down", headers={"Retry-After": "0.4"}), Reply.code(SOURCE)]
    with ScriptedLLMServer(script) as server:
        [(cand, call, _)] = propose_and_store(db, problem, server)
        first, second = server.chat_requests()
    assert cand.source and call.attempts == 2
    assert second.at - first.at >= 0.4  # our own backoff here is 10-50 ms


def test_retry_after_is_read_as_seconds_milliseconds_or_a_date():
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < parse_retry_after({"retry-after": later}) <= 30
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert RetryPolicy(retry_after_max_s=10).delay_s(0, 3600) == 10  # capped


def test_500_twice_then_success(db, problem):
    with ScriptedLLMServer([Reply.error(500), Reply.error(502), Reply.code(SOURCE)]) as server:
        [(cand, call, _)] = propose_and_store(db, problem, server)
    assert cand.source and call.attempts == 3 and call.outcome == "ok"


def test_a_reply_slower_than_the_timeout_is_retried(db, problem):
    with ScriptedLLMServer([Reply.code(OTHER_SOURCE, delay_s=3), Reply.code(SOURCE)]) as server:
        [(cand, call, _)] = propose_and_store(db, problem, server, request_timeout_s=0.5)
    assert "BLOCK_SIZE = 8192" in cand.source and call.attempts == 2 and call.latency_s < 0.5


def test_timeouts_on_every_attempt_are_a_failed_proposal(db, problem):
    with ScriptedLLMServer(default=Reply.code(SOURCE, delay_s=3)) as server:
        [(cand, call, ev)] = propose_and_store(db, problem, server, request_timeout_s=0.3,
                                               retry=RetryPolicy(max_retries=1, backoff_base_s=0.01))
    assert ev.outcome == "no_code" and "timed out" in ev.message and call.attempts == 2


def test_a_truncated_reply_says_so(db, problem):
    cut = "Idea: tile it.\n```python\n" + SOURCE[: len(SOURCE) // 2]
    with ScriptedLLMServer([Reply.text(cut, finish_reason="length")]) as server:
        [(_, _, ev)] = propose_and_store(db, problem, server)
    assert ev.outcome == "no_code" and "max_tokens" in ev.message


def test_reasoning_models_get_max_completion_tokens(db, problem):
    refusal = Reply.error(400, "Unsupported parameter: 'max_tokens' is not supported with this model. "
                               "Use 'max_completion_tokens' instead.")
    with ScriptedLLMServer([refusal, Reply.code(SOURCE)]) as server:
        [(cand, _, _)] = propose_and_store(db, problem, server)
        retried = server.chat_requests()[1].body
    assert cand.source and retried["max_completion_tokens"] == 8192 and "max_tokens" not in retried


def test_a_source_proposed_twice_is_not_evaluated_twice(db, problem):
    with ScriptedLLMServer(default=Reply.code(SOURCE)) as server:
        rows = propose_and_store(db, problem, server, script_len=2)
    assert [bool(c.source) for c, _, _ in rows] == [True, False]
    assert "duplicate" in rows[1][2].message


def test_requests_run_concurrently(problem):
    with ScriptedLLMServer(default=Reply.code(SOURCE, delay_s=0.6)) as server:
        start = time.monotonic()
        proposals = proposer_for(server, problem, concurrency=4).propose(problem, History(), 4, 0)
        elapsed = time.monotonic() - start
    assert len(proposals) == 4 and elapsed < 4 * 0.6


def test_a_bad_key_stops_before_any_round(problem, monkeypatch):
    monkeypatch.setenv("KGEN_TEST_KEY", "wrong-key")
    with ScriptedLLMServer() as server:
        with pytest.raises(KgenError) as err:
            make_proposer("openai", problem=problem, model="test-model", base_url=server.base_url,
                          api_key_env="KGEN_TEST_KEY")
        assert server.chat_requests() == []
    message = str(err.value)
    assert "401" in message and "KGEN_TEST_KEY" in message and "\n" not in message


def test_an_unknown_model_stops_before_any_round(problem, monkeypatch):
    with ScriptedLLMServer(models=("test-model", "other-model")) as server:
        monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
        with pytest.raises(KgenError) as err:
            make_proposer("openai", problem=problem, model="no-such-model", base_url=server.base_url)
    message = str(err.value)
    assert "no-such-model" in message and "404" in message and "test-model" in message and "\n" not in message


def test_a_404_in_a_round_stops_at_once_without_retries(problem):
    with ScriptedLLMServer(models_endpoint=False) as server:
        proposer = proposer_for(server, problem, model="no-such-model")
        proposer.check()  # no /models to ask: the first request finds out
        with pytest.raises(KgenError, match="unknown model 'no-such-model'"):
            proposer.propose(problem, History(), 1, 0)
        assert len(server.chat_requests()) == 1


def test_a_401_in_a_round_stops_at_once(problem):
    with ScriptedLLMServer() as server:
        proposer = proposer_for(server, problem, api_key="wrong", concurrency=2)
        with pytest.raises(KgenError, match="refused the API key"):
            proposer.propose(problem, History(), 2, 0)


def test_an_unreachable_endpoint_is_one_clear_line(problem, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedLLMServer() as server:
        dead_url = server.base_url  # the port is free again once the server stops
    with pytest.raises(KgenError) as err:
        make_proposer("openai", problem=problem, model="m", base_url=dead_url)
    assert "cannot reach" in str(err.value) and dead_url in str(err.value) and "\n" not in str(err.value)


def test_the_model_defaults_to_the_only_one_the_server_serves(problem, monkeypatch):
    monkeypatch.delenv("KGEN_MODEL", raising=False)
    with ScriptedLLMServer(models=("qwen2.5-coder:32b",)) as server:
        monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
        proposer = make_proposer("openai", problem=problem, base_url=server.base_url)
    assert proposer.model == "qwen2.5-coder:32b"


def test_no_endpoint_configured_is_a_usage_error(problem, monkeypatch):
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    assert default_proposer_kind() == "offline"
    with pytest.raises(KgenError, match="OPENAI_BASE_URL"):
        make_proposer("openai", problem=problem, model="m")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    assert default_proposer_kind() == "openai"


def test_some_requests_repair_recent_failures(db, problem):
    broken = SOURCE.replace("tl.exp(", "tl.expp(", 1)
    failed_id = add_proposal(db, Proposal(source=broken, proposer="openai", language="triton"), run_id=None,
                             round_index=0, problem=problem.name, problem_hash=problem.source_hash)
    add_evaluation(db, failed_id, EvalResult(outcome="compile_error",
                                             message="AttributeError: module has no attribute 'expp'"))
    history = build_history(db, problem)
    with ScriptedLLMServer(default=Reply.code(SOURCE)) as server:
        proposals = proposer_for(server, problem).propose(problem, history, 4, 0)
    repairs = [p for p in proposals if p.template == "repair"]
    assert len(repairs) == 1 and repairs[0].parent_ids == [failed_id]
    assert repairs[0].origin == f"repair of candidate #{failed_id} (compile_error)"
    asked = repairs[0].prompt[1]["content"]
    assert "has no attribute 'expp'" in asked and "tl.expp(" in asked
    assert sum(p.template == "propose" for p in proposals) == 3


def test_repairs_average_the_configured_fraction_over_rounds(problem):
    proposer = OpenAIProposer(problem=problem, model="m", base_url="http://127.0.0.1:1/v1", api_key="k",
                              repair_fraction=0.25)
    assert [proposer.repair_count(1, r, 5) for r in range(8)] == [0, 1, 0, 0, 0, 1, 0, 0]
    assert [proposer.repair_count(8, r, 5) for r in range(3)] == [2, 2, 2]
    assert proposer.repair_count(8, 0, 1) == 1  # never more than the failures there are to repair
    assert proposer.repair_count(8, 0, 0) == 0


def test_a_user_template_with_an_undefined_variable_stops_before_any_request(tmp_path, problem, monkeypatch):
    (tmp_path / "propose.j2").write_text("{% for c in best %}{{ c.speed }}{% endfor %}\n")
    with ScriptedLLMServer() as server:
        monkeypatch.setenv("OPENAI_API_KEY", server.api_key)
        with pytest.raises(KgenError, match="propose.j2 line 1 uses undefined variable 'speed'"):
            make_proposer("openai", problem=problem, model="test-model", base_url=server.base_url,
                          prompts_dir=str(tmp_path))
        assert server.requests == []
