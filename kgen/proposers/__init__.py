"""Proposers write the candidates: given the problem, the search history and a count n, a proposer
returns up to n proposals, each with its source (None when a reply held no usable code) and where
it came from. Proposals are stored whether or not they later compile.

  openai   any OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, Ollama, llama.cpp's server, LM Studio,
           TGI, LiteLLM, OpenRouter, DeepSeek); what their replies and errors differ in: compat.py
  offline  no network: the problem's starter kernels, then retunings of the best candidates
  replay   the proposals logged in another results DB, in order
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Protocol, runtime_checkable

from kgen.core.errors import KgenError
from kgen.core.records import LANGUAGE_CHOICES, PROPOSER_KINDS, Proposal
from kgen.problems.problem import Problem
from kgen.store.history import History


@runtime_checkable
class Proposer(Protocol):
    name: str  # 'openai' | 'offline' | 'replay'
    model: Optional[str]

    def propose(self, problem: Problem, history: History, n: int, round_index: int) -> list[Proposal]:
        """Up to n proposals for this round (fewer when the proposer has run out; [] when done)."""
        ...


def default_proposer_kind() -> str:
    """'openai' when an endpoint is configured (OPENAI_BASE_URL or OPENAI_API_KEY), else 'offline'."""
    return "openai" if os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_KEY") else "offline"


def make_proposer(kind: str, *, problem: Problem, language: str = "any", seed: int = 0, model: Optional[str] = None,
                  base_url: Optional[str] = None, api_key_env: str = "OPENAI_API_KEY", temperature: float = 0.8,
                  max_tokens: int = 8192, concurrency: int = 4, request_timeout_s: float = 600,
                  max_retries: int = 5, prompts_dir: Optional[str] = None, replay_db: Optional[str] = None,
                  replay_run: Optional[int] = None, starters_dir: Optional[str] = None) -> Proposer:
    """A ready proposer, its configuration checked: the openai proposer has already reached its
    endpoint once (a bad key, an unknown model or an unreachable server is a KgenError here, before
    any round). Raises KgenError on bad configuration."""
    if language not in LANGUAGE_CHOICES:
        raise KgenError(f"unknown language '{language}' (choose {', '.join(LANGUAGE_CHOICES)})")
    if kind == "openai":
        from kgen.proposers.openai_proposer import OpenAIProposer, RetryPolicy
        from kgen.proposers.prompts import PromptRenderer

        if concurrency < 1:
            raise KgenError(f"concurrency must be at least 1 (got {concurrency})")
        if max_tokens < 1:
            raise KgenError(f"max tokens must be at least 1 (got {max_tokens})")
        if request_timeout_s <= 0:
            raise KgenError(f"request timeout must be positive (got {request_timeout_s})")
        if max_retries < 0:
            raise KgenError(f"max retries cannot be negative (got {max_retries})")
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        api_key = os.environ.get(api_key_env)
        if not api_key:
            if base_url is None:
                raise KgenError(f"the openai proposer needs an endpoint: set {api_key_env} for OpenAI, or "
                                "OPENAI_BASE_URL (--base-url) for a local server")
            api_key = "unused"  # local servers (vLLM, Ollama, llama.cpp) take any key
        renderer = PromptRenderer(prompts_dir)
        proposer = OpenAIProposer(problem=problem, model=model or os.environ.get("KGEN_MODEL") or None,
                                  base_url=base_url, api_key=api_key, language=language, temperature=temperature,
                                  max_tokens=max_tokens, concurrency=concurrency,
                                  request_timeout_s=request_timeout_s, retry=RetryPolicy(max_retries=max_retries),
                                  renderer=renderer, api_key_env=api_key_env)
        proposer.check()
        return proposer
    if kind == "offline":
        from kgen.proposers.offline import OfflineProposer

        return OfflineProposer(problem=problem, language=language, seed=seed,
                               starters_dir=Path(starters_dir) if starters_dir else None)
    if kind == "replay":
        from kgen.proposers.replay import ReplayProposer

        if not replay_db:
            raise KgenError("the replay proposer needs a results DB to replay: --from OTHER.db")
        return ReplayProposer(replay_db, run_id=replay_run, problem=problem)
    raise KgenError(f"unknown proposer '{kind}' (choose {', '.join(PROPOSER_KINDS)})")
