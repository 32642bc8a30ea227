"""Profiler feedback and GPU telemetry (issue 17): what the runner reads from CUPTI's trace and
Triton's compiled kernels, how the judge-side sanitizes it, what the next round's prompt shows, and
NVML's throttling flags. The GPU is mocked here where it must be (a recorded Kineto trace, NVML
readings as dicts); tests/test_eval_gpu.py checks the real thing on a GPU."""

import json
import sqlite3
from dataclasses import replace
from types import SimpleNamespace

import pytest

from kgen.core.records import EvalResult, Proposal
from kgen.harness import runner
from kgen.judge import kernel_profile, ncu_profile, telemetry
from kgen.problems.problem import load_problem
from kgen.problems.roofline import Ceilings
from kgen.proposers.prompts import PromptRenderer, prompt_context
from kgen.store.db import open_db
from kgen.store.history import build_history
from kgen.store.queries import add_evaluation, add_proposal

from conftest import REPO, run_kgen
from evaluators import H100 as H100_FACTS
from evaluators import OTHER_CPU
from llm_server import Reply, ScriptedLLMServer

SOFTMAX_STARTER = (REPO / "problems/starters/softmax/triton_online_two_pass.py").read_text()

# Two kernel events as Kineto writes them for a Triton softmax on an H100 (the fields
# benchmarks/profile_probe.py prints), one memcpy, and a runtime event that is not a kernel.
KINETO_TRACE = {"traceEvents": [
    {"ph": "X", "cat": "kernel", "name": "_softmax_kernel", "dur": 480.5,
     "args": {"grid": [4096, 1, 1], "block": [256, 1, 1], "registers per thread": 40, "shared memory": 16384,
              "est. achieved occupancy %": 62, "blocks per SM": 30.3, "warps per SM": 242.4}},
    {"ph": "X", "cat": "kernel", "name": "_softmax_kernel", "dur": 479.5,
     "args": {"grid": [4096, 1, 1], "block": [256, 1, 1], "registers per thread": 40, "shared memory": 16384,
              "est. achieved occupancy %": 62}},
    {"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4, FillFunctor>",
     "dur": 40.0, "args": {"grid": [1024, 1, 1], "block": [128, 1, 1], "registers per thread": 16}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "dur": 5.0, "args": {}},
]}


class RecordedProfile:
    """Stands in for torch.profiler.profile on a GPU (none here): exports a recorded Kineto trace."""

    def __init__(self, trace):
        self.trace = trace

    def export_chrome_trace(self, path):
        with open(path, "w") as f:
            json.dump(self.trace, f)


def test_the_runner_reads_each_kernels_launch_configuration_from_the_trace(tmp_path):
    launches = runner._kernel_launches(RecordedProfile(KINETO_TRACE), str(tmp_path))
    assert [row["name"] for row in launches] == ["_softmax_kernel",
                                                 "void at::native::vectorized_elementwise_kernel<4, FillFunctor>"]
    soft = launches[0]
    assert soft["launches"] == 2 and soft["us"] == pytest.approx(960.0)
    assert (soft["grid"], soft["block"], soft["registers"], soft["shared_bytes"], soft["occupancy_pct"]) == (
        [4096, 1, 1], [256, 1, 1], 40, 16384, 62)
    assert list(tmp_path.iterdir()) == []  # the trace file is removed: the candidate's workdir is not littered


def test_a_trace_that_cannot_be_written_gives_no_launches_not_an_error(tmp_path):
    class Broken:
        def export_chrome_trace(self, path):
            raise RuntimeError("CUPTI is not available")

    assert runner._kernel_launches(Broken(), str(tmp_path)) == []


def test_triton_statistics_come_from_each_jit_functions_compiled_kernels():
    from triton.runtime.jit import JITFunction

    def body(x):
        return x

    fn = JITFunction(body)
    compiled = SimpleNamespace(n_regs=72, n_spills=3, metadata=SimpleNamespace(shared=2048, num_warps=8,
                                                                                num_stages=3))
    fn.device_caches = {0: ({"key": compiled}, None, None, None)}  # as Triton 3 keeps them: one tuple per device
    module = SimpleNamespace(my_kernel=fn, autotuned=SimpleNamespace(fn=fn), other=3)
    rows = runner._triton_stats(module)
    assert rows[0] == {"kernel": "body", "n_regs": 72, "n_spills": 3, "shared_bytes": 2048, "num_warps": 8,
                       "num_stages": 3}
    assert len(rows) == 2  # through the Autotuner-like wrapper too


def runner_report():
    return {"type": "profile", "kernels": [],
            "launches": runner._kernel_launches(RecordedProfile(KINETO_TRACE), "/tmp"),
            "triton": [{"kernel": "_softmax_kernel", "n_regs": 40, "n_spills": 2, "shared_bytes": 16384,
                        "num_warps": 8, "num_stages": 1}]}


