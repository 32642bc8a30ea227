"""The evaluation on a CUDA GPU: starters correct and timed, GPU-only cheats caught, baselines cached.
Skipped without a GPU (run them on the H100: `pytest -m gpu tests/test_eval_gpu.py`)."""

import json
from pathlib import Path

import pytest
import torch

from conftest import REPO, run_kgen

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CANDIDATES = Path(__file__).resolve().parent / "candidates"
STARTERS = sorted((REPO / "problems" / "starters").glob("*/*_*.py"))

# candidate -> the outcome it must get on the GPU (small softmax, so each is quick)
GPU_EXPECTED = {
    "good_triton_softmax": "correct",
    "cuda_light_softmax": "correct",
    "side_stream_plain": "static_reject",
    "side_stream_dodged": "static_reject",
    "cuda_illegal_address": "runtime_error",
    # it assigns torch.cuda.Event and synchronize (the runner's C-level ones would be unaffected); the static check
    # names it, and tests/attacks/c8_* spell it so only the runner's identity check (kgen.harness.pins) sees it
    "patches_timing": "static_reject",
    "empty_like_leftover": "incorrect",
    "modifies_input": "incorrect",
    "torch_softmax_token": "static_reject",
    "getattr_softmax": "static_reject",
    "caches_results": "incorrect",
    "low_precision": "incorrect",
    "tensor_subclass": "incorrect",
    "segfault": "runtime_error",
    "cuda_segfault_at_import": "runtime_error",
    "infinite_loop": "timeout",
    "forks_children": "correct",  # the sandbox refuses its forks; what it returns is honest
    # waits on the GPU between its kernels: its gated runs open by the shadow; honest, so not `suspicious` (flagged
    # from the gate's opening on the H100, thirteenth session; the check from the stream's pass must excuse it)
    "host_sync_inside_forward": "correct",
    "out_of_memory": "runtime_error",
    "triton_compile_error": "compile_error",
    "cuda_compile_error": "compile_error",
    "naive_overflow": "incorrect",
    "nondeterministic": "incorrect",
}


@pytest.fixture(scope="module")
def gpu_results():
    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate
    from kgen.judge.sandbox import SandboxMode
    from kgen.judge.spares import SpareRunners

    spares = SpareRunners(SandboxMode.BWRAP)  # started sandboxes kept ready, as a search's evaluator keeps them

    def evaluate(name):
        settings = EvalSettings(device="cuda", size="small", timeout_s=30 if name == "infinite_loop" else 300,
                                min_timed_runs=20, min_timed_s=0.1)
        return name, evaluate_candidate("softmax", (CANDIDATES / f"{name}.py").read_text(), settings, spares)

    try:
        return dict(map(evaluate, GPU_EXPECTED))
    finally:
        spares.close()


@pytest.mark.parametrize("name", sorted(GPU_EXPECTED))
def test_gpu_outcome(name, gpu_results):
    result = gpu_results[name]
    assert result.outcome == GPU_EXPECTED[name], f"{name}: {result.outcome}: {result.message}"


def test_correct_candidates_are_timed_on_the_gpu(gpu_results):
    for name in ("good_triton_softmax", "cuda_light_softmax"):
        result = gpu_results[name]
        assert result.runtime_ms and result.runtime_ms > 0
        timing = result.details["timing"]
        assert timing["runs"] >= 20 and timing["checked_runs"] >= 1
        # the judge's clock agrees: nothing beyond the overhead of a runner that does nothing, within the noise
        # measured in this timing (kgen.judge.timing.clock_check). Below zero is harmless
        assert -0.3 < timing["clock_gap_ms"] < timing["clock_threshold_ms"], timing
        assert result.device != "cpu"
        kernels = result.details["gpu_kernels"]
        assert isinstance(kernels, list) and any(k["whose"] == "own" for k in kernels)


def test_patched_timing_is_named(gpu_results):
    """patches_timing replaces torch.cuda.Event and synchronize with fakes that claim ~0 ms: rejected, and
    the message says what it replaced."""
    assert "torch.cuda.Event" in gpu_results["patches_timing"].message


