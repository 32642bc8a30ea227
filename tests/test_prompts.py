"""Prompt rendering from a real history read from a real results DB; user templates; clear errors."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kgen.core.errors import KgenError
from kgen.core.records import EvalResult, Proposal
from kgen.problems.roofline import Ceilings, compute_roofline
from kgen.proposers.prompts import TEMPLATES, PromptRenderer, failure_view, prompt_context
from kgen.store.history import History, build_history, trim_message
from kgen.store.queries import add_evaluation, add_proposal

from evaluators import H100

REPO = Path(__file__).resolve().parent.parent
STARTERS = REPO / "problems/starters/softmax"
TRITON = (STARTERS / "triton_online_two_pass.py").read_text()
CUDA = (STARTERS / "cuda_two_pass.py").read_text()


def _add(db, problem, source, result, idea=None, language="triton"):
    cid = add_proposal(db, Proposal(source=source, proposer="offline", language=language, idea=idea), run_id=None,
                       round_index=0, problem=problem.name, problem_hash=problem.source_hash)
    add_evaluation(db, cid, result)
    return cid


def _correct(ms, eager_ms=1.0):
    return EvalResult(outcome="correct", runtime_ms=ms, speedup_eager=eager_ms / ms,
                      speedup_compile=0.8 * eager_ms / ms, roofline_pct=40.0)


@pytest.fixture
def populated(db, problem):
    """Three correct Triton retunings (fastest 0.30 ms), one slower CUDA kernel, two failures."""
    ids = {
        "t_fast": _add(db, problem, TRITON.replace("8192", "4096"), _correct(0.30), "BLOCK_SIZE 8192→4096"),
        "t_mid": _add(db, problem, TRITON, _correct(0.35), "Online softmax, two passes."),
        "t_slow": _add(db, problem, TRITON.replace("8192", "2048"), _correct(0.40), "BLOCK_SIZE 8192→2048"),
        "cuda": _add(db, problem, CUDA, _correct(0.50, eager_ms=0.4), "Block per row in CUDA.", language="cuda"),
        "compile": _add(db, problem, TRITON.replace("tl.exp(", "tl.expp(", 1),
                        EvalResult(outcome="compile_error", message="\n".join(
                            ["Traceback (most recent call last):"] + [f"  frame {i}" for i in range(200)]
                            + ["AttributeError: module 'triton.language' has no attribute 'expp'"])),
                        "exp2 instead of exp"),
        "wrong": _add(db, problem, TRITON.replace("* inv", "* inv * 1.01"),
                      EvalResult(outcome="incorrect", message="max abs error 0.0101 > atol 1e-05"), "skip the divide"),
    }
    add_proposal(db, Proposal(source=None, proposer="openai", error="the response held no code block"), run_id=None,
                 round_index=0, problem=problem.name, problem_hash=problem.source_hash)
    return ids


def test_history_holds_diverse_best_candidates_fastest_first(db, problem, populated):
    history = build_history(db, problem, max_best=3)
    assert [c.id for c in history.best] == [populated["t_fast"], populated["t_mid"], populated["cuda"]]
    assert history.correct_count == 4
    assert history.ideas_that_worked[:2] == ["BLOCK_SIZE 8192→4096", "Online softmax, two passes."]
    assert "Block per row in CUDA." not in history.ideas_that_worked  # slower than eager


def test_history_holds_failures_with_trimmed_messages_and_every_tried_source(db, problem, populated):
    history = build_history(db, problem)
    assert [f.id for f in history.failures] == [populated["wrong"], populated["compile"]]  # newest first, no no_code
    message = history.failures[1].message
    assert message.startswith("Traceback") and message.endswith("has no attribute 'expp'") and "lines cut" in message
    assert len(history.tried_hashes) == 6
    assert history.is_tried(TRITON + "\n# a comment\n")
    assert history.floor_ms is None and history.evaluator is None  # no evaluating machine named: no GPU
    assert history.roofline.bytes_moved == 2 * 64 * 1000 * 4


def test_trim_message_keeps_head_and_tail():
    text = trim_message("\n".join(f"line {i}" for i in range(1000)), head=3, tail=2)
    assert text.splitlines() == ["line 0", "line 1", "line 2", "... (995 lines cut) ...", "line 998", "line 999"]
    assert len(trim_message("x" * 10000, max_chars=1000)) < 1100


def test_propose_prompt_shows_reference_best_and_failures(db, problem, populated):
    context = prompt_context(problem, build_history(db, problem), "triton", round_index=3)
    [system, user] = PromptRenderer().messages("propose.j2", context)
    assert system["role"] == "system" and "ModelNew" in system["content"] and "Triton" in system["content"]
    text = user["content"]
    assert "torch.softmax(x, dim=1)" in text and "64×1000 float32" in text
    assert f"Candidate #{populated['t_fast']} (triton): 0.300 ms, 3.33x vs eager" in text
    assert "BLOCK_SIZE = 4096" in text and "40.0% of roofline" in text
    assert "has no attribute 'expp'" in text and "max abs error 0.0101" in text
    assert "- BLOCK_SIZE 8192→4096" in text  # ideas that worked
    assert f"faster than candidate #{populated['t_fast']}" in text
    assert "Idea:" in text and "{{" not in text and "{%" not in text


def test_propose_prompt_with_a_gpu_shows_device_ceilings_floor_and_baselines(problem):
    h100 = replace(H100, ceilings=Ceilings("NVIDIA H100 80GB HBM3", 3.0e12, 5.0e13, "2.5", 0.0))
    history = History(baseline_eager_ms=1.25, baseline_compile_ms=0.9, evaluator=h100)
    history.roofline = compute_roofline(problem)
    history.floor_ms = history.roofline.floor_ms(h100.ceilings)
    text = PromptRenderer().render("propose.j2", prompt_context(problem, history))
    assert "NVIDIA H100 80GB HBM3" in text and "3000 GB/s" in text and "50.0 fp32 TFLOP/s" in text
    assert "memory-bound" in text and "eager 1.250 ms, torch.compile 0.900 ms" in text
    assert "No correct candidate yet." in text


def test_repair_prompt_shows_the_failure_and_its_error(db, problem, populated):
    history = build_history(db, problem)
    failure = next(f for f in history.failures if f.id == populated["compile"])
    text = PromptRenderer().render("repair.j2", dict(prompt_context(problem, history, "cuda"),
                                                     failure=failure_view(failure)))
    assert f"#{populated['compile']} (triton), outcome compile_error" in text
    assert "tl.expp(" in text and "has no attribute 'expp'" in text and "in CUDA C++" in text


@pytest.mark.parametrize("language", ["triton", "cuda", "any"])
def test_every_template_renders_for_every_language(problem, language):
    renderer = PromptRenderer()
    context = dict(prompt_context(problem, History(roofline=None), language),
                   failure={"id": 1, "language": "triton", "source": "x", "idea": None, "outcome": "timeout",
                            "message": "ran past 300 s"})
    for name in TEMPLATES:
        assert renderer.render(name, context).strip()


def test_an_undefined_variable_names_itself_and_the_template(tmp_path, problem):
    (tmp_path / "propose.j2").write_text("Problem {{ problem.name }}.\nSpeed: {{ target_speedup }}\n")
    renderer = PromptRenderer(tmp_path)
    with pytest.raises(KgenError) as err:
        renderer.render("propose.j2", prompt_context(problem, History()))
    message = str(err.value)
    assert "'target_speedup'" in message and str(tmp_path / "propose.j2") in message and "line 2" in message


def test_an_undefined_attribute_names_itself(tmp_path, problem):
    (tmp_path / "system.j2").write_text("{{ problem.flavour }}\n")
    with pytest.raises(KgenError, match="undefined variable 'flavour'"):
        PromptRenderer(tmp_path).render("system.j2", prompt_context(problem, History()))


def test_user_templates_override_the_bundled_ones_by_name(tmp_path, problem):
    (tmp_path / "system.j2").write_text("You are terse. Language: {{ language }}.\n")
    renderer = PromptRenderer(tmp_path)
    [system, user] = renderer.messages("propose.j2", prompt_context(problem, History(), "cuda"))
    assert system["content"] == "You are terse. Language: cuda.\n"
    assert "torch.softmax(x, dim=1)" in user["content"]  # the bundled propose.j2


def test_bad_prompt_directories_and_syntax_are_clear_errors(tmp_path, problem):
    with pytest.raises(KgenError, match="prompts directory not found"):
        PromptRenderer(tmp_path / "missing")
    with pytest.raises(KgenError, match="holds none of"):
        PromptRenderer(tmp_path)
    (tmp_path / "repair.j2").write_text("ok\n{% if failure %}\nno endif\n")
    with pytest.raises(KgenError, match="repair.j2 line .*syntax error"):
        PromptRenderer(tmp_path).render("repair.j2", prompt_context(problem, History()))
