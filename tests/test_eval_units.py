"""The evaluation's parts on their own: the tolerance rule, static checks, the work measure, the
judge's reading of what a runner describes, spare sandboxes, the CUDA build cache, the speed/roofline
bookkeeping and the CLI's exit codes."""

import contextlib
import os
import sys
import time
from pathlib import Path

import pytest
import torch

from kgen.core.records import EvalResult, EvalSettings
from kgen.harness.cuda_build import build_key, build_lock, clear_stale_torch_lock, trim_compiler_output
from kgen.harness.trace import OpTrace, compute_family
from kgen.judge import verify
from kgen.judge.static_checks import check_source, detect_language

from conftest import run_kgen

CANDIDATES = Path(__file__).resolve().parent / "candidates"


def _softmax64(rows=8, cols=65536, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, cols, generator=g, dtype=torch.float64), dim=1)


def test_all_zeros_softmax_over_65536_columns_fails_even_at_a_loose_rtol():
    ref = _softmax64()
    for rtol in (1e-5, 1e-2):
        c = verify.compare(torch.zeros(ref.shape), ref, torch.float32, rtol)
        assert not c.ok


def test_fp32_rounding_passes_and_fp16_rounding_fails_the_default_rtol():
    ref = _softmax64()
    assert verify.compare(ref.float(), ref, torch.float32, 1e-5).ok
    c = verify.compare(ref.half().float(), ref, torch.float32, 1e-5)
    assert not c.ok and "output[" in c.message
    assert verify.compare(ref.half().float(), ref, torch.float32, 1e-2).ok


def test_nan_where_the_reference_is_finite_fails():
    ref = _softmax64(2, 100)
    out = ref.float().clone()
    out[1, 7] = float("nan")
    c = verify.compare(out, ref, torch.float32, 1e-5)
    assert not c.ok and "[1, 7]" in c.message and "NaN" in c.message


def test_subclass_shape_and_dtype_are_exact():
    ref = _softmax64(2, 100)

    class Sub(torch.Tensor):
        pass

    assert "plain torch.Tensor" in verify.compare(ref.float().as_subclass(Sub), ref, torch.float32, 1e-5).message
    assert "shape" in verify.compare(ref.float().t(), ref, torch.float32, 1e-5).message
    assert "dtype" in verify.compare(ref.double(), ref, torch.float32, 1e-5).message


def test_the_poison_byte_is_nan_in_every_float_dtype():
    from kgen.harness.runner import POISON_BYTE, poison_allocator

    poison_allocator(torch.device("cpu"), [4096])
    assert POISON_BYTE == verify.POISON_BYTE
    t = torch.empty(1024, dtype=torch.uint8).fill_(verify.POISON_BYTE)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        assert torch.isnan(t.view(dtype)).all()


def test_same_tensors_sees_any_change():
    a = [torch.randn(4, 4)]
    b = [a[0].clone()]
    assert verify.same_tensors(a, b)
    # the smallest change there is: one ulp (a fixed += 1e-7 vanishes on an element above ~0.8 in fp32)
    b[0][2, 2] = torch.nextafter(b[0][2, 2], torch.tensor(float("inf")))
    assert not verify.same_tensors(a, b)


def test_same_tensors_and_fingerprints_work_chunk_by_chunk(monkeypatch):
    # big inputs (KernelBench's 8 GiB ones) are compared in chunks: a change or a moved NaN in any chunk counts
    x = torch.randn(10_007)
    whole = verify.fingerprint([x])
    monkeypatch.setattr(verify, "COMPARE_CHUNK_ELEMENTS", 1000)
    assert verify.fingerprint([x]) == pytest.approx(whole, rel=1e-12)
    x[3] = float("nan")
    y = x.clone()
    assert verify.same_tensors([x], [y])
    y[10_006] = torch.nextafter(y[10_006], torch.tensor(float("inf")))  # the last, short chunk
    assert not verify.same_tensors([x], [y])
    y = x.clone()
    y[3], y[5000] = 0.0, float("nan")
    assert not verify.same_tensors([x], [y])
    assert verify.same_tensors([torch.arange(5000)], [torch.arange(5000)])
    assert not verify.same_tensors([torch.arange(5000)], [torch.arange(5000).flip(0)])
    assert verify.kept_copy(x) is not x and verify.same_tensors([verify.kept_copy(x)], [x])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="page-locked host copies are of GPU tensors (needs a GPU)")
