"""The prompt states what the judge does, and each statement is checked against the judge's code
(issue 32): versions, how weights reach ModelNew, which inputs run, what a call may keep, the torch
calls that are free or forbidden, and what Triton's interpreter does (by running it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from kgen.core.records import EvalSettings
from kgen.harness.runner import copy_weights
from kgen.harness.trace import NON_COMPUTE_OPS
from kgen.judge.audit import TORCH_WORK_LIMIT
from kgen.judge.evaluate import _versions
from kgen.judge.static_checks import FORBIDDEN_NAMES, check_source
from kgen.problems.problem import load_problem
from kgen.proposers.prompt_facts import INTERPRETER_FACTS, free_torch_ops
from kgen.proposers.prompts import PromptRenderer, prompt_context
from kgen.store.history import History

from conftest import REPO

GEMM = REPO / "benchmarks/real_model/problems/12_Gemm_Multiply_LeakyReLU.py"


@pytest.fixture(scope="module")
def gemm():
    return load_problem(str(GEMM), "small")


@pytest.fixture(scope="module")
def system_prompt(gemm):
    return PromptRenderer().render("system.j2", prompt_context(gemm, History(), "triton"))


def test_the_prompt_states_the_versions_every_evaluation_records(system_prompt):
    v = _versions()
    assert f"torch {v['torch_version']}, Triton {v['triton_version']}" in system_prompt
    if v["cuda_version"] is None:
        assert "CUDA none (a CPU build of torch)" in system_prompt


def test_the_prompt_lists_the_reference_state_dict_that_is_copied(system_prompt, gemm):
    model = gemm.make_model(0)
    listed = ", ".join(f"{name} ({'×'.join(map(str, t.shape))} float32)" for name, t in model.state_dict().items())
    assert f"The reference's state dict here: {listed}." in system_prompt
    assert "gemm.weight (256×128 float32)" in listed


class _Gemm(torch.nn.Module):
    def __init__(self, names=("gemm",)):
        super().__init__()
        for name in names:
            setattr(self, name, torch.nn.Linear(128, 256))


def test_weights_are_copied_as_the_prompt_says(gemm, system_prompt):
    reference = gemm.make_model(3).state_dict()
    # same names, same order: by name
    same = _Gemm()
    assert copy_weights(same, reference) == "copied by name"
    assert torch.equal(same.gemm.weight, reference["gemm.weight"])
    # other names, same shapes in the same order: by position
    renamed = _Gemm(("linear",))
    assert copy_weights(renamed, reference) == "copied by position"
    assert torch.equal(renamed.linear.weight, reference["gemm.weight"])
    # a derived tensor made in __init__ keeps the candidate's own values: the prompt says to derive in forward
    transposed = same.gemm.weight.detach().t().clone()
    fresh = _Gemm()
    before = fresh.gemm.weight.detach().t().clone()
    copy_weights(fresh, reference)
    assert not torch.equal(before, fresh.gemm.weight.t()) and torch.equal(transposed, fresh.gemm.weight.t())
    assert "by name when your state dict has the same names in the same order and shapes" in system_prompt
    assert "else by position when it has as many tensors with the same shapes in the same order" in system_prompt
    assert "a tensor you derive from them in `__init__`" in system_prompt


def test_the_prompt_says_what_the_judge_randomizes_parameters_yes_buffers_no(system_prompt, tmp_path):
    """A model that read "parameters and buffers, randomized" wrote a kernel that read a causal mask buffer as if it
    could be anything: the judge perturbs constant parameters (LayerNorm's ones and zeros) and leaves buffers as the
    reference builds them, and the prompt says exactly that."""
    from kgen.problems.problem import load_problem

    path = tmp_path / "masked.py"
    path.write_text(textwrap.dedent("""
        import torch, torch.nn as nn
        class Model(nn.Module):
            def __init__(self, n):
                super().__init__()
                self.norm = nn.LayerNorm(n)
                self.register_buffer("mask", torch.tril(torch.ones(n, n)))
            def forward(self, x):
                return self.norm(x).masked_fill(self.mask == 0, 0.0)
        n = 8
        def get_inputs():
            return [torch.randn(n, n)]
        def get_init_inputs():
            return [n]
    """))
    model = load_problem(str(path), "full").make_model(5)
    assert torch.equal(model.mask, torch.tril(torch.ones(8, 8)))  # the buffer as built
    assert not torch.equal(model.norm.weight, torch.ones(8)) and not torch.equal(model.norm.bias, torch.zeros(8))
    from kgen.problems.problem import CONSTANT_PARAM_NOISE

    # the perturbation the prompt states is the judge's own constant, and the weights' scale is the module's init
    assert (f"LayerNorm's ones and zeros, perturbed by {CONSTANT_PARAM_NOISE}·N(0, 1)·(mean |p| + 1), so no parameter "
            "is all ones or zeros") in system_prompt
    assert "`nn.Linear`'s and `nn.Conv2d`'s uniform ±1/√fan_in" in system_prompt
    assert "buffers exactly as the reference's `__init__` builds them, so a causal mask stays a causal mask" in \
        system_prompt


def test_an_unused_linear_in_init_trips_no_static_check(system_prompt):
    source = textwrap.dedent('''
        import torch, torch.nn as nn, triton, triton.language as tl

        @triton.jit
        def k(x_ptr):
            pass

        class ModelNew(nn.Module):
            def __init__(self, in_features, out_features, multiplier, negative_slope):
                super().__init__()
                self.gemm = nn.Linear(in_features, out_features)

            def forward(self, x):
                k[(1,)](x)
                return x
        ''')
    assert check_source(source).rejection is None
    assert "a module kept in `__init__` and never called trips no check" in system_prompt


def test_the_prompt_states_the_inputs_trials_and_state_rule(system_prompt, gemm):
    assert f"exactly what `get_inputs()` makes at the size shown, {gemm.input_specs()[0]}" in system_prompt
    assert "No other shapes (no 1-D or 3-D variants) are ever run" in system_prompt
    trials = max(EvalSettings().trials, 5)
    assert f"Trials: {trials} calls on fresh random inputs" in system_prompt
    assert "that repeat must give bit-identical outputs" in system_prompt
    assert "a call counter, cached outputs" in system_prompt
    assert "Every input size the reference accepts".lower() not in system_prompt.lower()


def test_the_prompt_lists_the_judges_own_forbidden_and_free_calls(system_prompt):
    for name in FORBIDDEN_NAMES:
        assert f"`{name}`" in system_prompt
    assert f"less than {round(100 * TORCH_WORK_LIMIT)}% of the reference's work" in system_prompt
    free = free_torch_ops()
    assert set(free) <= NON_COMPUTE_OPS and {"empty", "zeros", "view", "reshape", "contiguous"} <= set(free)
    assert ", ".join(free) in system_prompt


def test_without_a_gpu_the_prompt_states_the_interpreter_facts(system_prompt):
    if torch.cuda.is_available():
        pytest.skip("the interpreter's facts are shown on runs without a GPU")
    for fact in INTERPRETER_FACTS:
        assert fact.text in system_prompt
    assert 'tensors live on the CPU (device "cpu", no CUDA)' in system_prompt


def test_on_a_gpu_the_prompt_states_the_device_properties(gemm):
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    from kgen.judge.evaluator_facts import this_machine

    text = PromptRenderer().render("system.j2", prompt_context(gemm, History(evaluator=this_machine()), "triton"))
    p = torch.cuda.get_device_properties(0)
    assert f"compute capability {p.major}.{p.minor}, {p.multi_processor_count} SMs" in text


# Each probe runs one feature in Triton's interpreter and prints whether it worked.
PROBES = '''
import json, os
import torch, triton, triton.language as tl

def attempt(fn):
    try:
        fn()
        return True
    except Exception:
        return False

@triton.jit
def atomics(x_ptr, i_ptr):
    o = tl.arange(0, 4)
    tl.atomic_add(x_ptr + o, tl.full((4,), 1.0, tl.float32))
    tl.atomic_max(x_ptr + o, tl.full((4,), 5.0, tl.float32))
    tl.atomic_cas(i_ptr, 0, 7)

@triton.jit
def xchg_f32(x_ptr):
    tl.atomic_xchg(x_ptr, 3.0)

@triton.jit
def cache_hints(x_ptr, y_ptr):
    o = tl.arange(0, 4)
    v = tl.load(x_ptr + o, cache_modifier=".cg", eviction_policy="evict_last")
    tl.store(y_ptr + o, v, cache_modifier=".cs", eviction_policy="evict_first")

@triton.jit
def barrier(x_ptr):
    o = tl.arange(0, 4)
    tl.store(x_ptr + o, o.to(tl.float32))
    tl.debug_barrier()

@triton.autotune(configs=[triton.Config({"B": 4}), triton.Config({"B": 8})], key=["n"])
@triton.jit
def tuned(x_ptr, n, B: tl.constexpr):
    o = tl.arange(0, B)
    tl.store(x_ptr + o, 1.0, mask=o < n)

@triton.jit
def scalar_mask(x_ptr):
    o = tl.arange(0, 4)
    tl.store(x_ptr + o, 1.0, mask=(o < 4) & (tl.program_id(0) == 0))

@triton.jit
def dot(a_ptr, c_ptr, P: tl.constexpr):
    o = tl.arange(0, 16)
    a = tl.load(a_ptr + o[:, None] * 16 + o[None, :])
    tl.store(c_ptr + o[:, None] * 16 + o[None, :], tl.dot(a, a, input_precision=P))

@triton.jit
def libdevice_tanh(x_ptr):
    o = tl.arange(0, 4)
    tl.store(x_ptr + o, tl.extra.cuda.libdevice.tanh(tl.load(x_ptr + o)))

@triton.jit
def block_ptr(x_ptr):
    p = tl.make_block_ptr(x_ptr, (4, 4), (4, 1), (0, 0), (4, 4), (1, 0))
    tl.store(p, tl.load(p) * 2)

@triton.jit
def descriptor(x_ptr):
    d = tl.make_tensor_descriptor(x_ptr, [16, 16], [16, 1], [16, 16])
    d.store([0, 0], d.load([0, 0]) * 2)

@triton.jit
def arange_10(x_ptr):
    tl.store(x_ptr + tl.arange(0, 10), 1.0)

def dot_error(p):
    a = torch.randn(16, 16)
    c = torch.zeros(16, 16)
    dot[(1,)](a, c, P=p)
    return float((c.double() - a.double() @ a.double()).abs().max())

x, i = torch.zeros(4), torch.zeros(1, dtype=torch.int32)
found = {
    "atomics": attempt(lambda: atomics[(1,)](x, i)) and x.tolist() == [5.0] * 4 and i.item() == 7,
    "xchg_f32": attempt(lambda: xchg_f32[(1,)](torch.zeros(1))),
    "cache_hints": attempt(lambda: cache_hints[(1,)](torch.ones(4), torch.zeros(4))),
    "debug_barrier": attempt(lambda: barrier[(1,)](torch.zeros(4))),
    "autotune": attempt(lambda: tuned[(1,)](torch.zeros(8), 4)),
    "scalar_mask": attempt(lambda: scalar_mask[(1,)](torch.zeros(4))),
    "dot_precision": max(dot_error(p) for p in ("ieee", "tf32", "tf32x3")) < 1e-4,
    "libdevice": attempt(lambda: libdevice_tanh[(1,)](torch.zeros(4))),
    "block_ptr": attempt(lambda: block_ptr[(1,)](torch.zeros(16))),
    "descriptor": attempt(lambda: descriptor[(1,)](torch.ones(256))),
    "arange_10": attempt(lambda: arange_10[(1,)](torch.zeros(16))),
}
print(json.dumps(found))
'''


@pytest.fixture(scope="module")
def interpreter_found(tmp_path_factory):
    script = tmp_path_factory.mktemp("probes") / "probes.py"
    script.write_text(PROBES)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TRITON_INTERPRET="1"))
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_interpreter_facts_hold_for_the_installed_triton(interpreter_found):
    """Each fact's `works` is what running it finds (tf32 is not emulated: every precision is fp32-exact)."""
    for fact in INTERPRETER_FACTS:
        assert interpreter_found[fact.probe] == fact.works, fact.feature
    assert not interpreter_found["xchg_f32"]  # the exception the atomics fact names
    assert interpreter_found["descriptor"]  # what the block-pointer fact recommends instead
    assert not interpreter_found["arange_10"]  # TRITON_FACTS: tl.arange needs a power of 2


def test_the_prompt_states_the_mode_the_judge_calls_the_modules_in(tmp_path):
    """KernelBench's mode: the module as built (training: BatchNorm on the batch's statistics), dropout off.
    The prompt says so; a BatchNorm kernel on the batch's statistics that skips the dropout is correct through
    `kgen eval`, the same kernel on the running statistics (an eval-mode call) is not."""
    problem_file = REPO / "tests/candidates/batchnorm_problem.py"
    problem = load_problem(str(problem_file), "small")
    text = " ".join(PromptRenderer().render("system.j2", prompt_context(problem, History(), "triton")).split())
    assert ("- Mode: `Model` is called in the mode its `__init__` leaves it in (training mode here: nn.Module's "
            "default, as KernelBench calls its modules) and `ModelNew` in the same (`.train(True)`), under "
            "`torch.no_grad()`, with every dropout layer switched off") in text
    assert "BatchNorm normalizes with this batch's statistics" in text
    model = problem.make_model(0)
    assert model.training and not model.dropout.training
    batch_stats = REPO / "tests/candidates/batchnorm_kernel.py"
    running_stats = tmp_path / "batchnorm_running_stats.py"
    running_stats.write_text(batch_stats.read_text().replace("MODE_TRAINING = True", "MODE_TRAINING = False"))
    env = dict(os.environ, KGEN_CACHE_DIR=str(tmp_path / "cache"))
    outcomes = {}
    for name, candidate in (("batch", batch_stats), ("running", running_stats)):
        done = subprocess.run([sys.executable, "-m", "kgen", "eval", str(problem_file), str(candidate), "--device",
                               "cpu", "--size", "small", "--json"], capture_output=True, text=True, cwd=tmp_path,
                              env=env, timeout=600)
        assert done.returncode == 0, done.stderr
        outcomes[name] = json.loads(done.stdout)
    assert outcomes["batch"]["outcome"] == "correct", outcomes["batch"]["message"]
    assert outcomes["running"]["outcome"] == "incorrect", outcomes["running"]["message"]


def test_the_prompt_states_the_timed_runs_launch_shadow():
    """On a GPU run the prompt says host work under the runner's GPU-side wait is not timed, from its constant."""
    from kgen.harness.runner import LAUNCH_SHADOW_CYCLES

    from evaluators import H100

    problem = load_problem("softmax", "small")
    text = PromptRenderer().render("system.j2", prompt_context(problem, History(evaluator=H100), "triton"))
    ms = round(LAUNCH_SHADOW_CYCLES / 2e9 * 1e3, 1)
    assert f"Each timed call is enqueued behind a GPU-side wait of about {ms} ms" in text
