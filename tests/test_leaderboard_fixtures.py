"""Results DBs the leaderboard, export and report tests share, written through kgen.store.queries as a search
writes them: real starter sources, GPU-like timings (H100-scale milliseconds) for the plots, a CPU
run with no timings, a hybrid, a suspicious candidate that must never be listed, and LLM tokens."""

from __future__ import annotations

from pathlib import Path

from kgen.core.records import EvalResult, Proposal
from kgen.problems.problem import load_problem
from kgen.store import queries
from kgen.store.db import open_db

STARTERS = Path(__file__).resolve().parent.parent / "problems" / "starters"
H100 = "NVIDIA H100 80GB HBM3"
VERSIONS = dict(torch_version="2.5.1+cu124", triton_version="3.1.0", cuda_version="12.4")


def starter(problem: str, name: str, **constants: int) -> str:
    """A starter's source with some of its tunable constants changed, as the offline proposer does."""
    import re

    source = (STARTERS / problem / f"{name}.py").read_text()
    for key, value in constants.items():
        source, n = re.subn(rf"^{key} = \d+", f"{key} = {value}", source, count=1, flags=re.M)
        assert n == 1, (name, key)
    return source


def _run(db, problem, size, device, proposer, model, rounds, per_round):
    p = load_problem(problem, size)
    run_id = queries.create_run(db, problem=p.name, problem_path=str(p.path), problem_hash=p.source_hash, size=size,
                                proposer=proposer, model=model, language="any", seed=0, rounds=rounds,
                                candidates_per_round=per_round, settings={"problem": problem, "rounds": rounds},
                                device=device)
    return p, run_id


def _add(db, p, run_id, round_index, source, language, outcome, *, parents=(), idea=None, proposer="offline",
         model=None, device=H100, size="full", runtime_ms=None, eager_ms=None, compile_ms=None, floor_ms=None,
         torch_ops=(), message="", tokens=None):
    proposal = Proposal(source=source, proposer=proposer, language=language, model=model, parent_ids=list(parents),
                        idea=idea, origin="test fixture")
    if tokens is not None:
        proposal.prompt = [{"role": "user", "content": "make it faster"}]
        proposal.response = "```python\n" + (source or "") + "```"
        proposal.tokens_in, proposal.tokens_out = tokens
    cid = queries.add_proposal(db, proposal, run_id=run_id, round_index=round_index, problem=p.name,
                               problem_hash=p.source_hash)
    if source is None:
        return cid
    timed = runtime_ms is not None and outcome == "correct"
    result = EvalResult(
        outcome=outcome, message=message, language=language, device=device, size=size,
        max_abs_err=3.1e-7 if outcome in ("correct", "suspicious") else (0.25 if outcome == "incorrect" else None),
        atol=1e-5, rtol=1e-5, runtime_ms=runtime_ms if timed else None, eager_ms=eager_ms if timed else None,
        compile_ms=compile_ms if timed else None,
        speedup_eager=eager_ms / runtime_ms if timed and eager_ms else None,
        speedup_compile=compile_ms / runtime_ms if timed and compile_ms else None,
        roofline_pct=100 * floor_ms / runtime_ms if timed and floor_ms else None, torch_ops=list(torch_ops),
        **VERSIONS)
    queries.add_evaluation(db, cid, result)
    return cid


