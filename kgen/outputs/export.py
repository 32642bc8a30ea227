"""`kgen export`: a correct candidate as a standalone module that needs torch and triton (or a CUDA
toolchain for CUDA C++ kernels) but never kgen.

The module is the candidate's own source (its kernels and `ModelNew`, minus kgen-only settings such
as `KGEN_TUNABLE`) under a docstring holding its provenance, followed by a plain function named after
the problem that takes the forward's inputs and then the reference module's parameters:

    softmax(x)                         # a problem without parameters
    conv2d(x, weight, bias)            # Model's nn.Conv2d parameters, after the forward's inputs
    conv2d(x, weight, bias, init_inputs=[3, 16, 11, 4, 2])   # another layer configuration

`init_inputs` are the constructor arguments (the problem's `get_init_inputs()`, defaulting to its
full size); the parameters are put into a cached `ModelNew(*init_inputs)` for the call with
`torch.func.functional_call`.

What the kernel runs on is what kgen verified: every tensor on a CUDA device (CPU tensors only under
TRITON_INTERPRET=1, for a Triton kernel) that is a GPU kgen found it correct on (VERIFIED_GPUS; any
GPU when it was verified only under the interpreter), of the problem's dtype and rank, contiguous; with
`ONLY_VERIFIED_SHAPES = True` set on the module, also exactly the input shapes kgen verified
(VERIFIED_SHAPES). A call that differs in any of these runs the reference PyTorch code instead (the
problem's Model, embedded as REFERENCE_SOURCE) and warns once per argument and kind of difference,
naming it. A call that is wrong for the reference too still raises: an argument that is not a tensor,
tensors on different devices, parameters not shaped as the module built from `init_inputs` has them
(and a wrong number of arguments, as Python raises for any function).

Re-verification: on a machine with a CUDA GPU, the export first runs the candidate through the judge
on that GPU at the full size, with the tolerance kgen verified it at, and refuses (KgenError) unless
it is still correct there; the docstring says what was found, or why it was not re-verified (no GPU
on the exporting machine, or --no-verify).

`--aot` (kgen.outputs.aot): the module also carries its compiled kernels. The judge re-verifies the module's own
text (not the candidate's source), so its compile step compiles exactly the kernels of that text for
this GPU; they are appended after all the code, and the module's top installs them at import. It needs
a GPU and the re-verification (refused without either).

`--with-test` writes `test_<module>.py` beside it: the reference source embedded (full size on a GPU,
small size on CPU under Triton's interpreter), checked on fresh random inputs with the tolerance kgen
verified at.

Here: what is exported and whether (the candidate, its evaluation, the re-verification, the compiled
kernels); the text of the module and of its test is written by kgen.outputs.export_module.
"""

from __future__ import annotations

import datetime as dt
import keyword
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kgen.core import fmt
from kgen.core.errors import KgenError
from kgen.outputs.export_module import (
    ADDED_NAMES,
    TEST_TEMPLATE,
    _argument_names,
    _entry_point,
    _function_name,
    _input_names,
    _parameter_specs,
    _provenance,
    split_candidate,
)
from kgen.store.db import Candidate, Database, Evaluation, Run, db_option

DEFAULT_RTOL = 1e-5  # fp32, as the evaluator verifies when the evaluation did not record its own
DEFAULT_ATOL = 1e-5


@dataclass
class Exported:
    """What `export_candidate` wrote."""

    module_path: Path
    test_path: Optional[Path]
    candidate_id: int
    function: str
    language: str
    device: str
    speedup_eager: Optional[float]
    notes: list[str]
    reverified_on: Optional[str] = None  # this GPU, where the export found it still correct
    aot: Optional[str] = None  # what the module carries (kgen export --aot)

    def summary_lines(self) -> list[str]:
        speed = f", {self.speedup_eager:.2f}x vs eager" if self.speedup_eager is not None else ""
        again = f", re-verified correct on {self.reverified_on}" if self.reverified_on else ""
        lines = [f"wrote {self.module_path}: candidate {self.candidate_id} ({self.language}, verified on "
                 f"{self.device}{speed}{again}); call {self.module_path.stem}.{self.function}(...)"]
        if self.aot is not None:
            lines.append(f"carries {self.aot}")
        if self.test_path is not None:
            python = fmt.python_program()
            run = shlex.join([python, str(self.test_path)])
            lines.append(f"wrote {self.test_path}: run it with {run} (pytest not needed; to use pytest: "
                         f"{shlex.join([python, '-m', 'pip', 'install', 'pytest'])}, then "
                         f"{shlex.join([python, '-m', 'pytest', str(self.test_path)])})")
        return lines + [f"note: {n}" for n in self.notes]


