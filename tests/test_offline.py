"""The offline proposer: starters first, then seeded retunings of the best candidates, run over
rounds against a real results DB the way a search runs it."""

from __future__ import annotations

import ast
import json
import logging
import math
import subprocess
import sys
from pathlib import Path

import pytest

from kgen.core.errors import KgenError
from kgen.core.records import EvalResult
from kgen.problems.problem import load_problem, problem_names
from kgen.proposers import make_proposer
from kgen.proposers.offline import OfflineProposer, bundled_with_same_model, find_tunables
from kgen.store.db import open_db
from kgen.store.history import build_history
from kgen.store.queries import add_evaluation, add_proposal, normalized_source_hash

from conftest import run_kgen

REPO = Path(__file__).resolve().parent.parent
PROBLEM_FILES = Path(__file__).resolve().parent / "problem_files"
STARTER_KERNELS = Path(__file__).resolve().parent / "starter_kernels"  # kept apart from their problems

TINY_PROBLEM = '''"""ReLU of a small matrix."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


batch_size = 8
dim = 300


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

TINY_STARTER = '''"""ReLU in Triton, one block of columns per program."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_SIZE = 256
NUM_WARPS = 4
ROWS_PER_PROGRAM = 1
WARP_SIZE = 32
DIM = 512
PAD = 1000
{extra}

@triton.jit
def _relu_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        _relu_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, y, n, BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS,
                                                   num_stages=2)
        return y
'''


def tiny_problem(tmp_path, starter_extra="", starters=True):
    (tmp_path / "problems").mkdir(exist_ok=True)
    path = tmp_path / "problems" / "tiny_relu.py"
    path.write_text(TINY_PROBLEM.replace("dim = 300", "dim = 300\nDIM = 300"))
    if starters:
        folder = tmp_path / "problems" / "starters" / "tiny_relu"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "triton_relu.py").write_text(TINY_STARTER.format(extra=starter_extra))
    return load_problem(str(path), "small")


def fake_runtime_ms(source: str) -> float:
    """A made-up, deterministic timing landscape with one best tuning per kernel: the search should
    find its way down to it."""
    values = {t.name: t.value for t in find_tunables(source)}
    targets = {"BLOCK_SIZE": 2048, "NUM_WARPS": 8, "BLOCK_M": 64, "BLOCK_N": 64, "THREADS": 256, "UNROLL": 8}
    cost = sum(abs(math.log2(max(values[k], 1) / v)) for k, v in targets.items() if k in values)
    return 1.0 + cost + 0.01 * len(values)


def run_rounds(db, problem, proposer, rounds, n, outcome=lambda p: "correct"):
    """A search's loop without the evaluator: propose, store, give each a (fake) evaluation."""
    per_round = []
    for r in range(rounds):
        proposals = proposer.propose(problem, build_history(db, problem), n, r)
        for p in proposals:
            cid = add_proposal(db, p, run_id=None, round_index=r, problem=problem.name,
                               problem_hash=problem.source_hash)
            result = outcome(p)
            add_evaluation(db, cid, EvalResult(outcome=result, runtime_ms=fake_runtime_ms(p.source)
                                               if result == "correct" else None))
        per_round.append(proposals)
    return per_round


def _db(tmp_path, name):
    return open_db(str(tmp_path / name))


def test_round_zero_proposes_the_starters(problem_softmax):
    proposer = OfflineProposer(problem=problem_softmax)
    starters = sorted(p.name for p in (REPO / "problems/starters/softmax").glob("*.py"))
    proposals = proposer.propose(problem_softmax, build_history(_mem_db(), problem_softmax), len(starters), 0)
    assert [p.origin for p in proposals] == [f"starter softmax/{name}" for name in starters]
    for p in proposals:
        assert p.proposer == "offline" and p.model is None and p.parent_ids == [] and p.idea
        assert p.language == ("cuda" if p.origin.split("/")[1].startswith("cuda") else "triton")


def test_the_language_option_keeps_only_that_languages_starters(problem_softmax):
    proposer = OfflineProposer(problem=problem_softmax, language="triton")
    proposals = proposer.propose(problem_softmax, build_history(_mem_db(), problem_softmax), 20, 0)
    assert proposals and {p.language for p in proposals} == {"triton"}


@pytest.mark.parametrize("name", problem_names())
def test_every_proposal_parses_keeps_model_new_and_is_new(tmp_path, name):
    problem = load_problem(name, "small")
    db = _db(tmp_path, f"{name}.db")
    rounds = run_rounds(db, problem, OfflineProposer(problem=problem, seed=3), rounds=4, n=6)
    sources = [p.source for proposals in rounds for p in proposals]
    assert len(sources) >= 10
    for source in sources:
        tree = ast.parse(source)
        assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)
    hashes = [normalized_source_hash(s) for s in sources]
    assert len(set(hashes)) == len(hashes)