def test_the_judge_side_profile_marks_own_kernels_and_their_time_share():
    profile = kernel_profile.from_runner(runner_report(), {"_softmax_kernel"})
    own, fill = profile["kernels"]
    assert own["whose"] == "own" and fill["whose"] == "other"
    assert own["share_pct"] == pytest.approx(100 * 960 / 1000, abs=0.1)
    assert profile["stalls"] is None and "Nsight Compute" in profile["stalls_note"]
    text = kernel_profile.summary(profile)
    assert "_softmax_kernel (96% of GPU time, 2 launches, grid 4096x1x1, 256 threads/block" in text
    assert "40 registers/thread, 2 spills, 16 KB shared, est. occupancy 62%" in text


def test_whatever_the_candidate_puts_in_its_report_is_typed_and_clipped():
    hostile = {"launches": [{"name": "k\x1b[2J" + "x" * 5000, "us": "1e9", "launches": float("nan"),
                             "grid": "all of them", "block": [1, 2, 3, 4], "registers": True,
                             "occupancy_pct": float("inf")}, "not a dict"],
               "triton": [{"kernel": ["list"], "n_regs": "many"}]}
    profile = kernel_profile.from_runner(hostile, set())
    [row] = profile["kernels"]
    assert len(row["name"]) == 300 and "\x1b" not in row["name"]
    assert (row["us"], row["launches"], row["grid"], row["block"], row["registers"], row["occupancy_pct"]) == (
        0.0, 0, None, None, None, None)
    assert profile["triton"][0]["n_regs"] is None
    assert kernel_profile.from_runner({"launches": None}, set()) is None


def test_achieved_rates_are_the_minimum_traffic_over_the_timed_median():
    profile = kernel_profile.from_runner(runner_report(), {"_softmax_kernel"})
    # softmax 4096x65536 fp32: 2 GiB moved; at 1.0 ms that is 2147 GB/s, 71.6% of 3.0 TB/s
    kernel_profile.add_achieved(profile, 2 * 4096 * 65536 * 4, 5 * 4096 * 65536, 1.0, 3.0e12, 17.0e12)
    achieved = profile["achieved"]
    assert achieved["bandwidth_gb_s"] == pytest.approx(2147.5, abs=0.1)
    assert achieved["bandwidth_pct"] == pytest.approx(71.6, abs=0.1)
    assert achieved["compute_pct"] == pytest.approx(100 * 5 * 4096 * 65536 / 1e-3 / 17e12, abs=0.1)
    assert kernel_profile.summary(profile).startswith("2148 GB/s = 72% of measured bandwidth")


H100 = Ceilings(device="NVIDIA H100 80GB HBM3", bandwidth_bytes_per_s=3.0e12, fp32_flops_per_s=52e12,
                torch_version="test", measured_at=0.0, tf32_flops_per_s=400e12, half_flops_per_s=800e12)


def test_the_propose_prompt_shows_each_best_candidates_profile_from_the_db(tmp_path):
    """A real SQLite DB holding a timed evaluation with its profile, as a GPU search stores it (the GPU
    and its measured ceilings are given); the rendered prompt carries the summary under it."""
    db = open_db(str(tmp_path / "results.db"))
    problem = load_problem("softmax", "small")
    cid = add_proposal(db, Proposal(source=SOFTMAX_STARTER, proposer="offline", language="triton", idea="two passes"),
                       run_id=None, round_index=1, problem=problem.name, problem_hash=problem.source_hash)
    profile = kernel_profile.from_runner(runner_report(), {"_softmax_kernel"})
    kernel_profile.add_achieved(profile, 2 << 20, 5 << 18, 0.01, 3.0e12, 17.0e12)
    add_evaluation(db, cid, EvalResult(outcome="correct", runtime_ms=0.01, device=H100.device, size="small",
                                       details={"kernel_profile": profile}))
    history = build_history(db, problem, evaluator=replace(H100_FACTS, ceilings=H100))
    assert history.profiles[cid] == kernel_profile.summary(profile)
    text = PromptRenderer().render("propose.j2", prompt_context(problem, history))
    assert f"Profile: {kernel_profile.summary(profile)}" in text
    assert "Nsight Compute" in text and "off on this machine" not in text
    db.close()


def test_a_cpu_history_says_profiles_are_off_once(tmp_path):
    db = open_db(str(tmp_path / "results.db"))
    problem = load_problem("softmax", "small")
    history = build_history(db, problem, evaluator=OTHER_CPU)
    text = PromptRenderer().render("propose.j2", prompt_context(problem, history))
    assert text.count("Kernel profiles are off on this machine (no GPU)") == 1 and "Profile:" not in text
    db.close()