def test_correct_candidates_carry_a_kernel_profile_and_gpu_telemetry(gpu_results):
    """What the next round's prompt is shown (kgen.judge.kernel_profile) and the GPU's state around the
    timing (kgen.judge.telemetry, through NVML): recorded for real on this GPU."""
    from kgen.judge import kernel_profile

    for name, language in (("good_triton_softmax", "triton"), ("cuda_light_softmax", "cuda")):
        details = gpu_results[name].details
        profile = details["kernel_profile"]
        own = [k for k in profile["kernels"] if k["whose"] == "own"]
        assert own and own[0]["registers"] and own[0]["registers"] > 0 and own[0]["block"], profile
        assert 0 < profile["achieved"]["bandwidth_pct"] <= 100
        if language == "triton":
            assert profile["triton"] and profile["triton"][0]["n_regs"] > 0
        assert "registers/thread" in kernel_profile.summary(profile)
        assert details["phases"]["profile_s"] < 5
        telemetry = details["telemetry"]
        assert telemetry["before"]["sm_clock_mhz"] > 0 and telemetry["after"]["power_w"] > 0
        assert isinstance(telemetry["throttled"], bool)


@pytest.mark.parametrize("name", ["good_triton_softmax", "cuda_light_softmax"])
def test_nsight_compute_profiles_a_correct_candidate_inside_the_sandbox(name, gpu_results):
    """kgen.judge.ncu_profile for real: ncu around a sandboxed runner that loads the builds the evaluation
    compiled; the counters come back per kernel, with stall reasons."""
    from kgen.core.records import EvalSettings
    from kgen.judge import ncu_profile
    from kgen.problems.problem import load_problem

    if ncu_profile.find_ncu() is None:
        pytest.skip("Nsight Compute (ncu) is not installed here")
    assert gpu_results[name].outcome == "correct"
    settings = EvalSettings(device="cuda", size="small")
    profile = ncu_profile.profile_candidate(load_problem("softmax", "small"), (CANDIDATES / f"{name}.py").read_text(),
                                            settings, 120)
    assert "error" not in profile, profile
    own = profile["kernels"][0]
    assert own["us"] > 0 and 0 < own["dram_pct"] <= 100 and own["registers"] > 0, own
    assert own["stalls"] and all(v >= 0 for _, v in own["stalls"]), own
    assert 0 < own["occupancy_pct"] <= 100 and own["dram_bytes"] > 0, own
    assert profile["s"] < 60
    assert ncu_profile.summary(profile).startswith("Nsight Compute: ")


def test_gpu_memory_is_shared_not_copied(gpu_results):
    memory = gpu_results["good_triton_softmax"].details["gpu_memory"]
    assert memory["arena_bytes"] > 0 and memory["judge_peak_bytes"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("starter", STARTERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_starter_is_correct_at_full_size_and_timed(starter, tmp_path):
    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate

    result = evaluate_candidate(starter.parent.name, starter.read_text(),
                                EvalSettings(device="cuda", size="full", timeout_s=600))
    assert result.outcome == "correct", f"{starter}: {result.outcome}: {result.message}"
    assert result.runtime_ms > 0 and result.roofline_pct is not None and result.roofline_pct <= 100


@pytest.mark.slow
def test_baselines_are_timed_once_and_cached(tmp_path):
    from kgen.problems.problem import load_problem
    from kgen.store.baselines import get_baselines
    from kgen.store.db import Baseline, open_db

    db = open_db(str(tmp_path / "results.db"))
    problem = load_problem("softmax", "small")
    first = get_baselines(db, problem, "cuda")
    assert first is not None and first[0] > 0
    assert get_baselines(db, problem, "cuda") == first
    with db.reader() as s:
        rows = s.query(Baseline).all()
    assert len(rows) == 1 and "allow_tf32_cudnn" in rows[0].settings
    assert rows[0].settings["telemetry"]["eager_ms"]["before"]["sm_clock_mhz"] > 0  # the same telemetry as candidates


@pytest.mark.slow
def test_cli_on_the_gpu_with_a_db_fills_speedups(tmp_path):
    done = run_kgen("eval", "softmax", str(CANDIDATES / "good_triton_softmax.py"), "--json", "--size", "small",
                    "--db", str(tmp_path / "results.db"))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["outcome"] in ("correct", "suspicious")
    assert result["eager_ms"] and result["speedup_eager"] and result["roofline_pct"] is not None