def test_the_same_seed_gives_the_same_search(tmp_path, problem_softmax):
    def sources(seed, db_name):
        proposer = OfflineProposer(problem=problem_softmax, seed=seed)
        rounds = run_rounds(_db(tmp_path, db_name), problem_softmax, proposer, rounds=4, n=5)
        return [(p.source, p.idea, p.parent_ids) for proposals in rounds for p in proposals]

    assert sources(7, "a.db") == sources(7, "b.db")
    assert [s for s, _, _ in sources(7, "c.db")] != [s for s, _, _ in sources(8, "d.db")]


def test_children_retune_one_to_three_declared_parameters_of_a_best_candidate(db, problem_softmax):
    rounds = run_rounds(db, problem_softmax, OfflineProposer(problem=problem_softmax, language="triton"), rounds=3, n=4)
    best_ids = set()
    for proposals in rounds[1:]:
        for child in proposals:
            assert child.origin.startswith("retuning of candidate #") and len(child.parent_ids) == 1
            best_ids.add(child.parent_ids[0])
            changes = child.idea.split(", ")
            assert 1 <= len(changes) <= 3
            for change in changes:
                name, values = change.split(" ")
                old, new = map(int, values.split("→"))
                declared = {"BLOCK_SIZE": [1024, 2048, 4096, 8192], "NUM_WARPS": [4, 8, 16, 32]}[name]
                assert new in declared and new != old and f"{name} = {new}" in child.source


def test_it_keeps_improving_because_the_best_are_the_parents(db, problem_softmax):
    run_rounds(db, problem_softmax, OfflineProposer(problem=problem_softmax, language="triton", seed=1), rounds=6, n=4)
    ranked = build_history(db, problem_softmax).best
    # each Triton starter's lineage found its own best tuning in the made-up landscape
    two_pass = next(c for c in ranked if "_softmax_online_kernel[" in c.source and "BLOCK_SIZE =" in c.source)
    start = fake_runtime_ms((REPO / "problems/starters/softmax/triton_online_two_pass.py").read_text())
    assert two_pass.runtime_ms < start
    assert "BLOCK_SIZE = 2048" in two_pass.source and "NUM_WARPS = 8 " in two_pass.source
    in_registers = next(c for c in ranked if "_softmax_row_kernel" in c.source)
    assert "NUM_WARPS = 8\n" in in_registers.source
    assert ranked[0].runtime_ms == min(two_pass.runtime_ms, in_registers.runtime_ms)


def test_recognized_names_double_or_halve_within_bounds_when_nothing_is_declared(tmp_path):
    problem = tiny_problem(tmp_path)
    source = TINY_STARTER.format(extra="")
    found = {t.name: t for t in find_tunables(source, frozenset({"batch_size", "dim"}))}
    launch_line = next(i for i, line in enumerate(source.splitlines(), 1) if "num_stages=2" in line)
    launch = f"num_stages@L{launch_line}"
    assert set(found) == {"BLOCK_SIZE", "NUM_WARPS", launch}  # not ROWS_PER_PROGRAM, WARP_SIZE, DIM, PAD
    assert found["BLOCK_SIZE"].alternatives() == [512, 128] and found["NUM_WARPS"].alternatives() == [8, 2]
    assert found[launch].alternatives() == [4, 1]
    db = _db(tmp_path, "tiny.db")
    children = [p for r in run_rounds(db, problem, OfflineProposer(problem=problem), rounds=5, n=4) for p in r][1:]
    assert children
    for child in children:
        values = {t.name: t.value for t in find_tunables(child.source)}
        assert values["BLOCK_SIZE"] & (values["BLOCK_SIZE"] - 1) == 0 and 16 <= values["BLOCK_SIZE"] <= 65536
        assert 1 <= values["NUM_WARPS"] <= 32 and "WARP_SIZE = 32" in child.source and "DIM = 512" in child.source


def test_cuda_tunables_are_found_in_source_strings_only():
    source = '''
import torch
THREADS = 256  # the launch in Python uses it too
CUDA_SRC = r"""
#define THREADS 256
#define ITEMS_PER_THREAD 4
#define NEG_BIG (-3.0e38f)
constexpr int UNROLL = 2;
"""
# define UNROLL_NOT 8
class ModelNew(torch.nn.Module):
    pass
'''
    found = {t.name: t for t in find_tunables(source)}
    assert set(found) == {"THREADS", "ITEMS_PER_THREAD", "UNROLL"}
    assert len(found["THREADS"].sites) == 2  # the Python constant and the #define change together
    assert found["THREADS"].alternatives() == [512, 128] and found["ITEMS_PER_THREAD"].alternatives() == [8, 2]