def build_results_db(path) -> dict:
    """Three runs: softmax on an H100 (4 rounds), conv2d on an H100 with an LLM proposer (2 rounds),
    softmax on a CPU at the small size (untimed). Returns the ids the tests look for."""
    db = open_db(str(path))
    ids: dict = {}
    try:
        sm = dict(eager_ms=1.62, compile_ms=1.18, floor_ms=0.68)
        p, run = _run(db, "softmax", "full", H100, "offline", None, 4, 3)
        ids["softmax_run"] = run
        a = _add(db, p, run, 0, starter("softmax", "triton_online_two_pass"), "triton", "correct",
                 idea="starter: online two-pass softmax", runtime_ms=1.31, **sm)
        b = _add(db, p, run, 0, starter("softmax", "cuda_two_pass"), "cuda", "compile_error",
                 message="nvcc: error: identifier \"__shfl_xor\" is undefined")
        c = _add(db, p, run, 0, starter("softmax", "triton_online_two_pass", BLOCK_SIZE=1024), "triton", "correct",
                 parents=[a], idea="smaller blocks", runtime_ms=1.52, **sm)
        d = _add(db, p, run, 1, starter("softmax", "triton_online_two_pass", BLOCK_SIZE=4096), "triton", "correct",
                 parents=[a], idea="BLOCK_SIZE 4096 for more rows in flight", runtime_ms=1.02, **sm)
        _add(db, p, run, 1, starter("softmax", "triton_online_two_pass", NUM_WARPS=4), "triton", "incorrect",
             parents=[a], message="max abs error 0.25 > atol 1e-05 + rtol 1e-05 * |expected|")
        _add(db, p, run, 1, starter("softmax", "triton_online_two_pass", NUM_WARPS=8), "triton", "timeout",
             parents=[a], message="no result after 300 s")
        e = _add(db, p, run, 2, starter("softmax", "triton_online_two_pass", BLOCK_SIZE=4096, NUM_WARPS=16),
                 "triton", "correct", parents=[d, c], idea="16 warps: two rows per SM stay in L2", runtime_ms=0.81,
                 **sm)
        _add(db, p, run, 2, starter("softmax", "triton_online_two_pass", BLOCK_SIZE=2048, NUM_WARPS=16), "triton",
             "runtime_error", parents=[d], message="CUDA error: an illegal memory access was encountered")
        sus = _add(db, p, run, 2, starter("softmax", "triton_online_two_pass", BLOCK_SIZE=2048), "triton",
                   "suspicious", parents=[d], runtime_ms=0.05, message="faster than the memory roofline allows")
        _add(db, p, run, 3, starter("softmax", "triton_online_two_pass", BLOCK_SIZE=8192, NUM_WARPS=16), "triton",
             "correct", parents=[e], idea="back to 8192-wide blocks", runtime_ms=0.86, **sm)
        _add(db, p, run, 3, "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
             "        return torch.softmax(x, 1)\n", "unknown", "static_reject", parents=[e],
             message="calls the reference's torch.softmax and launches no kernel of its own")
        queries.set_run_status(db, run, "finished", rounds_done=4)
        ids.update(softmax_best=e, softmax_first=a, softmax_suspicious=sus, softmax_compile_error=b)

        cv = dict(eager_ms=3.05, compile_ms=2.70, floor_ms=0.55)
        p, run = _run(db, "conv2d", "full", H100, "openai", "gpt-4.1", 2, 2)
        ids["conv_run"] = run
        f = _add(db, p, run, 0, starter("conv2d", "triton_implicit_gemm"), "triton", "correct", proposer="openai",
                 model="gpt-4.1", idea="implicit GEMM over (pixels x out-channels)", runtime_ms=2.41,
                 tokens=(5210, 1630), **cv)
        g = _add(db, p, run, 0, starter("conv2d", "cuda_implicit_gemm"), "cuda", "correct", proposer="openai",
                 model="gpt-4.1", idea="CUDA implicit GEMM, 8x8 register blocking", runtime_ms=1.87,
                 tokens=(5210, 2875), **cv)
        _add(db, p, run, 1, None, "unknown", "no_code", proposer="openai", model="gpt-4.1", tokens=(6020, 410))
        h = _add(db, p, run, 1, starter("conv2d", "triton_implicit_gemm"), "triton", "correct", parents=[f],
                 proposer="openai", model="gpt-4.1", idea="im2col in torch, GEMM in Triton", runtime_ms=2.95,
                 torch_ops=["aten.unfold"], tokens=(6020, 1980), **cv)
        queries.set_run_status(db, run, "finished", rounds_done=2)
        ids.update(conv_best=g, conv_triton=f, conv_hybrid=h)

        p, run = _run(db, "softmax", "small", "cpu", "offline", None, 2, 2)
        ids["cpu_run"] = run
        i = _add(db, p, run, 0, starter("softmax", "triton_online_two_pass", BLOCK_SIZE=1024), "triton", "correct",
                 device="cpu", size="small", idea="starter")
        j = _add(db, p, run, 0, starter("softmax", "cuda_two_pass"), "cuda", "compile_error", device="cpu",
                 size="small", message="nvcc not found: CUDA sources cannot be compiled here")
        k = _add(db, p, run, 1, starter("softmax", "triton_online_two_pass", BLOCK_SIZE=2048), "triton", "correct",
                 parents=[i], device="cpu", size="small", idea="2048-wide blocks")
        queries.set_run_status(db, run, "interrupted", rounds_done=1)
        ids.update(cpu_first=i, cpu_second=k, cpu_cuda=j)
    finally:
        db.close()
    return ids