@pytest.mark.slow
def test_a_cpu_search_tells_the_llm_in_round_two_that_profiles_are_off(tmp_path):
    """The whole path on this CPU machine: the real CLI, a local Ray cluster, a loopback
    OpenAI-compatible server; round 2's prompt (built from round 1's stored results) says so."""
    db = tmp_path / "results.db"
    with ScriptedLLMServer(default=Reply.code(SOFTMAX_STARTER, idea="Online softmax.")) as server:
        result = run_kgen("search", "--problem", "softmax", "--rounds", "2", "--candidates", "1", "--size", "small",
                          "--language", "triton", "--no-overlap", "--proposer", "openai", "--base-url", server.base_url,
                          "--model", "test-model", "--db", str(db), env={"OPENAI_API_KEY": server.api_key})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Kernel profiles are off (no GPU here)" in result.stdout
    with sqlite3.connect(db) as conn:
        prompts = conn.execute("SELECT round, prompt FROM llm_calls WHERE template = 'propose' ORDER BY id").fetchall()
        correct = conn.execute("SELECT COUNT(*) FROM evaluations WHERE outcome = 'correct'").fetchone()[0]
    assert correct >= 1 and [r for r, _ in prompts] == [1, 2]
    second = json.loads(prompts[1][1])[1]["content"]
    assert "## The best correct candidates so far" in second
    assert "Kernel profiles are off on this machine (no GPU)" in second


# -- telemetry ------------------------------------------------------------------------------------


def test_throttle_reasons_are_decoded_from_the_nvml_mask():
    assert telemetry.decode_reasons(0) == [] and telemetry.decode_reasons(None) == []
    assert telemetry.decode_reasons(0x1 | 0x2 | 0x10) == []  # idle, application clocks, sync boost: not a slowdown
    assert telemetry.decode_reasons(0x4 | 0x40) == ["software power cap", "hardware thermal slowdown"]


def test_a_timing_is_flagged_when_either_reading_saw_the_clocks_held_down():
    calm = {"sm_clock_mhz": 1980, "max_sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "temperature_c": 41,
            "power_w": 310.0, "power_limit_w": 700.0, "throttle_mask": 0, "throttle_reasons": []}
    hot = dict(calm, sm_clock_mhz=1410, temperature_c=88, throttle_mask=0x20, throttle_reasons=["software thermal "
                                                                                               "slowdown"])
    assert telemetry.around(calm, calm)["throttled"] is False
    flagged = telemetry.around(calm, hot)
    assert flagged["throttled"] is True and flagged["throttle_reasons"] == ["software thermal slowdown"]
    assert telemetry.summary(flagged) == ("SM 1410 of 1980 MHz, memory 2619 MHz, 88 °C, 310 of 700 W, "
                                          "THROTTLED: software thermal slowdown")
    assert telemetry.around(None, None) is None


def test_without_a_gpu_there_is_no_telemetry_and_no_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert telemetry.sample(None) is None


def test_kgen_show_and_the_report_carry_the_profile_and_the_telemetry(tmp_path):
    """A timed evaluation as a GPU search stores it (the GPU is mocked: the profile comes from the recorded
    trace above, the NVML readings are written by hand), read back by the real CLI."""
    db_path = tmp_path / "results.db"
    db = open_db(str(db_path))
    problem = load_problem("softmax", "small")
    cid = add_proposal(db, Proposal(source=SOFTMAX_STARTER, proposer="offline", language="triton"), run_id=None,
                       round_index=0, problem=problem.name, problem_hash=problem.source_hash)
    profile = kernel_profile.from_runner(runner_report(), {"_softmax_kernel"})
    hot = {"sm_clock_mhz": 1410, "max_sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "temperature_c": 88,
           "power_w": 690.0, "power_limit_w": 700.0, "throttle_mask": 0x20,
           "throttle_reasons": ["software thermal slowdown"]}
    # and a Nsight Compute profile as the search attaches it after the round (a log ncu wrote on the H100)
    ncu = dict(ncu_profile.parse((REPO / "tests/data/ncu_softmax_h100.csv").read_text()), s=7.5)
    add_evaluation(db, cid, EvalResult(outcome="correct", runtime_ms=0.01, device=H100.device, size="small",
                                       details={"kernel_profile": profile, "telemetry": telemetry.around(hot, hot),
                                                "phases": {"profile_s": 0.012}, "ncu": ncu}))
    db.close()
    shown = run_kgen("show", str(cid), "--db", str(db_path), env={"COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "kernel profile (CUPTI): 2 kernels: _softmax_kernel (96% of GPU time" in text
    assert "Nsight Compute: softmax_kernel (" in text and "top stalls long_scoreboard" in text and "[7.5 s]" in text
    assert "GPU during timing: SM 1410 of 1980 MHz" in text and "THROTTLED: software thermal slowdown" in text
    report = run_kgen("report", "-o", str(tmp_path / "r.html"), "--db", str(db_path))
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "r.html").read_text()
    assert "<h2>Kernel profiles</h2>" in page and "40 registers/thread, 2 spills" in page
    assert "Nsight Compute: softmax_kernel (" in page
    assert "THROTTLED: software thermal slowdown" in page
