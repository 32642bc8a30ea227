"""Every test candidate in tests/candidates/ gets its outcome on the CPU (Triton's interpreter, the
small softmax) through the real judge and sandbox, by the Python API, and a representative few
through the real `kgen eval --json` in a subprocess.

All evaluations of a module run up front, two at a time, so the file costs about as much wall time
as its slowest half.
"""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import REPO

CANDIDATES = Path(__file__).resolve().parent / "candidates"
SECRETS = {"OPENAI_API_KEY": "sk-kgen-test-not-a-real-key", "MY_SERVICE_TOKEN": "tok-kgen-test-value",
           "DB_PASSWORD": "pw-kgen-test-value"}
HANG_TIMEOUT_S = 15
TIMEOUT_S = 120

# candidate file -> the outcome it must get on the CPU
EXPECTED = {
    "good_triton_softmax": "correct",
    "cuda_light_softmax": "not_run",  # compiles with nvcc; torch has no CUDA here
    "empty_like_leftover": "incorrect",
    "modifies_input": "incorrect",
    "side_stream_dodged": "static_reject",
    "side_stream_plain": "static_reject",
    "torch_softmax_token": "static_reject",
    "getattr_softmax": "static_reject",
    "caches_results": "incorrect",
    "low_precision": "incorrect",
    "tensor_subclass": "incorrect",
    "patches_timing": "static_reject",  # it assigns torch.cuda.Event and synchronize, what kgen's runner uses
    "sys_exit": "runtime_error",
    "os_exit": "runtime_error",
    "segfault": "runtime_error",
    "cuda_segfault_at_import": "runtime_error",  # dies in the compile step (a CUDA source's, even here)
    "infinite_loop": "timeout",
    "spawns_process": "static_reject",
    "forks_children": "correct",  # its forks are refused by the sandbox; what it returns is honest
    "host_sync_inside_forward": "correct",  # waits on the GPU between its kernels: honest (the GPU test times it)
    "starts_thread": "static_reject",
    "compiles_torch": "static_reject",
    "reads_secrets": "correct",
    "huge_stdout": "correct",
    "forges_result": "runtime_error",
    "naive_overflow": "incorrect",
    "steals_reference": "incorrect",  # nothing to steal in its process: it returns what it made up
    "nondeterministic": "incorrect",
    "out_of_memory": "runtime_error",
    "syntax_error": "static_reject",
    "no_modelnew": "static_reject",
    "no_kernel": "static_reject",
    "kernel_never_launched": "static_reject",
    "triton_compile_error": "compile_error",
    "cuda_compile_error": "compile_error",
}
GPU_ONLY = {"cuda_illegal_address"}
ELSEWHERE = {"honest_fp32_attention", "tf32_matmul", "triton_cumprod", "triton_mse_scalar",  # other problems: test_tolerance.py
             "batchnorm_problem", "batchnorm_kernel"}  # the judge's mode: test_prompt_facts.py
# through the CLI too: one of each kind of ending
CLI_CHECKED = ["good_triton_softmax", "cuda_light_softmax", "torch_softmax_token", "low_precision", "segfault",
               "infinite_loop", "reads_secrets", "syntax_error"]


def _timeout(name: str) -> int:
    return HANG_TIMEOUT_S if name == "infinite_loop" else TIMEOUT_S


@pytest.fixture(scope="module")
def eval_home(tmp_path_factory):
    """A cache dir shared by the module's evaluations (a CUDA source compiles once), and the fake secrets."""
    home = tmp_path_factory.mktemp("eval-home")
    env = dict(SECRETS, KGEN_CACHE_DIR=str(home / "cache"))
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield home
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def api_results(eval_home):
    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate

    def evaluate(name):
        source = (CANDIDATES / f"{name}.py").read_text()
        return name, evaluate_candidate("softmax", source, EvalSettings(device="cpu", size="small",
                                                                         timeout_s=_timeout(name)))

    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(evaluate, EXPECTED))


@pytest.fixture(scope="module")
def cli_results(eval_home, api_results):
    def run(name):
        done = subprocess.run([sys.executable, "-m", "kgen", "eval", "softmax", str(CANDIDATES / f"{name}.py"), "--json",
                               "--device", "cpu", "--timeout", str(_timeout(name))], capture_output=True, text=True,
                              cwd=eval_home, env=dict(os.environ), timeout=_timeout(name) + 120)
        return name, done

    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(run, CLI_CHECKED))