def this_device() -> str:
    """The device name evaluations on this machine are recorded under."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def _correct_evaluation(cand: Candidate, device: Optional[str]) -> Optional[Evaluation]:
    """The evaluation an export stands on: the latest correct one on `device` if any, else the latest
    correct one at the full size, else any correct one."""
    correct = [e for e in cand.evaluations if e.outcome == "correct"]
    for pick in ([e for e in correct if e.device == device], [e for e in correct if e.size == "full"], correct):
        if pick:
            return pick[-1]
    return None


def resolve_target(db: Database, target: str) -> tuple[int, Optional[str]]:
    """A candidate id, or a problem name → its leaderboard winner on this device."""
    from kgen.store.leaderboard import leaderboard

    if target.isdigit():
        return int(target), None
    device = this_device()
    rows = [r for r in leaderboard(db, problem=target) if r.device == device]
    if rows:
        return rows[0].candidate_id, device
    elsewhere = sorted({r.device for r in leaderboard(db, problem=target)})
    if elsewhere:
        best = leaderboard(db, problem=target)[0]
        example = fmt.command("export", best.candidate_id, "-o", fmt.default_module_file(target),
                              db=db_option(db.url))
        raise KgenError(f"no correct candidate for {target} on this device ({device}); there are on "
                        f"{', '.join(elsewhere)}: export one by id, e.g. {example}")
    raise KgenError(f"no correct candidate for problem '{target}' in {db.url}")


def _load_reference(run: Optional[Run], cand: Candidate, size: str):
    from kgen.problems.problem import load_problem

    where = run.problem_path if run is not None and run.problem_path and Path(run.problem_path).is_file() \
        else cand.problem
    return load_problem(where, size)


NO_GPU = "not re-verified: no GPU on the exporting machine"
NO_VERIFY = "not re-verified on export (--no-verify)"
AOT_PENDING = "re-verifying this module's own text on this GPU (kgen export --aot)"
AOT_LINE_PENDING = "pending: the re-verification compiles them"


def gpu_available() -> bool:
    import torch

    return torch.cuda.is_available()


def reverify(problem, source: str, rtol: Optional[float], sandbox: str):
    """The candidate through the judge on this machine's GPU, at `problem`'s size and the tolerance
    kgen verified it at; the judge's EvalResult."""
    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate

    # correctness is the question here, not speed: a short timing, enough for the judge's own checks
    return evaluate_candidate(problem, source, EvalSettings(device="cuda", size=problem.size, rtol=rtol,
                                                            sandbox=sandbox, min_timed_runs=20, min_timed_s=0.1))


def _export_check(cand: Candidate, full, rtol: Optional[float], verify: bool,
                  sandbox: str) -> tuple[str, Optional[str]]:
    """What the export found on this machine (the docstring's line) and the GPU it re-verified the
    candidate on at the full size, if it did; raises KgenError when the candidate is no longer correct here."""
    if not verify:
        return NO_VERIFY, None
    if not gpu_available():
        return NO_GPU, None
    result = reverify(full, cand.source, rtol, sandbox)
    return _judged(cand, result), result.device


def _judged(cand: Candidate, result, what: str = "") -> str:
    """The docstring's line for a re-verification on this GPU; KgenError unless it found it correct."""
    if result.outcome != "correct":
        why = (result.message or "").strip().splitlines()
        why = f": {why[0][:200]}" if why else ""
        raise KgenError(f"candidate {cand.id}{what} is not correct on this GPU ({result.device}), so it is not "
                        f"exported: {result.outcome}{why} (--no-verify exports it anyway)")
    error = f"max error {result.max_abs_err:.2e}" if result.max_abs_err is not None else "max error not recorded"
    return (f"re-verified on {result.device} {dt.datetime.now(dt.timezone.utc):%Y-%m-%d}: correct, {error} "
            f"(full size, rtol {fmt.tol(result.rtol)})")


