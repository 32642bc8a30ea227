"""What the prompt tells a model about the judge, read from the judge's own code so the two cannot
drift: the versions an evaluation records and the device's properties (the evaluating machine's, as
stored with the run: kgen.judge.evaluator_facts), how weights reach `ModelNew`, which inputs run, what
a call may keep, which torch calls are free or forbidden, and what Triton's interpreter does (the run
on a machine without a GPU).

A model that has to guess these writes probing code or guards against rules that do not exist
(issue 32). Each sentence here names the code it comes from; tests/test_prompt_facts.py checks the
sentences against that code (copy_weights on the three cases, the interpreter facts by running them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from kgen.core.records import EvalSettings
from kgen.harness.trace import NON_COMPUTE_OPS
from kgen.judge.evaluator_facts import EvaluatorFacts
from kgen.judge.static_checks import FORBIDDEN_NAMES


@dataclass(frozen=True)
class InterpreterFact:
    """One behaviour of Triton's interpreter (TRITON_INTERPRET=1) with the installed Triton, as the
    prompt states it; `works` is what tests/test_prompt_facts.py finds by running `probe`."""

    feature: str
    works: bool
    text: str
    probe: str  # a test name in tests/test_prompt_facts.py's interpreter probes


# Found by running each feature under TRITON_INTERPRET=1 with Triton 3.9 (the tests run them again).
INTERPRETER_FACTS = (
    InterpreterFact("atomics", True, "tl.atomic_add, tl.atomic_max and tl.atomic_cas work; tl.atomic_xchg of a "
                    "float32 value fails (ValueError('Unsupported data type'); int32 works).", "atomics"),
    InterpreterFact("cache hints", True, "`cache_modifier=` and `eviction_policy=` on tl.load/tl.store are "
                    "accepted (and do nothing on the CPU).", "cache_hints"),
    InterpreterFact("debug_barrier", True, "tl.debug_barrier() is accepted; program instances run one after "
                    "another, so it orders nothing.", "debug_barrier"),
    InterpreterFact("autotune", False, "@triton.autotune fails (RuntimeError: 0 active drivers): use fixed "
                    "tl.constexpr block sizes, or @triton.heuristics (which works).", "autotune"),
    InterpreterFact("scalar masks", False, "a mask that is a scalar fails (ValueError('mask has unsupported "
                    "dtype')), alone or combined with a block mask by `&`: e.g. `mask=pid == 0` or "
                    "`mask=(offs < n) & (pid == 0)` on tl.load or tl.store. Branch with `if pid == 0:` "
                    "or broadcast the test first: `(offs < n) & (offs * 0 + pid == 0)`.", "scalar_mask"),
    InterpreterFact("tl.dot precision", True, "tl.dot accepts input_precision='ieee', 'tf32' and 'tf32x3' but "
                    "computes in fp32 whatever you choose: TF32 rounding is not emulated, so a TF32 kernel that "
                    "passes here may fail the tolerance on a GPU.", "dot_precision"),
    InterpreterFact("libdevice", False, "libdevice (triton.language.extra.libdevice / .cuda.libdevice) fails; "
                    "tl.exp, tl.log, tl.sqrt, tl.sigmoid, tl.erf work, and there is no tl.tanh: write tanh "
                    "with tl.exp.", "libdevice"),
    InterpreterFact("block pointers", False, "tl.make_block_ptr raises NotImplementedError (block pointers "
                    "were removed in favour of tl.make_tensor_descriptor, which works).", "block_ptr"),
)

# Triton facts that hold on a GPU as well as in the interpreter (also probed by the tests).
TRITON_FACTS = (
    "tl.arange(start, end) needs end - start to be a power of 2: pad to the next power of 2 and mask.",
)


def forbidden_calls() -> list[str]:
    """`name` (why, its first clause) for every name the static checks reject
    (kgen.judge.static_checks.FORBIDDEN_NAMES)."""
    return [f"`{name}` ({why.split(' (')[0]})" for name, why in FORBIDDEN_NAMES.items()]


def free_torch_ops() -> list[str]:
    """The aten operators the work audit never counts (kgen.harness.trace.NON_COMPUTE_OPS), without
    the internal ones a candidate would not write."""
    return sorted(op for op in NON_COMPUTE_OPS if op.islower() and not op.startswith(("_", "sym_")))


def judge_facts(timeout_s: Optional[float] = None) -> dict[str, Any]:
    """The numbers of the judge's rules that the prompt quotes; `timeout_s`: the run's time limit
    (a search's `--timeout`), else the judge's default."""
    from kgen.harness.runner import LAUNCH_SHADOW_CYCLES
    from kgen.judge.audit import TORCH_WORK_LIMIT
    from kgen.problems.problem import CONSTANT_PARAM_NOISE

    settings = EvalSettings()
    return {"trials": max(int(settings.trials), 5), "last_trial_scale": 100, "torch_work_limit_pct":
            round(100 * TORCH_WORK_LIMIT), "timeout_s": timeout_s or settings.timeout_s,
            # the GPU-side wait before each timed run: host work in forward shorter than it is not timed
            "launch_shadow_ms": round(LAUNCH_SHADOW_CYCLES / 2e9 * 1e3, 1),
            "constant_param_noise": CONSTANT_PARAM_NOISE}  # how a constant parameter is perturbed (make_model)


def prompt_facts(evaluator: EvaluatorFacts, timeout_s: Optional[float] = None) -> dict[str, Any]:
    """Everything system.j2 states about the judge and the machine that evaluates the candidates (see
    kgen/proposers/prompts.py): `evaluator`'s versions and GPU, never this process's."""
    return {"versions": dict(evaluator.versions), "device_properties": evaluator.device_properties,
            "forbidden_calls": forbidden_calls(), "free_torch_ops": free_torch_ops(), "judge": judge_facts(timeout_s),
            "interpreter": [f.text for f in INTERPRETER_FACTS], "triton": list(TRITON_FACTS)}