def test_large_host_copies_of_gpu_tensors_are_page_locked_and_exact(monkeypatch):
    """The judge's host-kept references and kept copies go through page-locked memory (fast both ways), with
    the same values; the cached blocks are released at the end of an evaluation."""
    monkeypatch.setattr(verify, "PINNED_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(verify, "HOST_COPY_BYTES", 1 << 20)
    x = torch.randn(1 << 19, dtype=torch.float64, device="cuda")  # 4 MiB
    for host in (verify._on_host(x), verify.kept_copy(x)):
        assert host.device.type == "cpu" and host.is_pinned() and torch.equal(host, x.cpu())
    small = torch.randn(100, device="cuda")
    assert not verify._on_host(small).is_pinned() and torch.equal(verify._on_host(small), small.cpu())
    verify.release_pinned()


H100_BYTES = 85_029_158_912  # an 80 GB H100 as torch.cuda.get_device_properties reports it (79.2 GiB)


@pytest.mark.parametrize("shape, fits", [
    ((112, 64, 512, 512), True),  # KernelBench level 1 36_RMSNorm_ at its size: 7.5 GB in, 7.5 GB out
    ((3, 1024, 1024, 1024), False),  # 12.9 GB in, 12.9 GB out: 51.5 GB in float64 alone, 105 GB in all
], ids=["36_RMSNorm_", "12.9GB-in-out"])
def test_the_judges_gpu_memory_plan_is_the_sum_of_what_it_holds_at_a_float64_forward(shape, fits):
    """Each part of the plan from the shapes (meta tensors: no memory): the arena (inputs + outputs), the trial's
    inputs beside it, float64 inputs and outputs, the candidate's outputs in its runner, three CUDA contexts."""
    x = torch.empty(shape, device="meta")
    plan = verify.gpu_memory_plan([x, 3], [], [torch.empty(shape, device="meta")], H100_BYTES)
    n = x.numel()
    assert (plan.arena_bytes, plan.inputs_bytes, plan.float64_bytes, plan.runner_bytes) == (8 * n, 4 * n, 16 * n, 4 * n)
    assert plan.need_bytes == 32 * n + 3 * verify.CUDA_CONTEXT_BYTES and plan.fits is fits
    if fits:  # 36_RMSNorm_: 62.0 GB of 85.0 GB
        assert round(plan.need_bytes / 1e9, 1) == 62.0
    assert "float64 inputs, weights and outputs" in plan.described()


def test_static_checks():
    assert detect_language((CANDIDATES / "good_triton_softmax.py").read_text()) == "triton"
    assert detect_language((CANDIDATES / "cuda_light_softmax.py").read_text()) == "cuda"
    assert check_source((CANDIDATES / "good_triton_softmax.py").read_text()).rejection is None
    assert "syntax error" in check_source("def f(:\n").rejection
    assert "ModelNew" in check_source("import torch\n").rejection
    plain = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    assert "no kernel" in check_source(plain).rejection
    with_compile = plain.replace("return x", "return torch.compile(lambda t: t)(x)")
    assert "torch.compile" in check_source(with_compile).rejection
    aliased = "from torch import cuda as c\n" + plain.replace("return x", "s = c.Stream()\n        return x")
    assert "stream" in check_source(aliased).rejection
    cuda_stream = 'SRC = "cudaStreamCreate(&s);"\n' + plain
    assert "stream" in check_source(cuda_stream).rejection


def test_work_is_measured_so_a_decomposition_counts_like_the_operator_it_replaces():
    assert compute_family("empty_like") is None and compute_family("view") is None
    assert compute_family("bmm") == compute_family("mm") == "matmul"
    x = torch.randn(64, 1000)
    reference, decomposed, token = OpTrace(), OpTrace(), OpTrace()
    with reference:
        getattr(torch, "soft" + "max")(x, dim=1)
    with decomposed:  # amax, sub, exp, sum, div: no operator named softmax, all of its work
        e = (x - x.amax(dim=1, keepdim=True)).exp()
        e / e.sum(dim=1, keepdim=True)
    with token:  # a scale computed by torch beside the real work: a small share
        x.amax(dim=1)
    assert reference.compute_ops() == ["_softmax"] and reference.total_work() == x.numel()
    assert decomposed.total_work() >= reference.total_work()
    assert token.total_work() < 0.01 * reference.total_work()
    a, b = torch.randn(32, 48), torch.randn(48, 16)
    matmul = OpTrace()
    with matmul:
        a @ b
    assert matmul.total_work() == 2 * 32 * 48 * 16  # FLOPs where torch has a formula


def test_the_judge_reads_a_runner_description_strictly():
    from kgen.judge.judge import _description_problem

    good = {"type": "torch.Tensor", "plain": True, "shape": [2, 3], "dtype": "float32", "device": "cpu",
            "layout": "torch.strided"}
    assert _description_problem(good, (2, 3), torch.float32, "cpu", "output") is None
    assert "not a plain" in _description_problem(dict(good, plain=False, type="x.Lazy"), (2, 3), torch.float32,
                                                 "cpu", "output")
    assert "shape" in _description_problem(dict(good, shape=[3, 2]), (2, 3), torch.float32, "cpu", "output")
    assert "dtype" in _description_problem(dict(good, dtype="float64"), (2, 3), torch.float32, "cpu", "output")
    assert "is on" in _description_problem(dict(good, device="cuda:0"), (2, 3), torch.float32, "cpu", "output")
    assert "not a torch.Tensor" in _description_problem({"type": "builtins.list"}, (2, 3), torch.float32, "cpu",
                                                        "output")
    assert "no description" in _description_problem("garbage", (2, 3), torch.float32, "cpu", "output")


def test_spares_give_every_candidate_a_process_no_candidate_has_used():
    from kgen.judge.sandbox import SandboxMode
    from kgen.judge.spares import SpareRunners

    spares = SpareRunners(SandboxMode.BWRAP, depth=1)
    try:
        first = spares.take("cpu")
        (waiting,) = spares.spares[("cpu", "run")]
        assert waiting.process.alive() and waiting.process.proc.pid != first.process.proc.pid
        second = spares.take("cpu")
        assert second is waiting  # the spare, started while the first was in use
        (fresh,) = spares.spares[("cpu", "run")]
        assert fresh.process.proc.pid not in (first.process.proc.pid, second.process.proc.pid)
        fresh.process.kill()  # a spare that died while waiting is replaced, not handed out
        third = spares.take("cpu")
        assert third is not fresh and third.process.alive()
        for slot in (first, second, third):
            slot.close()
            assert not slot.process.alive()
    finally:
        spares.close()


def test_spares_are_stopped_while_a_candidate_is_timed_and_go_on_after():
    """Every process of a waiting spare's sandbox is stopped (state T) inside `timing_here()`, and runs again after."""
    import time

    from kgen.judge.sandbox import SandboxMode
    from kgen.judge.spares import SpareRunners

    def states(pgid: int) -> set[str]:
        found = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:  # field 5 of stat: the process group
                found.add(fields[0])
        return found

    spares = SpareRunners(SandboxMode.BWRAP, depth=1)
    try:
        taken = spares.take("cpu")
        (waiting,) = spares.spares[("cpu", "run")]
        pgid = waiting.process.proc.pid
        with spares.timing_here():
            time.sleep(0.2)
            assert states(pgid) == {"T"}
        time.sleep(0.2)
        assert states(pgid) and "T" not in states(pgid)
        taken.close()
    finally:
        spares.close()


def test_build_key_depends_on_everything_a_build_does():
    spec = {"cuda_sources": ["__global__ void k() {}"], "extra_cuda_cflags": ["-O3"]}
    base = build_key(spec, "9.0")
    assert base == build_key(dict(spec), "9.0")
    assert base != build_key(dict(spec, extra_cuda_cflags=["-O2"]), "9.0")
    assert base != build_key(dict(spec, cuda_sources=["__global__ void k2() {}"]), "9.0")
    assert base != build_key(spec, "8.0")


def test_stale_torch_lock_is_cleared_and_a_fresh_one_kept(tmp_path):
    lock = tmp_path / "lock"
    lock.write_text("")
    assert not clear_stale_torch_lock(tmp_path)  # just made: may be a live build outside kgen
    old = time.time() - 3600
    os.utime(lock, (old, old))
    with build_lock(tmp_path):
        assert not lock.exists()


def test_compiler_output_is_trimmed_to_errors():
    noise = "\n".join(f"/tmp/build/x/main.cpp:{i}: note: something" for i in range(500))
    text = noise + "\n/tmp/build/x/cuda.cu(12): error: identifier \"foo\" is undefined\n  foo + 1;\n" + noise
    trimmed = trim_compiler_output(text)
    assert 'cuda.cu(12): error: identifier "foo"' in trimmed and "/tmp/build" not in trimmed
    assert len(trimmed.splitlines()) <= 10


def test_faster_than_writing_the_outputs_is_suspicious_under_the_roofline_only_less_work():
    from kgen.judge.evaluate import _fill_speed
    from kgen.problems.problem import load_problem

    problem = load_problem("softmax", "small")
    settings = EvalSettings(device="cuda", baseline_eager_ms=2.0, baseline_compile_ms=1.0, floor_ms=0.5,
                            impossible_ms=0.1)
    ok = EvalResult(outcome="correct", runtime_ms=1.0)
    _fill_speed(ok, problem, settings)
    assert ok.outcome == "correct" and ok.speedup_eager == 2.0 and ok.speedup_compile == 1.0
    assert ok.roofline_pct == 50.0 and "less_work_than_reference" not in ok.details and not ok.message
    # under the reference's roofline, above the time the outputs take to write: real, an algebraic shortcut
    shortcut = EvalResult(outcome="correct", runtime_ms=0.25)
    _fill_speed(shortcut, problem, settings)
    assert shortcut.outcome == "correct" and shortcut.roofline_pct == 200.0 and shortcut.speedup_eager == 8.0
    assert shortcut.details["less_work_than_reference"] and "less work than the reference" in shortcut.message
    fast = EvalResult(outcome="correct", runtime_ms=0.05)
    _fill_speed(fast, problem, settings)
    assert fast.outcome == "suspicious" and "writing the outputs once" in fast.message


def test_the_impossible_floor_is_the_outputs_written_once(tmp_path):
    """KernelBench level 1 12_'s shape: diag(A) @ B is 2·N²·M FLOPs as the reference computes it, but a row
    scaling needs only N·M multiplies; the floor a time must not beat counts the output's bytes alone."""
    from kgen.problems.problem import load_problem
    from kgen.problems.roofline import Ceilings, compute_roofline

    path = tmp_path / "diag_matmul.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                    "    def forward(self, A, B):\n        return torch.diag(A) @ B\n\n\nN, M = 64, 48\n\n\n"
                    "def get_inputs():\n    return [torch.randn(N), torch.randn(N, M)]\n\n\n"
                    "def get_init_inputs():\n    return []\n")
    roof = compute_roofline(load_problem(str(path), "full"))
    assert roof.output_bytes == 64 * 48 * 4 and roof.flops >= 2 * 64 * 64 * 48
    ceilings = Ceilings(device="x", bandwidth_bytes_per_s=1e9, fp32_flops_per_s=1e9, torch_version="t",
                        measured_at=0.0)
    assert roof.impossible_ms(ceilings) == 1e3 * 64 * 48 * 4 / 1e9
    assert roof.floor_ms(ceilings) > 10 * roof.impossible_ms(ceilings)


