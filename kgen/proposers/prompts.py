"""Prompt rendering: the Jinja2 templates in `prompts/` (or a user's `--prompts DIR`, whose templates
override the bundled ones name by name) filled from the problem and its search history.

Templates are rendered with StrictUndefined: a template that names a variable the context does not
hold fails with a KgenError naming the variable and the template, never a prompt with a hole in it.

The variables every template sees (see `prompt_context`):
  problem        name, size, source (the reference module at this size, no KGEN_ settings),
                 inputs, outputs (shape+dtype text), dtype
  language       triton | cuda | any
  device         the evaluating GPU's name, or None (no GPU: candidates are checked in Triton's interpreter)
  ceilings       {bandwidth_gb_s, fp32_tflop_s, tf32_tflop_s, half_tflop_s (fp16/bf16)} measured on that GPU, or None
  roofline       {flops, bytes, floor_ms, bound}; floor_ms and bound are None without ceilings
  baseline       {eager_ms, compile_ms}, each None until timed
  best           the best correct candidates, the promoted best first (kgen.store.promotion), then fastest
                 first: {id, language, source, idea, runtime_ms, speedup_eager, speedup_compile,
                 roofline_pct, profile (kernel_profile.summary: where its GPU time went, launch
                 configuration, registers, spills, achieved bandwidth; None untimed), tied_with (the
                 first's id where within its timing noise, else None)}
  profiles_note  one line: what the profiles are, or that they are off on this machine (no GPU)
  failures       recent failures, newest first: {id, language, source, idea, outcome, message}
  ideas_that_worked, round_index, correct_count, tried_count
  tolerance_rule the judge's tolerance rule in words (kgen.judge.verify.tolerance_rule_text: the judge's own
                 rule, for the problem's dtype and rtol, the default rtol unless one is given)
  failure        (repair.j2 only) the failure to fix, as in `failures`
  state_dict     the reference's parameters and buffers as `name (shape dtype)`, in state-dict order
  mode           {training, dropout}: the mode the judge calls Model and ModelNew in, and whether dropout
                 layers are switched off for it (reference_mode)
  facts          kgen.proposers.prompt_facts.prompt_facts: versions, device properties (GPU), forbidden calls,
                 torch operators that are not work, the judge's numbers, the interpreter's behaviour
The device, ceilings, versions and properties are the evaluating machine's, stored with the run
(evaluating_machine), not those of the process that renders the prompt.
Filters: ms (0.123 ms / not timed), speedup (1.23x / -), pct (45.6% / -), si (1.20 G).
"""

from __future__ import annotations

import ast
import re
import traceback
from pathlib import Path
from typing import Any, Optional

import jinja2

from kgen.core import fmt, pyast
from kgen.core.errors import KgenError
from kgen.judge.evaluator_facts import EvaluatorFacts
from kgen.problems.problem import Problem, on_device, problem_code
from kgen.proposers.prompt_facts import prompt_facts
from kgen.store.history import History
from kgen.store.queries import ScoredCandidate

TEMPLATES = ("system.j2", "propose.j2", "repair.j2")


def bundled_prompts_dir() -> Path:
    from kgen.core.resources import prompts_dir

    return prompts_dir()


def _ms(value: Optional[float]) -> str:
    return "not timed" if value is None else f"{fmt.ms(value)} ms"


def _candidate_view(c: ScoredCandidate, profiles: Optional[dict[int, str]] = None,
                    tied_with: Optional[int] = None) -> dict[str, Any]:
    return {"id": c.id, "language": c.language, "source": c.source, "idea": c.idea, "runtime_ms": c.runtime_ms,
            "speedup_eager": c.speedup_eager, "speedup_compile": c.speedup_compile, "roofline_pct": c.roofline_pct,
            "profile": (profiles or {}).get(c.id), "tied_with": tied_with}


def failure_view(c: ScoredCandidate) -> dict[str, Any]:
    return {"id": c.id, "language": c.language, "source": c.source, "idea": c.idea, "outcome": c.outcome,
            "message": c.message or ""}


