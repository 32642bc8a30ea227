"""A prompt states the machine that evaluates the candidates, never the process that renders it (issue 32):
its torch, Triton and CUDA versions, its GPU's properties and measured ceilings, where the inputs live, and
the interpreter's facts only where the evaluator has no GPU. The search takes them from its evaluator once
per start and stores them with the run; every prompt of the run (a resumed run's, a later re-render's) reads
them from there. This machine has no GPU and a CPU build of torch 2.13: the evaluators here are an H100 and
a CPU with torch 2.11, so a prompt stating this process's facts fails every test."""

from __future__ import annotations

import io
import json
import logging
import os
import sqlite3
import sys

import pytest
import torch

from kgen.core.errors import KgenError
from kgen.judge.evaluator_facts import EvaluatorFacts
from kgen.problems.problem import load_problem
from kgen.proposers.prompts import PromptRenderer, prompt_context
from kgen.store.baselines import store_baselines
from kgen.store.db import open_db
from kgen.store.history import History, build_history
from kgen.store.queries import create_run, run_evaluator, set_run_evaluator

from conftest import REPO
from evaluators import H100, H100_LINES, OTHER_CPU
from llm_server import Reply, ScriptedLLMServer

GEMM = REPO / "benchmarks/real_model/problems/12_Gemm_Multiply_LeakyReLU.py"
SOFTMAX_STARTER = (REPO / "problems/starters/softmax/triton_online_two_pass.py").read_text()
THIS_TORCH = f"torch {torch.__version__},"
INTERPRETER = "Triton's interpreter (this run: TRITON_INTERPRET=1"


def _system(problem, evaluator) -> str:
    return PromptRenderer().render("system.j2", prompt_context(problem, History(evaluator=evaluator), "any"))


def _states_the_h100(text: str) -> None:
    for line in H100_LINES:
        assert line in text
    assert "as contiguous tensors on the GPU" in text and "timing with CUDA events" in text
    assert INTERPRETER not in text and "There is no GPU here" not in text and THIS_TORCH not in text


def _states_the_other_cpu(text: str) -> None:
    assert "- Versions: torch 2.11.0+cpu, Triton 3.6.0, CUDA none (a CPU build of torch)." in text
    assert f"{INTERPRETER}, Triton 3.6.0)" in text and "as contiguous tensors on the CPU" in text
    assert "- The GPU:" not in text and THIS_TORCH not in text


@pytest.mark.skipif(torch.cuda.is_available(), reason="the rendering process must not be an H100 with torch 2.11")
def test_a_prompt_states_the_evaluating_machine_not_the_rendering_process():
    gemm = load_problem(str(GEMM), "small")
    _states_the_h100(_system(gemm, H100))
    _states_the_other_cpu(_system(gemm, OTHER_CPU))


def test_facts_keep_through_json_and_incomplete_ones_are_one_line():
    assert EvaluatorFacts.from_json(json.loads(json.dumps(H100.to_json()))) == H100
    assert EvaluatorFacts.from_json(OTHER_CPU.to_json()) == OTHER_CPU
    with pytest.raises(KgenError, match="malformed evaluator facts"):
        EvaluatorFacts.from_json({"device": "cpu"})
    with pytest.raises(KgenError, match="need its properties and measured ceilings"):
        EvaluatorFacts(device=H100.device, versions=H100.versions)  # a GPU the prompt could not describe
    with pytest.raises(KgenError, match="need the versions"):
        EvaluatorFacts(device="cpu", versions={"torch_version": "2.11.0"})