def test_cli_exit_codes_for_bad_input(tmp_path):
    good = str(CANDIDATES / "good_triton_softmax.py")
    assert run_kgen("eval", "softmax", str(tmp_path / "missing.py"), "--device", "cpu").returncode == 2
    assert run_kgen("eval", "no_such_problem", good, "--device", "cpu").returncode == 2
    assert run_kgen("eval", "softmax", good, "--device", "tpu").returncode == 2


def test_cli_human_summary(tmp_path):
    from kgen.core.records import CPU_CORRECT

    done = run_kgen("eval", "softmax", str(CANDIDATES / "good_triton_softmax.py"), "--device", "cpu",
                    env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    # a CPU verdict says what it did not audit; the language is known
    assert done.stdout.splitlines()[0] == f"{CPU_CORRECT} softmax (small) on cpu: triton"
    assert "untimed" in done.stdout
    # never silent while the judge works: a line per step on stderr, in the order they happen
    steps = [line for line in done.stderr.splitlines() if line.startswith("kgen:   ")]
    assert steps[0].startswith("kgen:   the reference's outputs (float64) and the inputs: ")
    assert steps[-1].startswith("kgen:   its outputs checked on every trial: ") and steps[-1].endswith(" s")
    assert "kgen: judging the candidate against softmax (small) on cpu, a line per step:" in done.stderr


def test_detect_language_via_public_api():
    from kgen.judge.evaluate import detect_language as public

    assert public("x = 1\n") == "unknown"


@pytest.mark.skipif(sys.platform != "linux", reason="process groups and /proc")
def test_prebuild_rejects_statically_and_passes_triton_on():
    from kgen.judge.evaluate import prebuild

    settings = EvalSettings(device="cpu", size="small")
    assert prebuild("softmax", "def f(:\n", settings).outcome == "static_reject"
    assert prebuild("softmax", (CANDIDATES / "good_triton_softmax.py").read_text(), settings) is None
    result = prebuild("softmax", (CANDIDATES / "cuda_compile_error.py").read_text(), settings)
    assert result is not None and result.outcome == "compile_error" and "undefined_variable" in result.message



@pytest.mark.skipif(sys.platform != "linux", reason="process groups and /proc")
def test_the_cpu_compile_stage_finishes_a_build_past_the_candidates_time_limit(monkeypatch, tmp_path):
    """The H100 collection's builds slowed past its 120 s limit under 15 builds at once; the compile stage gave
    them up and the GPU's compile step built them again, 100 s each with its GPU idle. The stage has a limit of
    its own (COMPILE_STAGE_S): a build slower than the candidate's limit is finished here."""
    from kgen.judge.evaluate import prebuild

    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path))  # a cold build cache: this build is not done yet
    slow = "import time\ntime.sleep(4)  # a build slowed by a busy machine\n" + \
        (CANDIDATES / "cuda_light_softmax.py").read_text()
    info = {}
    assert prebuild("softmax", slow, EvalSettings(device="cpu", size="small", timeout_s=2.0), info) is None
    assert info["compile_s"] > 4.0 and [b["kind"] for b in info["builds"]] == ["load_inline"]