def reference_source(problem: Problem) -> str:
    """The problem's source at its size, without kgen's own settings (KGEN_* and `# kgen:` lines),
    which say nothing about the computation."""
    source = problem.sized_source
    drop: set[int] = set()
    try:
        for node in pyast.parse(source).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if any(isinstance(t, ast.Name) and t.id.startswith("KGEN_") for t in targets):
                drop.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    except SyntaxError:
        return source
    lines = [line for i, line in enumerate(source.splitlines(), 1)
             if i not in drop and not line.lstrip().lower().startswith("# kgen:")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def meta_reference(problem: Problem) -> Any:
    """The reference built on the meta device (no memory), for what the prompt says of its state and mode."""
    with problem_code(problem, "building the reference on the meta device"), on_device("meta"):
        return problem.module.Model(*problem.init_inputs())


def reference_state(model: Any) -> list[str]:
    """The reference's state dict as `name (shape dtype)`: the names and order copy_weights matches
    `ModelNew`'s state dict against."""
    import torch

    return [f"{name} ({'×'.join(map(str, t.shape)) or 'scalar'} {str(t.dtype).removeprefix('torch.')})"
            for name, t in model.state_dict().items() if isinstance(t, torch.Tensor)]


def evaluating_machine(history: History) -> EvaluatorFacts:
    """The one place that says which machine's facts a prompt states: the machine that evaluates the
    candidates, as the search stored it with the run (History.evaluator; a GPU's name, properties and
    ceilings, its torch, Triton and CUDA), never the process rendering the prompt. A history that names
    none (a test's, the template check) states a CPU run here: this process's versions, no GPU."""
    if history.evaluator is not None:
        return history.evaluator
    from kgen.judge.evaluate import _versions

    return EvaluatorFacts(device="cpu", versions=_versions())


def baseline_tf32(settings: dict) -> Optional[str]:
    """What TF32 the baselines were allowed, from the flags kgen.judge.baseline_worker recorded with them
    (torch's defaults unless the user changed them): the candidate must be fp32-accurate, the baselines may not
    be. None where nothing was recorded."""
    conv, matmul = settings.get("allow_tf32_cudnn"), settings.get("allow_tf32_matmul")
    if conv is None and matmul is None:
        return None
    said = {True: "may use TF32", False: "run in full fp32"}
    return (f"torch's flags when they were timed: cuDNN convolutions {said[bool(conv)]}, matmuls "
            f"{said[bool(matmul)]} (torch.backends.cudnn.allow_tf32={bool(conv)}, "
            f"torch.backends.cuda.matmul.allow_tf32={bool(matmul)})")


def reference_mode(model: Any) -> dict[str, bool]:
    """The mode the judge calls Model and ModelNew in (kgen.core.records.judged_mode: as the reference's
    __init__ leaves it, dropout layers off), and whether it has dropout layers to switch off."""
    import torch

    dropout = any(isinstance(m, torch.nn.modules.dropout._DropoutNd) for m in model.modules())
    return {"training": model.training, "dropout": dropout}


def prompt_context(problem: Problem, history: History, language: str = "any", round_index: int = 0,
                   rtol: Optional[float] = None) -> dict[str, Any]:
    """Everything the templates may use, as plain values (documented in this module's docstring)."""
    from kgen.judge.verify import tolerance_rule_text

    machine = evaluating_machine(history)
    roof, ceil = history.roofline, machine.ceilings
    reference = meta_reference(problem)
    return {
        "tolerance_rule": tolerance_rule_text(problem.dtype, rtol),
        "problem": {"name": problem.name, "size": problem.size, "source": reference_source(problem),
                    "inputs": [str(s) for s in problem.input_specs()],
                    "outputs": [str(s) for s in problem.output_specs()], "dtype": problem.dtype},
        "language": language,
        "device": machine.device if machine.gpu else None,
        "ceilings": None if ceil is None else {"bandwidth_gb_s": ceil.bandwidth_bytes_per_s / 1e9,
                                               "fp32_tflop_s": ceil.fp32_flops_per_s / 1e12,
                                               "tf32_tflop_s": ceil.tf32_flops_per_s / 1e12,
                                               "half_tflop_s": ceil.half_flops_per_s / 1e12},
        "roofline": {"flops": roof.flops if roof else None, "bytes": roof.bytes_moved if roof else None,
                     "floor_ms": history.floor_ms,
                     "bound": roof.bound(ceil) if roof is not None and ceil is not None else None},
        "baseline": {"eager_ms": history.baseline_eager_ms, "compile_ms": history.baseline_compile_ms,
                     "tf32": baseline_tf32(history.baseline_settings)},
        "best": [_candidate_view(c, history.profiles, history.ties.get(c.id)) for c in history.best],
        "profiles_note": history.profiles_note,
        "failures": [failure_view(c) for c in history.failures],
        "ideas_that_worked": list(history.ideas_that_worked),
        "round_index": round_index,
        "correct_count": history.correct_count,
        "tried_count": len(history.tried_hashes),
        "state_dict": reference_state(reference),
        "mode": reference_mode(reference),
        "facts": prompt_facts(machine, history.timeout_s),
    }


class PromptRenderer:
    """Renders the three templates; `prompts_dir` templates take precedence over the bundled ones."""

    def __init__(self, prompts_dir: Optional[str | Path] = None):
        search = [str(bundled_prompts_dir())]
        if prompts_dir is not None:
            user = Path(prompts_dir).expanduser()
            if not user.is_dir():
                raise KgenError(f"prompts directory not found: {prompts_dir}")
            if not any((user / t).is_file() for t in TEMPLATES):
                raise KgenError(f"prompts directory {prompts_dir} holds none of {', '.join(TEMPLATES)}")
            search.insert(0, str(user))
        self.search_path = search
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(search), undefined=jinja2.StrictUndefined,
                                      keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                                      autoescape=False)
        self.env.filters.update(ms=_ms, speedup=fmt.speedup, pct=fmt.pct, si=fmt.si)

    def template_path(self, name: str) -> str:
        for folder in self.search_path:
            if (Path(folder) / name).is_file():
                return str(Path(folder) / name)
        return name

    def render(self, name: str, context: dict[str, Any]) -> str:
        try:
            template = self.env.get_template(name)
            return template.render(**context).strip() + "\n"
        except jinja2.TemplateNotFound as e:
            raise KgenError(f"prompt template {name} not found in {' or '.join(self.search_path)}") from e
        except jinja2.TemplateSyntaxError as e:
            raise KgenError(f"prompt template {e.filename or name} line {e.lineno}: syntax error: {e.message}") from e
        except jinja2.UndefinedError as e:
            raise KgenError(f"prompt template {self._where(e, name)} uses undefined variable "
                            f"'{_undefined_name(str(e))}'") from e

    def _where(self, error: Exception, name: str) -> str:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.endswith(".j2")]
        if frames:
            return f"{frames[-1].filename} line {frames[-1].lineno}"
        return self.template_path(name)

    def messages(self, template: str, context: dict[str, Any]) -> list[dict[str, str]]:
        """The chat: the system prompt, then `template` (propose.j2 or repair.j2) as the user's turn."""
        return [{"role": "system", "content": self.render("system.j2", context)},
                {"role": "user", "content": self.render(template, context)}]


def _undefined_name(message: str) -> str:
    m = re.search(r"has no attribute '([^']+)'", message) or re.search(r"'([^']+)' is undefined", message)
    return m.group(1) if m else message