def test_a_runs_history_takes_the_evaluator_stored_with_it(tmp_path):
    """The stored machine brings its GPU's baselines, ceilings and roofline floor to the prompt; a run from
    before kgen stored one names none."""
    db = open_db(str(tmp_path / "results.db"))
    problem = load_problem("softmax", "small")
    run_id = create_run(db, problem=problem.name, problem_path=str(problem.path), problem_hash=problem.source_hash,
                        size="small", proposer="openai", model="m", language="triton", seed=0, rounds=2,
                        candidates_per_round=1, settings={}, device=H100.device)
    assert run_evaluator(db, run_id) is None and build_history(db, problem, run_id=run_id).evaluator is None
    set_run_evaluator(db, run_id, H100)
    store_baselines(db, problem, H100.device, {"eager_ms": 2.0, "compile_ms": 1.0})
    history = build_history(db, problem, run_id=run_id)
    assert history.evaluator == H100 and history.floor_ms is not None
    text = PromptRenderer().render("propose.j2", prompt_context(problem, history, "triton"))
    assert "Device: NVIDIA H100 80GB HBM3 (measured: 3004 GB/s memory bandwidth, 52.0 fp32 TFLOP/s" in text
    assert "PyTorch: eager 2.000 ms, torch.compile 1.000 ms." in text
    db.close()


def test_the_prompt_says_which_tf32_the_baselines_were_allowed(tmp_path):
    """The candidate must be fp32-accurate; the eager baseline runs with torch's flags as users get them
    (cuDNN convolutions may use TF32): the prompt says so from the flags stored with the baselines."""
    db = open_db(str(tmp_path / "results.db"))
    problem = load_problem("softmax", "small")
    run_id = create_run(db, problem=problem.name, problem_path=str(problem.path), problem_hash=problem.source_hash,
                        size="small", proposer="openai", model="m", language="triton", seed=0, rounds=1,
                        candidates_per_round=1, settings={}, device=H100.device)
    set_run_evaluator(db, run_id, H100)
    store_baselines(db, problem, H100.device, {"eager_ms": 2.0, "compile_ms": 1.0,
                                               "settings": {"allow_tf32_cudnn": True, "allow_tf32_matmul": False}})
    text = PromptRenderer().render("propose.j2", prompt_context(problem, build_history(db, problem, run_id=run_id),
                                                                "triton"))
    assert ("PyTorch: eager 2.000 ms, torch.compile 1.000 ms; torch's flags when they were timed: cuDNN convolutions "
            "may use TF32, matmuls run in full fp32") in " ".join(text.split())
    db.close()


def test_the_prompt_states_the_runs_own_time_limit(tmp_path):
    """A search run with `--timeout 90` (the real-model harness's runs) tells the model 90 s, not the judge's
    default: the H100 prompts said 300 s while their candidates had 90."""
    db = open_db(str(tmp_path / "results.db"))
    problem = load_problem("softmax", "small")
    runs = {limit: create_run(db, problem=problem.name, problem_path=str(problem.path),
                              problem_hash=problem.source_hash, size="small", proposer="openai", model="m",
                              language="triton", seed=0, rounds=1, candidates_per_round=1,
                              settings={} if limit is None else {"timeout_s": limit}, device=H100.device)
            for limit in (None, 90.0)}
    texts = {limit: PromptRenderer().render(
        "system.j2", prompt_context(problem, build_history(db, problem, run_id=run_id, evaluator=H100), "any"))
        for limit, run_id in runs.items()}
    assert "- Time limit: 90 s for the whole evaluation" in texts[90.0]
    assert "- Time limit: 300 s for the whole evaluation" in texts[None]  # a run without one: the judge's default
    db.close()


# ---- a real search on a local Ray cluster whose evaluators are other machines than its driver ----

class _H100StandIn:
    """An evaluator on the H100 of tests/evaluators.py: it reports that machine, and every candidate runs
    in 0.5 ms there."""

    FACTS = H100

    def __init__(self, problem, size, source_hash):
        pass

    def device(self):
        import ray

        from kgen.search.workers import Device

        return Device(name=self.FACTS.device, cuda_arch="9.0" if self.FACTS.gpu else None,
                      node_id=ray.get_runtime_context().get_node_id())

    def facts(self):
        return self.FACTS

    def evaluate(self, source, settings, problem=None):
        from kgen.core.records import EvalResult

        result = EvalResult(outcome="correct", runtime_ms=0.5 if self.FACTS.gpu else None, device=self.FACTS.device,
                            size=settings.size)
        result.set_baselines(settings.baseline_eager_ms, settings.baseline_compile_ms)
        return result