def test_kgen_parses_python_one_thread_at_a_time():
    # CPython 3.11's AST constructor is not safe across threads (gh-106905: "AST constructor recursion
    # depth mismatch", seen in CI when two candidates were checked at once), so kgen serializes parses.
    import threading

    from kgen.core import pyast

    done = threading.Event()
    with pyast._lock:  # another thread is parsing
        worker = threading.Thread(target=lambda: (pyast.parse("x = 1"), done.set()))
        worker.start()
        assert not done.wait(0.3)
    assert done.wait(10)
    worker.join()


@pytest.mark.parametrize("declaration, name", [
    ("__global__ void k(const float* x)", "k"),
    ("__global__ void __launch_bounds__(THREADS)\nsoftmax_two_pass_kernel(const float* x)", "softmax_two_pass_kernel"),
    ("__global__ __launch_bounds__(256, 2) void k(float* y)", "k"),
    ("template <int VEC> __global__ void k(float* y)", "k"),
    ('extern "C" __global__ void k(float* y)', "k"),
    ("static __global__ void\nk (float* y)", "k"),
    ("__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, 1)\nk(const float* x)", "k"),
    ("__global__ void __maxnreg__(64) k(float* y)", "k"),
    ("__global__ void __attribute__((noinline)) k(float* y)", "k"),
])
def test_the_gpu_audit_finds_a_cuda_kernels_name_wherever_its_launch_bounds_stand(declaration, name):
    """The GPU kernel audit counts a kernel as the candidate's own by these names: a `__launch_bounds__`
    after the return type once made its parenthesis the 'name', and correct CUDA candidates (the bundled
    softmax cuda_two_pass and cuda_cluster_single_pass starters) were rejected as running 100% other
    kernels on the H100."""
    from kgen.judge.audit import _cuda_kernel_names

    assert _cuda_kernel_names(f"// before\n{declaration} {{\n}}\n") == {name}


