"""The small typed records that cross kgen's stages (proposer -> evaluator -> database -> search)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Optional


def judged_mode(model: Any, training: bool) -> Any:
    """Put `model` (an nn.Module) in the mode the judge calls references and candidates in, and return it:
    `training` is the reference's mode as its `__init__` leaves it (nn.Module's default, training, unless it
    says otherwise: KernelBench calls its modules so, and published kernels for its BatchNorm problems compute
    the batch's statistics), with every dropout layer off, so the reference is a function of its inputs and
    weights (a dropout mask drawn in float32 and in float64 differs). Problem.make_model, the runner's
    ModelNew and the prompt (kgen.proposers.prompts) all go through here."""
    import torch

    model.train(training)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.eval()
    return model


class Outcome(str, Enum):
    """What an evaluation concluded. The values are the strings stored in the DB and printed."""

    STATIC_REJECT = "static_reject"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    INCORRECT = "incorrect"
    CORRECT = "correct"
    SUSPICIOUS = "suspicious"  # correct, but faster than physics or the judge's clock allows
    # kgen's own fault (the judge failed, the sandbox could not start): never the candidate's; a search
    # evaluates the candidate again
    HARNESS_ERROR = "harness_error"
    # a CUDA candidate that compiled on a machine whose torch has no CUDA: not run, verified or timed
    NOT_RUN = "not_run"
    # a proposal that held no code never reaches the evaluator; it is stored with this outcome
    NO_CODE = "no_code"

    def __str__(self) -> str:
        return self.value


# On the CPU, Triton's interpreter runs the kernels inside the candidate's own process: the outputs are the
# judge's to check, but nothing outside that process sees who computed them (no GPU kernel audit, and the op
# trace and ablation run where the candidate can reach them). A CPU `correct` says so wherever it is shown.
CPU_CORRECT = "correct (CPU: outputs checked; who did the work not audited)"


def verdict_label(outcome: Optional[str], device: Optional[str]) -> str:
    """An outcome as users read it: `correct` on the CPU is CPU_CORRECT."""
    if outcome == Outcome.CORRECT.value and device == "cpu":
        return CPU_CORRECT
    return outcome or "not evaluated"


# The verdicts an evaluation can reach about a candidate it ran (not_run and no_code aside).
OUTCOMES = tuple(o.value for o in (Outcome.STATIC_REJECT, Outcome.COMPILE_ERROR, Outcome.RUNTIME_ERROR,
                                   Outcome.TIMEOUT, Outcome.INCORRECT, Outcome.CORRECT, Outcome.SUSPICIOUS,
                                   Outcome.HARNESS_ERROR))
# The candidate's own failures (what the repair prompt and the failure history show).
FAILURE_OUTCOMES = tuple(o.value for o in (Outcome.STATIC_REJECT, Outcome.COMPILE_ERROR, Outcome.RUNTIME_ERROR,
                                           Outcome.TIMEOUT, Outcome.INCORRECT, Outcome.NO_CODE))
NO_CODE = Outcome.NO_CODE.value
NOT_RUN = Outcome.NOT_RUN.value
LANGUAGES = ("triton", "cuda")
# The choices a search takes (kept here, with no heavy imports, so the CLI checks them at once).
LANGUAGE_CHOICES = (*LANGUAGES, "any")
PROPOSER_KINDS = ("openai", "offline", "replay")
SIZES = ("full", "small")


@dataclass
class EvalSettings:
    """How to evaluate: where, at which size, and how strictly."""

    device: str = "cpu"  # cpu | cuda | cuda:N
    size: str = "small"
    timeout_s: float = 300.0
    rtol: Optional[float] = None  # None: the dtype's default (1e-5 fp32, 1e-2 fp16/bf16)
    trials: int = 5
    min_timed_runs: int = 100
    min_timed_s: float = 1.0
    baseline_eager_ms: Optional[float] = None
    baseline_compile_ms: Optional[float] = None
    floor_ms: Optional[float] = None       # the roofline floor of the reference's bytes and FLOPs (% of roofline)
    impossible_ms: Optional[float] = None  # writing the outputs once: a correct time below it is `suspicious`
    cuda_arch: Optional[str] = None  # e.g. "9.0": what CUDA builds target; None: the visible GPU's, else H100's
    sandbox: str = "bwrap"  # "bwrap" | "none" (--no-sandbox: recorded with every result)
    judge_clock: Optional[str] = None  # GPU timing: "gate" | "events"; None: KGEN_JUDGE_CLOCK, else gate
    # the best correct time a search has found for this problem and size (KGEN_RACE=1): a candidate whose every
    # timed run of the first RACE_RUNS is RACE_MARGIN times slower stops timing there (kgen.judge.timing)
    race_ms: Optional[float] = None


@dataclass
class EvalResult:
    """What the evaluation found for one candidate. Field names are the `kgen eval --json` keys."""

    outcome: str
    message: str = ""
    language: Optional[str] = None
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None
    norm_rel_err: Optional[float] = None
    runtime_ms: Optional[float] = None
    eager_ms: Optional[float] = None
    compile_ms: Optional[float] = None
    speedup_eager: Optional[float] = None
    speedup_compile: Optional[float] = None
    roofline_pct: Optional[float] = None
    device: str = "cpu"
    size: str = "small"
    atol: Optional[float] = None
    rtol: Optional[float] = None
    torch_ops: list[str] = field(default_factory=list)
    compile_s: Optional[float] = None
    eval_s: Optional[float] = None
    torch_version: Optional[str] = None
    triton_version: Optional[str] = None
    cuda_version: Optional[str] = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def set_baselines(self, eager_ms: Optional[float], compile_ms: Optional[float]) -> None:
        """The baselines' times, and the speedups against them of a correct timed result."""
        self.eager_ms, self.compile_ms = eager_ms, compile_ms
        if self.outcome != Outcome.CORRECT.value or not self.runtime_ms:
            return
        self.speedup_eager = eager_ms / self.runtime_ms if eager_ms else None
        self.speedup_compile = compile_ms / self.runtime_ms if compile_ms else None


@dataclass
class Proposal:
    """One candidate source from a proposer, with where it came from."""

    source: Optional[str]  # None: the response held no usable code (stored as outcome no_code)
    proposer: str
    language: str = "unknown"
    model: Optional[str] = None
    base_url: Optional[str] = None  # the endpoint that served it (LLM proposals)
    parent_ids: list[int] = field(default_factory=list)
    idea: Optional[str] = None
    origin: Optional[str] = None
    prompt: Optional[Any] = None  # the rendered chat messages
    response: Optional[str] = None
    template: Optional[str] = None
    tokens_in: Optional[int] = None
    tokens_out: Optional[int] = None
    latency_s: Optional[float] = None
    attempts: int = 1
    error: Optional[str] = None