class _OtherCpuStandIn(_H100StandIn):
    FACTS = OTHER_CPU


def _compiled_at_once(problem, size, source_hash, source, settings):
    return None, {}, {}


def _prompts(db_path, run_id: int) -> dict[int, list[dict]]:
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute("SELECT round, prompt FROM llm_calls WHERE run_id = ? ORDER BY id", (run_id,)).fetchall()
    return {round_no: json.loads(prompt) for round_no, prompt in rows}


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the driver must not be an H100 with torch 2.11")
def test_a_search_states_its_evaluators_machine_and_a_resumed_run_its_new_one(tmp_path, monkeypatch):
    """Driver: this CPU process (torch 2.13). Round 1 and 2 are evaluated on the H100 stand-in: both prompts
    the model got state the H100, round 2 with its baselines and ceilings. The run resumed for round 3 on a CPU
    evaluator with torch 2.11 states that one, and so does any later render of the run from the DB."""
    import ray
    from ray import cloudpickle
    from rich.console import Console

    from kgen.search.cluster import Cluster, Placement
    from kgen.search.loop import SearchConfig, run_search
    from kgen.search.progress import SearchProgress
    from kgen.search.workers import Stages
    from kgen.store.db import Run

    monkeypatch.setattr(Stages, "evaluator_class", _H100StandIn)
    monkeypatch.setattr(Stages, "compile_function", staticmethod(_compiled_at_once))
    monkeypatch.setenv("KGEN_TEST_KEY", "test-key")
    db_path = tmp_path / "results.db"
    db = open_db(str(db_path))
    problem = load_problem("softmax", "small")
    store_baselines(db, problem, H100.device, {"eager_ms": 2.0, "compile_ms": 1.0})  # timed there before
    saved_env = dict(os.environ)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.shutdown()  # an earlier test's failed connection (a bad --ray-address) may have left Ray's state behind
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        cluster = Cluster(address=None, num_cpus=2, num_gpus=0, placement=Placement(1, dict(num_cpus=1)))
        with ScriptedLLMServer(default=Reply.code(SOFTMAX_STARTER, idea="Online softmax.")) as server:
            config = SearchConfig(problem="softmax", rounds=2, candidates=1, proposer="openai", language="triton",
                                  size="small", base_url=server.base_url, model="test-model",
                                  api_key_env="KGEN_TEST_KEY", overlap=False, ncu_budget_s=0)
            quiet = SearchProgress(Console(file=io.StringIO()))
            run_id = run_search(db, config, cluster=cluster, progress=quiet).run_id
            prompts = _prompts(db_path, run_id)
            assert sorted(prompts) == [1, 2]
            for chat in prompts.values():
                _states_the_h100(chat[0]["content"])
            assert "Device: NVIDIA H100 80GB HBM3 (measured: 3004 GB/s" in prompts[2][1]["content"]
            assert "PyTorch: eager 2.000 ms, torch.compile 1.000 ms." in prompts[2][1]["content"]
            assert run_evaluator(db, run_id) == H100

            monkeypatch.setattr(Stages, "evaluator_class", _OtherCpuStandIn)
            with db.session() as s:
                run = s.get(Run, run_id)
                run.settings = dict(run.settings, rounds=3)
                run.rounds_planned, run.status = 3, "interrupted"
            run_search(db, resume_run_id=run_id, cluster=cluster, progress=SearchProgress(Console(file=io.StringIO())))
            _states_the_other_cpu(_prompts(db_path, run_id)[3][0]["content"])
    finally:
        ray.shutdown()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        os.environ.clear()
        os.environ.update(saved_env)
    assert run_evaluator(db, run_id) == OTHER_CPU
    _states_the_other_cpu(PromptRenderer().render("system.j2", prompt_context(
        problem, build_history(db, problem, run_id=run_id), "triton")))
    db.close()