def _aot_payload(result, language: str):
    """What the module carries: the kernels the judge's compile step built for the text it just verified
    (kgen.outputs.aot), for this GPU and the versions the verified run had."""
    import torch

    from kgen.judge.builds import builds_root
    from kgen.judge.evaluate import _versions
    from kgen.outputs import aot

    key = result.details.get("build_key")
    if not isinstance(key, str) or not key:
        raise KgenError("the judge did not say where it compiled the module's kernels (no compile step ran), so "
                        "there is nothing to carry")
    here = _versions()  # where the verified run did not report its own
    meta = aot.target_meta(result.device, tuple(torch.cuda.get_device_capability()),
                           result.triton_version or here["triton_version"],
                           result.torch_version or here["torch_version"], result.cuda_version or here["cuda_version"])
    return aot.payload_from_build(builds_root() / key, result.details, language, meta)


def _same_lines_but_results(verified: str, final: str) -> None:
    """The written module's code must be the verified text's, line for line: only the docstring's two
    result lines and the payload's checksum may differ (else a kernel could have moved)."""
    from kgen.outputs.aot import SHA_NAME

    before, after = verified.splitlines(), final.splitlines()
    moved = len(before) != len(after) or any(
        a != b and not a.startswith(("    on export     ", "    compiled      ", f"{SHA_NAME} = "))
        for a, b in zip(before, after))
    if moved:
        raise KgenError("the exported module's code changed after its re-verification; this is a kgen bug, please "
                        "report it")


