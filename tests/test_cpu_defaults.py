"""Without a GPU a search proposes Triton only (CUDA on explicit request, compile-only, said once), at
a budget that suits Triton's interpreter, and the prompt does not invite CUDA."""

import pytest
import torch

from kgen.problems.problem import load_problem
from kgen.proposers.prompts import PromptRenderer, prompt_context
from kgen.search.loop import CPU_CANDIDATES, GPU_CANDIDATES, SearchConfig, no_gpu_note, resolve_defaults
from kgen.store.history import History

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the defaults of a machine without a GPU")


def test_without_a_gpu_a_search_defaults_to_triton_the_small_size_and_fewer_candidates():
    config = resolve_defaults(SearchConfig(problem="softmax", proposer="offline"))
    assert (config.language, config.size, config.candidates) == ("triton", "small", CPU_CANDIDATES)
    assert CPU_CANDIDATES < GPU_CANDIDATES


@pytest.mark.parametrize("language", ["cuda", "any"])
def test_cuda_asked_for_is_kept_and_said_to_be_compile_only(language):
    config = resolve_defaults(SearchConfig(problem="softmax", proposer="offline", language=language, candidates=2))
    assert (config.language, config.candidates) == (language, 2)
    assert "only compiled" in no_gpu_note(language) and "not_run" in no_gpu_note(language)
    assert "CUDA" not in no_gpu_note("triton")


def _messages(language: str) -> str:
    problem = load_problem("softmax", "small")
    renderer = PromptRenderer()
    context = prompt_context(problem, History(), language)  # no ceilings: no GPU
    return "\n".join(m["content"] for m in renderer.messages("propose.j2", context))


def test_the_default_prompt_on_a_cpu_asks_for_triton_and_never_invites_cuda():
    language = resolve_defaults(SearchConfig(problem="softmax", proposer="openai")).language
    text = _messages(language)
    assert "Write the kernels in Triton" in text and "Use Triton." in text
    assert "CUDA C++" not in text and "load_inline" not in text and "CUDA events" not in text
    assert "nothing is timed" in text


def test_a_prompt_that_allows_cuda_on_a_cpu_says_it_is_only_compiled():
    text = _messages("any")
    assert "CUDA C++" in text and "only compiled, never run or verified" in text