# -- kgen eval's fixed costs: static checks first, sandboxes started together, baselines handed the GPU ---------

def test_a_static_reject_starts_nothing_not_even_torch(tmp_path):
    """Rejected before anything touches a GPU: no torch imported, no DB opened for baselines, no sandbox,
    even with --device cuda on a machine that has none (the device is never looked at)."""
    db = tmp_path / "results.db"
    script = ("import json, sys\nfrom kgen.cli.evaluate import evaluate_file\n"
              f"problem, result = evaluate_file('softmax', {str(CANDIDATES / 'no_kernel.py')!r}, device='cuda', "
              f"db={str(db)!r})\n"
              "print(json.dumps([result.outcome, problem.name, 'torch' in sys.modules, result.details['breakdown']]))")
    import json
    import subprocess

    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    outcome, name, torch_imported, breakdown = json.loads(done.stdout)
    assert (outcome, name, torch_imported) == ("static_reject", "softmax", False)
    assert set(breakdown) == {"startup_s", "static_s"} and not db.exists()


def test_a_static_reject_on_the_cli_is_one_line_of_outcome_and_exit_0(tmp_path):
    started = time.monotonic()
    done = run_kgen("eval", "softmax", str(CANDIDATES / "no_kernel.py"), "--db", str(tmp_path / "r.db"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("static_reject softmax (static checks only: nothing ran)")
    assert time.monotonic() - started < 30  # ~1 s on an idle machine; the shared CI box is slower
    assert run_kgen("eval", "no_such_problem", str(CANDIDATES / "no_kernel.py")).returncode == 2


def test_evaluate_one_rejects_statically_before_the_baselines():
    from kgen.judge.evaluate import evaluate_one
    from kgen.problems.problem import load_problem

    result = evaluate_one(load_problem("softmax", "small"), (CANDIDATES / "no_kernel.py").read_text(),
                          EvalSettings(device="cuda", size="small"),
                          baselines=lambda *a, **k: pytest.fail("baselines timed for a reject"))
    assert result.outcome == "static_reject" and set(result.details["breakdown"]) == {"static_s"}


def test_eval_json_says_where_the_seconds_went(tmp_path):
    import json

    done = run_kgen("eval", "softmax", str(CANDIDATES / "good_triton_softmax.py"), "--device", "cpu", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    breakdown = result["details"]["breakdown"]
    assert result["outcome"] == "correct"
    assert {"startup_s", "static_s", "reference_s", "runner_start_s", "verify_s"} <= set(breakdown)
    assert all(isinstance(v, (int, float)) and v >= 0 for v in breakdown.values())
    outside_the_judge = {"startup_s", "load_s", "static_s", "baselines_s", "close_s", "warm_wait_s"}
    assert sum(v for k, v in breakdown.items() if k not in outside_the_judge) <= result["eval_s"] + 0.5
    # the runner's setup step by step (from its `sealed` message): within the runner's start, as the judge saw it
    setup = result["details"]["runner_setup"]
    assert {"bind", "arena", "gate", "kernels_copy", "install", "events", "profiler", "seal", "pins"} == set(setup)
    assert all(isinstance(v, float) and v >= 0 for v in setup.values())
    assert sum(setup.values()) <= breakdown["runner_start_s"]


def test_kgen_eval_starts_each_sandbox_once_and_the_judge_takes_the_prestarted_ones(monkeypatch):
    """The sandboxes one evaluation needs start before the judge runs, and the judge takes exactly those
    (a spare it cannot find under its own name for the device would be started again, and the first wasted)."""
    from kgen.judge import judge, spares
    from kgen.judge.evaluate import evaluate_one
    from kgen.problems.problem import load_problem

    started = []
    real = spares.start_process
    counted = lambda device, mode, kind="run", **kw: (started.append((device, kind)), real(device, mode, kind, **kw))[1]
    monkeypatch.setattr(spares, "start_process", counted)  # what the spares start
    monkeypatch.setattr(judge, "start_process", counted)  # what the judge would start without them
    result = evaluate_one(load_problem("softmax", "small"), (CANDIDATES / "good_triton_softmax.py").read_text(),
                          EvalSettings(device="cpu", size="small"))
    assert result.outcome == "correct", result.message
    assert started == [("cpu", "run")]  # on the CPU a Triton candidate takes one runner, and no spare is kept
    assert spares.spare_key("cpu") == "cpu" and spares.spare_key("cuda:1") == "cuda:1"


def test_kgen_eval_starts_its_sandboxes_before_torch_is_imported_and_the_judge_takes_them(monkeypatch):
    """`kgen eval` starts the sandboxes its evaluation takes before it imports torch (kgen.judge.spares imports
    none), in a thread whose processes outlive its start (bubblewrap's --die-with-parent kills a process whose
    starting thread ended), and the judge takes exactly those: nothing is started again."""
    import subprocess

    from kgen.judge import judge, spares
    from kgen.judge.evaluate import evaluate_one
    from kgen.problems.problem import load_problem

    imported = subprocess.run([sys.executable, "-c", "import sys, kgen.cli.evaluate, kgen.judge.spares; "
                               "print('torch' in sys.modules)"], capture_output=True, text=True, timeout=60)
    assert imported.stdout.strip() == "False", imported.stderr
    early = spares.start_early("triton", "cpu", "bwrap")
    early._settled()
    (waiting,) = early.spares[("cpu", "run")]
    time.sleep(0.5)  # the thread's starting is over: its process must still be there
    assert waiting.process.alive() and early._starter.is_alive()
    started = []
    monkeypatch.setattr(spares, "start_process", lambda *a, **k: started.append(a) or pytest.fail("started again"))
    monkeypatch.setattr(judge, "start_process", lambda *a, **k: started.append(a) or pytest.fail("started again"))
    result = evaluate_one(load_problem("softmax", "small"), (CANDIDATES / "good_triton_softmax.py").read_text(),
                          EvalSettings(device="cpu", size="small"), spares=early)
    assert result.outcome == "correct", result.message
    assert started == [] and not waiting.process.alive()  # taken, and closed with its evaluation
    assert early._starter is None  # closed by evaluate_one: its thread ended
    assert spares.start_early("triton", "cuda", "no-such-sandbox") is None


def test_a_triton_build_is_keyed_by_the_input_shapes():
    """Triton compiles one kernel per specialization, so builds for one size are not another's (on the H100,
    `--size small` after `--size full` of one source found the full build and the runner had to compile)."""
    from kgen.judge.builds import build_key

    source = "import triton\n"
    assert build_key(source, "9.0") == build_key(source, "9.0", "")  # CUDA sources: no shapes, shared with the CPU
    small = build_key(source, "9.0", "(64, 4096):torch.float32")
    full = build_key(source, "9.0", "(4096, 65536):torch.float32")
    assert small != full and small != build_key(source, "9.0")


def test_the_repeat_check_says_how_far_apart_two_calls_are():
    """A forward that gives other bits on the same inputs fails whatever the size of the difference; the message
    says how many elements differ and by how much against the output's rms, so the last-bit noise of a float
    atomicAdd reduction reads differently from stale data."""
    first = torch.randn(4096, dtype=torch.float32)
    noise = first.clone()
    noise[[7, 900]] = noise[[7, 900]] * (1 + 2 ** -22)
    said = verify.repeat_difference([first], [noise])
    assert said.startswith("2 of 4096 elements differ, by at most ")
    assert float(said.split("by at most ")[1].split(",")[0]) < 1e-5
    stale = torch.randn(4096, dtype=torch.float32)
    far = verify.repeat_difference([first], [stale])
    assert float(far.split(", ")[-1].split(" of the")[0]) > 0.5  # O(1) of the rms: not rounding
    nan = first.clone()
    nan[0] = float("nan")
    assert verify.repeat_difference([nan], [nan.clone()]).startswith("0 of 4096")  # NaN where NaN: no change


class _FakeWatch:
    """A stand-in for kgen.judge.timing.Stopwatch over a GPU runner (mocked: a timed run needs a GPU): each run
    takes `runner_ms` on its events and 0.2 ms more on the judge's clock, as the do-nothing runs do; in the first
    `disturbed` timings the judge's clock runs 2 ms long (a busy host), which its wall-clock check flags."""

    def __init__(self, runner_ms: float, disturbed: int = 0):
        import random

        self.rng, self.runner_ms, self.disturbed = random.Random(3), runner_ms, disturbed
        self.overhead_ms, self.last_gated, self.timings = 0.2, None, 1
        self.null_beside, self.null_first_beside = [], []

    def run(self, module, stage):
        ms = self.runner_ms * (1 + 0.01 * self.rng.random())
        return 1, [], ms + (2.2 if self.timings <= self.disturbed else 0.2), ms, {}

    def null_run(self):
        self.null_beside.append(0.2)

    def gate_report(self, median, runs):
        return None  # today's clock decides (the gate clock's own checks: tests/test_judge_gate_clock.py)

    def restart(self):
        self.null_beside, self.null_first_beside, self.timings = [], [], self.timings + 1


class _FakeJudge:
    """The judge's timing loop (kgen.judge.timing.TimedRuns) with the judge's own work stubbed: the references
    (none), the checks of timed outputs (counted, all pass), the time left (plenty)."""

    def __init__(self, race_ms=None):
        from kgen.judge.timing import TimedRuns

        self.checks = 0
        timed = type("Timed", (TimedRuns,), {})
        fake = timed.__new__(timed)
        fake.__dict__.update(settings=EvalSettings(device="cuda", race_ms=race_ms), device="cpu",
                             evidence=type("Evidence", (), {"details": {}})(), left_s=lambda: 100.0,
                             judge_work=contextlib.nullcontext, references=lambda inputs: ([], []),
                             check_outputs=self._check, inputs_unchanged=lambda inputs: True, errors=lambda: {})
        self.timed_runs = fake

    def _check(self, reply, trial, prefix=""):
        self.checks += 1
        return []


def test_a_clear_loser_stops_timing_after_the_race_runs_and_a_contender_does_not():
    """EvalSettings.race_ms (a search's best correct time, KGEN_RACE=1): a candidate whose every one of the first
    RACE_RUNS timed runs is RACE_MARGIN times slower stops there, with at least one of them checked; one within the
    margin, or without a bound, is timed in full (min_timed_runs and more)."""
    from kgen.judge.timing import RACE_MARGIN, RACE_RUNS

    lost = _FakeJudge(race_ms=0.3)
    stats = lost.timed_runs.timing(None, _FakeWatch(0.5))
    assert stats["runs"] == RACE_RUNS and stats["checked_runs"] >= 1 and lost.checks == stats["checked_runs"]
    assert stats["raced"] == {"best_ms": 0.3, "margin": RACE_MARGIN}
    for race_ms in (0.45, None):  # 0.5 ms is within 1.2x of 0.45: a contender
        kept = _FakeJudge(race_ms=race_ms).timed_runs.timing(None, _FakeWatch(0.5))
        assert kept["runs"] >= 100 and kept["raced"] is None


def test_a_timing_flagged_suspicious_is_redone_once_and_the_second_decides():
    """A judge's clock disturbed through one timing (a busy host) flags it; the timing is redone with fresh
    do-nothing runs, and its honest figure stands, the first verdict kept in the details. Disturbed through both,
    the second verdict is `suspicious` too. Undisturbed, one timing only."""
    from kgen.judge.verdict import Verdict

    judge = _FakeJudge()
    watch = _FakeWatch(0.5, disturbed=1)
    stats = judge.timed_runs.timed(None, watch)
    details = judge.timed_runs.evidence.details
    assert watch.timings == 2 and stats["runs"] >= 100 and 0.5 <= stats["median_ms"] <= 0.505
    assert "leaves" in details["timing_first"]["message"] and details["timing_first"]["timing"]["clock_gap_ms"] > 1.5
    assert details["timing"]["clock_gap_ms"] < 0.1
    judge, watch = _FakeJudge(), _FakeWatch(0.5, disturbed=2)
    with pytest.raises(Verdict) as raised:
        judge.timed_runs.timed(None, watch)
    assert raised.value.outcome == "suspicious" and watch.timings == 2
    assert "timing_first" in judge.timed_runs.evidence.details
    judge, watch = _FakeJudge(), _FakeWatch(0.5)
    judge.timed_runs.timed(None, watch)
    assert watch.timings == 1 and "timing_first" not in judge.timed_runs.evidence.details


def test_a_search_races_its_best_correct_time_only_when_asked(monkeypatch):
    """KGEN_RACE=1: each correct result on a GPU lowers the bound the next candidates race (their settings'
    race_ms); a slower or an incorrect one does not; without the knob, or on the CPU, nothing is raced."""
    from kgen.search.loop import Search

    def result(outcome, ms):
        return EvalResult(outcome=outcome, runtime_ms=ms)

    settings = EvalSettings(device="cuda")
    Search._race_against(settings, result("correct", 0.5))
    assert settings.race_ms is None
    monkeypatch.setenv("KGEN_RACE", "1")
    for outcome, ms in (("correct", 0.5), ("correct", 0.7), ("incorrect", 0.1), ("suspicious", 0.05), ("correct", 0.4)):
        Search._race_against(settings, result(outcome, ms))
    assert settings.race_ms == 0.4
    cpu = EvalSettings(device="cpu")
    Search._race_against(cpu, result("correct", 0.5))
    assert cpu.race_ms is None
