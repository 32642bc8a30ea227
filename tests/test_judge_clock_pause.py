"""The judge's own work is not charged to the candidate's --timeout (issue 31: at the full size on a CPU the
float64 references and output checks took tens of seconds and `timeout` was reported for a candidate that never ran).
Real Judge, real problem, CPU; nothing mocked."""
import time

import torch

from kgen.core.records import EvalSettings
from kgen.judge.judge import Judge
from kgen.judge.sandbox import SandboxMode
from kgen.judge.verdict import Trial
from kgen.problems.problem import load_problem


def _judge(timeout_s: float = 5.0) -> Judge:
    problem = load_problem("softmax", "small")
    return Judge(problem, "", "triton", EvalSettings(device="cpu", size="small", timeout_s=timeout_s), SandboxMode.NONE)


def test_time_inside_judge_work_moves_the_deadline_by_as_much():
    judge = _judge()
    before = judge.deadline
    with judge.judge_work():
        time.sleep(0.3)
    assert judge.deadline - before >= 0.3
    left = judge.left_s()
    time.sleep(0.2)  # outside it, the candidate's time runs
    assert judge.left_s() <= left - 0.2 + 0.05


def test_drawing_a_trials_references_costs_the_candidate_nothing():
    judge = _judge()
    judge.make_trials()
    trial = Trial(seed=3, scale=1.0)
    before = judge.deadline
    started = time.monotonic()
    judge.make(trial)
    spent = time.monotonic() - started
    assert isinstance(trial.references[0], torch.Tensor) and trial.references[0].dtype == torch.float64
    # what make() took (the inputs, the float64 reference, torch's own fp32 run) came back to the deadline
    assert spent > 0 and judge.deadline - before >= 0.9 * spent, (spent, judge.deadline - before)