def test_cuda_starters_are_retuned_too(db, problem_softmax):
    proposals = OfflineProposer(problem=problem_softmax, language="cuda").propose(
        problem_softmax, build_history(db, problem_softmax), 8, 0)
    assert sum(p.origin.startswith("retuning") for p in proposals) == 8 - 3


def test_when_retunings_run_out_it_proposes_fewer_never_a_duplicate(tmp_path, caplog):
    extra = 'KGEN_TUNABLE = {"BLOCK_SIZE": [128, 256]}'
    problem = tiny_problem(tmp_path, starter_extra=extra)
    db = _db(tmp_path, "tiny.db")
    with caplog.at_level(logging.INFO, logger="kgen.proposers.offline"):
        rounds = run_rounds(db, problem, OfflineProposer(problem=problem), rounds=3, n=5)
    assert [len(r) for r in rounds] == [2, 0, 0]
    assert rounds[0][1].idea == "BLOCK_SIZE 256→128"
    assert "2 of 5 candidates" in caplog.text


def test_a_problem_without_starters_is_a_one_line_error(tmp_path):
    problem = load_problem(str(PROBLEM_FILES / "reduce_sum_dim.py"), "small")
    with pytest.raises(KgenError) as err:
        make_proposer("offline", problem=problem)
    message = str(err.value)
    assert message.startswith("the offline proposer has no starter kernels for reduce_sum_dim (looked in "
                              f"{PROBLEM_FILES / 'starters' / 'reduce_sum_dim'}): a starter is a Python file "
                              "defining ModelNew")
    assert "\n" not in message


NO_ENDPOINT = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""}