def export_candidate(db: Database, target: str, out: str | Path, *, with_test: bool = False, verify: bool = True,
                     aot: bool = False, sandbox: str = "bwrap") -> Exported:
    """Write candidate `target` (an id, or a problem name → its winner on this device) to `out`; on a
    machine with a GPU, only once the judge found it still correct there (unless `verify` is False).
    `aot`: the judge re-verifies the module's own text, and the module carries the kernels it compiled."""
    if aot:
        from kgen.outputs import aot as aot_part

        if not verify:
            raise KgenError(aot_part.NEEDS_VERIFY)
        if not gpu_available():
            raise KgenError(aot_part.NEEDS_GPU)
    out_path = Path(out).expanduser()
    if out_path.suffix != ".py" or not out_path.stem.isidentifier() or keyword.iskeyword(out_path.stem):
        raise KgenError(f"-o must name an importable Python file (like softmax_kernel.py), got '{out}'")
    if not out_path.parent.is_dir():
        raise KgenError(f"cannot write {out_path}: folder {out_path.parent} does not exist")
    candidate_id, device = resolve_target(db, target)
    with db.reader() as s:
        cand = s.get(Candidate, candidate_id)
        if cand is None:
            raise KgenError(f"no candidate with id {candidate_id} in {db.url}")
        ev = _correct_evaluation(cand, device or this_device())
        if ev is None:
            latest = cand.evaluations[-1] if cand.evaluations else None
            why = f"its latest evaluation is {latest.outcome}" if latest else "it has not been evaluated"
            raise KgenError(f"candidate {candidate_id} has no correct evaluation ({why}); only correct candidates "
                            "are exported")
        run = s.get(Run, cand.run_id) if cand.run_id is not None else None
        verified_sizes = {e.size for e in cand.evaluations if e.outcome == "correct"}
        verified_gpus = {e.device for e in cand.evaluations if e.outcome == "correct" and e.device != "cpu"}
        s.expunge_all()

    notes: list[str] = []
    full = _load_reference(run, cand, "full")
    small = _load_reference(run, cand, "small")
    evaluated = full if ev.size == "full" else small
    if cand.problem_hash and cand.problem_hash not in (full.source_hash, small.source_hash):
        notes.append(f"the problem file {full.path} changed since candidate {cand.id} was evaluated; "
                     "the exported test checks it against the file as it is now")

    body = split_candidate(cand.source)
    clash = body.bound_names & set(ADDED_NAMES)
    if aot:
        from kgen.outputs.aot import NAME_PREFIX, PAYLOAD_NAME, SHA_NAME

        clash |= {n for n in body.bound_names if n.startswith(NAME_PREFIX) or n in (PAYLOAD_NAME, SHA_NAME)}
    if clash:
        raise KgenError(f"candidate {cand.id} defines {', '.join(sorted(clash))}, which the exported module "
                        "needs for its entry point")
    if "ModelNew" not in body.bound_names:
        raise KgenError(f"candidate {cand.id} defines no ModelNew")
    language = ev.language or cand.language
    function = _function_name(full.name, body)
    if function != full.name:
        notes.append(f"the candidate already uses the name '{full.name}'; the entry point is '{function}'")
    param_specs = _parameter_specs(full)
    input_names = _input_names(full, len(full.input_specs()))
    arg_names = _argument_names([n for n, _, _ in param_specs], set(input_names))
    rtol = ev.rtol if ev.rtol is not None else DEFAULT_RTOL
    atol = ev.atol if ev.atol is not None else DEFAULT_ATOL
    if aot:  # the module's own text is re-verified below, once it is written, on the GPU the judge will use
        from kgen.judge.evaluate import _device_name

        export_check, reverified_on = AOT_PENDING, _device_name("cuda")
    else:
        export_check, reverified_on = _export_check(cand, full, ev.rtol, verify, sandbox)
    if export_check == NO_GPU:
        notes.append(f"{NO_GPU} (kgen verified it on {ev.device}); the module's docstring says so")
    sizes = verified_sizes | ({"full"} if reverified_on else set())
    verified_gpus = sorted(verified_gpus | ({reverified_on} if reverified_on else set()))
    verified_shapes = [[tuple(x.shape) for x in problem.input_specs() if hasattr(x, "shape")]
                       for problem in (small, full) if problem.size in sizes]

    shape_doc = ", ".join(f"{n} {s}" for n, s in zip(input_names, full.input_specs()))
    params_doc = ", ".join(f"{a} {'x'.join(map(str, shape))} {dtype}" for a, (_, shape, dtype)
                           in zip(arg_names, param_specs))
    verified_doc = ", ".join(f"{n} {s}" for n, s in zip(input_names, evaluated.input_specs()))
    exported_at = dt.datetime.now(dt.timezone.utc)

    def docstring(check: str, aot_line: Optional[str]) -> str:
        return _provenance(cand, ev, run, evaluated, function, out_path.stem, rtol, atol, body, language,
                           ", ".join(input_names + arg_names), shape_doc, verified_doc, params_doc, check, exported_at,
                           aot_line)

    def code(sha256: Optional[str] = None) -> str:
        from kgen.outputs import aot as aot_part

        text = "\n".join(body.future_imports) + "\n" if body.future_imports else ""
        if aot:
            text += "\n" + aot_part.shim_source(sha256)
        text += "\n" + body.code
        return text + _entry_point(full, function, input_names, arg_names, param_specs, language, verified_shapes,
                                   verified_gpus, full.sized_source)

    text = docstring(export_check, AOT_LINE_PENDING if aot else None) + code()
    payload = None
    if aot:
        # the judge compiles and verifies exactly this text; the written file differs from it only in lines
        # that move no kernel: the docstring's two lines of results, the payload's checksum, the payload after
        # everything (Triton's cache key holds each kernel's source and its first line number)
        result = reverify(full, text, ev.rtol, sandbox)
        export_check = _judged(cand, result, " (as the exported module)")
        payload = _aot_payload(result, language)
        verified = text
        text = docstring(export_check, payload.summary) + code(payload.sha256)
        _same_lines_but_results(verified, text)
        text += payload.text
    try:
        compile(text, str(out_path), "exec")
    except SyntaxError as e:
        raise KgenError(f"the exported module does not compile (line {e.lineno}: {e.msg}); "
                        "this is a kgen bug, please report it") from e
    out_path.write_text(text)

    test_path = None
    if with_test:
        test_path = out_path.with_name(f"test_{out_path.stem}.py")
        test_path.write_text(TEST_TEMPLATE.format(
            module=out_path.stem, test_file=test_path.name, problem=full.name,
            problem_ident=re.sub(r"\W", "_", full.name), function=function,
            rtol=rtol, atol=atol, full=full.sized_source, small=small.sized_source))
    return Exported(module_path=out_path, test_path=test_path, candidate_id=cand.id, function=function,
                    language=language, device=ev.device, speedup_eager=ev.speedup_eager, notes=notes,
                    reverified_on=reverified_on, aot=payload.summary if payload is not None else None)