def test_every_candidate_file_is_covered():
    names = {p.stem for p in CANDIDATES.glob("*.py")}
    assert names == set(EXPECTED) | GPU_ONLY | ELSEWHERE


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_api_outcome(name, api_results):
    result = api_results[name]
    assert result.outcome == EXPECTED[name], f"{name}: {result.outcome}: {result.message}"
    assert result.runtime_ms is None  # no time is ever claimed on the CPU
    if result.outcome != "correct":
        assert result.message


@pytest.mark.parametrize("name", CLI_CHECKED)
def test_cli_outcome(name, cli_results):
    done = cli_results[name]
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["outcome"] == EXPECTED[name], f"{name}: {result['outcome']}: {result['message']}"
    for key in ("outcome", "message", "language", "max_abs_err", "max_rel_err", "runtime_ms", "eager_ms",
                "compile_ms", "speedup_eager", "speedup_compile", "roofline_pct", "device", "atol", "rtol"):
        assert key in result
    assert result["device"] == "cpu" and result["runtime_ms"] is None


def test_no_secret_reaches_the_candidate(api_results, cli_results):
    for text in (json.dumps(api_results["reads_secrets"].to_dict()), cli_results["reads_secrets"].stdout):
        for value in SECRETS.values():
            assert value not in text


def test_correct_result_reports_its_errors_and_tolerance(api_results):
    result = api_results["good_triton_softmax"]
    assert result.language == "triton" and result.rtol == 1e-5
    assert 0 < result.atol < 1e-6  # scaled to the outputs (softmax over 1000 columns: ~1e-3)
    assert result.norm_rel_err < 1e-6 and result.max_abs_err < 1e-6


def test_mismatch_message_names_index_and_values(api_results):
    message = api_results["low_precision"].message
    assert "output[" in message and "reference" in message and "trial" in message


def test_overflow_caught_by_the_scaled_trial(api_results):
    assert "×100" in api_results["naive_overflow"].message


def test_token_kernel_beside_torch_is_named_with_its_torch_ops(api_results):
    for name in ("torch_softmax_token", "getattr_softmax"):
        assert api_results[name].torch_ops == ["_softmax"]


def test_huge_stdout_is_truncated(api_results):
    result = api_results["huge_stdout"]
    assert len(json.dumps(result.to_dict())) < 100_000


def test_segfault_names_the_signal(api_results):
    assert "SIGSEGV" in api_results["segfault"].message


def test_a_forged_result_is_only_a_dead_runner(api_results):
    # it writes a "result" to every descriptor it has and exits: the judge reads nothing but its own arena
    assert "exited with status" in api_results["forges_result"].message


def test_forked_children_do_not_outlive_the_evaluation(api_results, cli_results):
    strays = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == "kgen_stray":
                strays.append(comm.parent.name)
        except OSError:
            pass
    assert not strays


def test_compile_errors_are_trimmed_for_the_llm(api_results):
    message = api_results["cuda_compile_error"].message
    assert "undefined_variable" in message and "error" in message
    assert len(message.splitlines()) < 50
    assert "softmax_that_does_not_exist" in api_results["triton_compile_error"].message


def test_low_precision_passes_a_loose_rtol(eval_home):
    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate

    source = (CANDIDATES / "low_precision.py").read_text()
    result = evaluate_candidate("softmax", source, EvalSettings(device="cpu", size="small", rtol=1e-2))
    assert result.outcome == "correct", result.message
    assert result.rtol == 1e-2


def test_starter_kernels_are_correct_on_cpu(eval_home):
    """The Triton starters of every problem (the known-good candidates) evaluate correct."""
    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate

    starters = sorted((REPO / "problems" / "starters").glob("*/triton_*.py"))
    if not starters:
        pytest.skip("no starter kernels yet")

    def evaluate(path):
        return path, evaluate_candidate(path.parent.name, path.read_text(),
                                        EvalSettings(device="cpu", size="small", timeout_s=TIMEOUT_S))

    with ThreadPoolExecutor(2) as pool:
        for path, result in pool.map(evaluate, starters):
            assert result.outcome == "correct", f"{path.name}: {result.outcome}: {result.message}"