def test_search_without_starters_says_what_a_starter_is_and_how_to_use_an_llm_instead(tmp_path):
    """What a newcomer meets searching their own KernelBench file offline: one line, exit 2, no DB."""
    result = run_kgen("search", "--problem", str(PROBLEM_FILES / "layernorm_softmax_mean.py"), "--rounds", "1",
                      env=NO_ENDPOINT)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    for needle in ("no starter kernels for layernorm_softmax_mean", "defining ModelNew", "kernel of its own",
                   "--starters DIR", "--proposer openai", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        assert needle in result.stderr
    assert not (tmp_path / "results.db").exists()


@pytest.mark.parametrize("make_dir,needle", [
    (lambda d: d.mkdir(), "no starter kernels for elementwise_chain_tuple_shape (looked in {d})"),
    (lambda d: None, "starters folder not found: {d}"),
])
def test_the_starters_option_reaches_the_offline_proposer(tmp_path, make_dir, needle):
    folder = tmp_path / "my_starters"
    make_dir(folder)
    result = run_kgen("search", "--problem", str(PROBLEM_FILES / "elementwise_chain_tuple_shape.py"),
                      "--starters", str(folder), "--proposer", "offline", env=NO_ENDPOINT)
    assert result.returncode == 2 and needle.format(d=folder) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_starters_option_is_refused_for_a_proposer_that_does_not_use_it(tmp_path):
    result = run_kgen("search", "--problem", "softmax", "--proposer", "replay", "--from", "x.db", "--starters",
                      str(STARTER_KERNELS), env=NO_ENDPOINT)
    assert result.returncode == 2
    assert result.stderr.strip() == "kgen: error: --starters is for the offline proposer (this search uses --proposer replay)"


@pytest.mark.slow
def test_a_kernelbench_file_is_searched_offline_from_starters_kept_elsewhere(tmp_path):
    db = tmp_path / "results.db"
    result = run_kgen("search", "--problem", str(PROBLEM_FILES / "elementwise_chain_tuple_shape.py"),
                      "--starters", str(STARTER_KERNELS / "elementwise_chain_tuple_shape"), "--rounds", "1",
                      "--candidates", "2", "--language", "triton", "--size", "small", "--db", str(db), "--quiet",
                      env=NO_ENDPOINT)
    assert result.returncode == 0, result.stdout + result.stderr
    board = run_kgen("leaderboard", "--db", str(db), "--all", "--format", "json")
    entries = json.loads(board.stdout)
    # the leaderboard lists correct candidates only: the starter and its retuning both are
    assert [(e["problem"], e["language"], e["size"]) for e in entries] == [
        ("elementwise_chain_tuple_shape", "triton", "small")] * 2


def test_a_kernelbench_file_with_a_bundled_model_uses_the_bundled_starters():
    """KernelBench's Softmax file is the bundled softmax's Model at another size, written with
    docstrings and super(Model, self): searched offline, it starts from softmax's starters."""
    problem = load_problem(str(PROBLEM_FILES / "softmax_kernelbench_style.py"), "small")
    assert bundled_with_same_model(problem.source) == "softmax"
    proposer = make_proposer("offline", problem=problem, language="triton")
    starters = sorted(p.name for p in (REPO / "problems/starters/softmax").glob("triton_*.py"))
    proposals = proposer.propose(problem, build_history(_mem_db(), problem), len(starters), 0)
    assert [p.origin for p in proposals] == [f"starter softmax/{name}" for name in starters]


@pytest.mark.parametrize("edit", [("dim=1", "dim=0"), ("torch.softmax", "torch.log_softmax"),
                                  ("def __init__(self):", "def __init__(self, scale=1):")])
def test_a_model_that_differs_in_code_gets_no_bundled_starters(edit):
    source = (PROBLEM_FILES / "softmax_kernelbench_style.py").read_text()
    assert edit[0] in source
    assert bundled_with_same_model(source.replace(*edit)) is None
    assert bundled_with_same_model("class Model(") is None  # does not parse


def test_any_problem_with_starters_works_and_starters_dir_overrides(tmp_path):
    problem = tiny_problem(tmp_path, starters=False)
    with pytest.raises(KgenError, match="no starter kernels"):
        make_proposer("offline", problem=problem)
    other = tmp_path / "my_starters"
    other.mkdir()
    (other / "triton_relu.py").write_text(TINY_STARTER.format(extra=""))
    proposer = make_proposer("offline", problem=problem, starters_dir=str(other))
    proposals = proposer.propose(problem, build_history(_db(tmp_path, "t.db"), problem), 3, 0)
    assert [p.origin for p in proposals][0] == "starter my_starters/triton_relu.py" and len(proposals) == 3


def _eval_command_exists() -> bool:
    out = subprocess.run([sys.executable, "-m", "kgen", "eval", "--help"], capture_output=True, text=True)
    return out.returncode == 0


@pytest.mark.slow
def test_first_proposals_pass_kgen_eval_on_the_cpu(tmp_path, problem_softmax):
    if not _eval_command_exists():
        pytest.skip("`kgen eval` does not exist yet (the evaluation issue)")
    db = _db(tmp_path, "r.db")
    proposer = OfflineProposer(problem=problem_softmax, language="triton", seed=0)
    first = proposer.propose(problem_softmax, build_history(db, problem_softmax), 3, 0)
    for i, p in enumerate(first):
        path = tmp_path / f"candidate_{i}.py"
        path.write_text(p.source)
        out = subprocess.run([sys.executable, "-m", "kgen", "eval", "softmax", str(path), "--json", "--device", "cpu",
                              "--size", "small"], capture_output=True, text=True, timeout=600)
        result = json.loads(out.stdout)
        assert result["outcome"] == "correct", (p.idea, result.get("message"), out.stderr[-2000:])


@pytest.fixture(scope="module")
def problem_softmax():
    return load_problem("softmax", "small")


def _mem_db():
    return open_db("sqlite://")


OUT_OF_SHARED = ("OutOfResources: out of resource: shared memory, Required: 262144, Hardware limit: 232448. "
                 "Reducing block sizes or `num_stages` may help.")


@pytest.mark.parametrize("message, pruned", [(OUT_OF_SHARED, True), ("RuntimeError: an unrelated failure", False)])
def test_no_retuning_at_least_as_large_as_one_that_ran_out_of_shared_memory(tmp_path, message, pruned):
    """The timing landscape pulls BLOCK_SIZE up to 2048, but every BLOCK_SIZE >= 1024 fails. After an
    out-of-resource failure, no proposal may be as large or larger in every block/stage tunable with the
    other tunables equal; an unrelated failure teaches nothing (the control: such proposals do come)."""
    problem = tiny_problem(tmp_path)
    db = open_db(str(tmp_path / "oor.db"))
    proposer = OfflineProposer(problem=problem, seed=5)
    grows = lambda name: name == "BLOCK_SIZE" or name.startswith("num_stages@")
    failed: list[dict[str, int]] = []
    dominated = 0
    for r in range(8):
        for p in proposer.propose(problem, build_history(db, problem), 4, r):
            values = {t.name: t.value for t in find_tunables(p.source, proposer.exclude)}
            dominated += any(f.keys() == values.keys() and all(values[k] >= v if grows(k) else values[k] == v
                                                              for k, v in f.items()) for f in failed)
            cid = add_proposal(db, p, run_id=None, round_index=r, problem=problem.name,
                               problem_hash=problem.source_hash)
            if values.get("BLOCK_SIZE", 0) >= 1024:
                add_evaluation(db, cid, EvalResult(outcome="runtime_error", message=message))
                failed.append(values)
            else:
                add_evaluation(db, cid, EvalResult(outcome="correct", runtime_ms=fake_runtime_ms(p.source)))
    db.close()
    assert failed, "the landscape must lead the search into the failing sizes at least once"
    if pruned:
        assert dominated == 0
    else:
        assert dominated > 0
