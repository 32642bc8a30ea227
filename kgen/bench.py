"""`kgen bench`: kernel quality against torch, torch.compile and the roofline, and search throughput.

For each problem: a search with the offline proposer on a fixed seed and budget, then one table row
(eager, torch.compile default and max-autotune, the best kgen kernel, speedups, % of roofline) and one
row of search statistics (candidates evaluated per minute, the share of wall time the GPU was busy
evaluating, median compile time per candidate, wall time). Written as markdown and JSON under --out.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from sqlalchemy import select

from kgen.db import Baseline, Candidate, Database, Evaluation, Run
from kgen.store import correct_candidates


@dataclass
class QualityRow:
    problem: str
    device: str
    eager_ms: Optional[float]
    compile_ms: Optional[float]
    max_autotune_ms: Optional[float]
    floor_ms: Optional[float]
    best_ms: Optional[float]
    speedup_eager: Optional[float]
    speedup_compile: Optional[float]
    speedup_max_autotune: Optional[float]
    roofline_pct: Optional[float]
    best_id: Optional[int]
    best_language: Optional[str]
    run_id: int


@dataclass
class ThroughputRow:
    problem: str
    run_id: int
    evaluated: int
    correct: int
    wall_s: float
    evaluated_per_min: float
    gpu_busy_share: Optional[float]
    compile_s_median: Optional[float]
    gpus: int = 1
    timing_share: Optional[float] = None  # of the same span, the share spent inside the timing loops
    gpu_eval_s_median: Optional[float] = None  # one candidate's GPU-stage process, start to result


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b else None


def quality_row(db: Database, run_id: int) -> QualityRow:
    with db.reader() as s:
        run = s.get(Run, run_id)
        base = s.scalars(select(Baseline).where(Baseline.problem_hash == run.problem_hash,
                                                Baseline.size == run.size, Baseline.device == run.device)
                         .order_by(Baseline.id.desc())).first()
    correct = correct_candidates(db, run_id=run_id)
    # the fastest timed one; without a GPU nothing is timed, and the first correct one is shown, untimed
    best = next((c for c in correct if c.runtime_ms is not None), correct[0] if correct else None)
    eager = base.eager_ms if base else None
    compiled = base.compile_ms if base else None
    autotune = base.compile_max_autotune_ms if base else None
    from kgen.problems import load_problem
    from kgen.roofline import compute_roofline, device_ceilings

    floor = compute_roofline(load_problem(run.problem_path, run.size)).floor_ms(device_ceilings())
    best_ms = best.runtime_ms if best else None
    return QualityRow(problem=run.problem, device=run.device or "-", eager_ms=eager, compile_ms=compiled,
                      max_autotune_ms=autotune, floor_ms=floor, best_ms=best_ms,
                      speedup_eager=_ratio(eager, best_ms), speedup_compile=_ratio(compiled, best_ms),
                      speedup_max_autotune=_ratio(autotune, best_ms),
                      roofline_pct=best.roofline_pct if best else None, best_id=best.id if best else None,
                      best_language=best.language if best else None, run_id=run_id)


def _busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals (several GPUs' work may overlap in time)."""
    total, cur_start, cur_end = 0.0, None, None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def throughput_row(db: Database, run_id: int) -> ThroughputRow:
    """Throughput from what the search stored: each GPU-stage evaluation records when its GPU work
    began and ended (details.gpu_start/gpu_end, epoch seconds), each prebuild its compile_s."""
    with db.reader() as s:
        run = s.get(Run, run_id)
        rows = list(s.execute(select(Evaluation).join(Candidate).where(Candidate.run_id == run_id)).scalars())
    evaluated = [e for e in rows if e.outcome != "no_code"]
    intervals = [(e.details["gpu_start"], e.details["gpu_end"]) for e in evaluated
                 if e.details and "gpu_start" in e.details and "gpu_end" in e.details]
    end = run.finished_at or max((e.created_at for e in rows), default=run.created_at)
    wall_s = max((end - run.created_at).total_seconds(), 1e-9)
    busy_share = None
    if intervals and run.device and run.device != "cpu":
        gpu_devices = max(1, int((run.settings or {}).get("gpus", 1)))
        first_start = min(a for a, _ in intervals)  # from the first GPU work: "once round 1 is compiled"
        last_end = max(b for _, b in intervals)
        span = max(last_end - first_start, 1e-9)
        busy_share = _busy_seconds(intervals) / span / gpu_devices if gpu_devices == 1 else \
            sum(b - a for a, b in intervals) / span / gpu_devices
    timing_share = None
    if busy_share is not None:
        timed = sum(((e.details or {}).get("phases") or {}).get("timing_s", 0.0) for e in evaluated)
        gpu_devices = max(1, int((run.settings or {}).get("gpus", 1)))
        timing_share = timed / span / gpu_devices
    compile_times = [e.compile_s for e in evaluated if e.compile_s is not None]
    gpu_evals = [b - a for a, b in intervals]
    return ThroughputRow(problem=run.problem, run_id=run_id, evaluated=len(evaluated),
                         correct=sum(e.outcome == "correct" for e in evaluated), wall_s=wall_s,
                         evaluated_per_min=len(evaluated) / (wall_s / 60.0), gpu_busy_share=busy_share,
                         compile_s_median=statistics.median(compile_times) if compile_times else None,
                         timing_share=timing_share, gpus=max(1, int((run.settings or {}).get("gpus", 1) or 1)),
                         gpu_eval_s_median=statistics.median(gpu_evals) if gpu_evals else None)


def _f(v: Optional[float], fmt: str = "{:.3f}") -> str:
    return "-" if v is None else fmt.format(v)


def markdown(quality: list[QualityRow], throughput: list[ThroughputRow], header: str) -> str:
    lines = [header, "",
             "| problem | eager ms | torch.compile ms | max-autotune ms | floor ms | kgen ms | vs eager | vs compile "
             "| vs max-autotune | % roofline | best id | language |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for q in quality:
        lines.append(f"| {q.problem} | {_f(q.eager_ms)} | {_f(q.compile_ms)} | {_f(q.max_autotune_ms)} | "
                     f"{_f(q.floor_ms)} | {_f(q.best_ms)} | {_f(q.speedup_eager, '{:.2f}x')} | "
                     f"{_f(q.speedup_compile, '{:.2f}x')} | {_f(q.speedup_max_autotune, '{:.2f}x')} | "
                     f"{_f(q.roofline_pct, '{:.0f}%')} | {q.best_id or '-'} | {q.best_language or '-'} |")
    lines += ["", "| problem | run | GPUs | evaluated | correct | wall s | evaluated/min | per GPU-hour | GPU busy | "
                  "of which timing | GPU eval s (median) | compile s (median) |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for t in throughput:
        lines.append(f"| {t.problem} | {t.run_id} | {t.gpus} | {t.evaluated} | {t.correct} | {t.wall_s:.0f} | "
                     f"{t.evaluated_per_min:.1f} | {t.evaluated_per_min * 60 / t.gpus:.0f} | {_f(t.gpu_busy_share, '{:.0%}')} | "
                     f"{_f(t.timing_share, '{:.0%}')} | {_f(t.gpu_eval_s_median, '{:.1f}')} | "
                     f"{_f(t.compile_s_median, '{:.1f}')} |")
    return "\n".join(lines) + "\n"


def write_report(out_dir: Path, quality: list[QualityRow], throughput: list[ThroughputRow], header: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench.json").write_text(json.dumps({"header": header, "when": dt.datetime.now().isoformat(),
                                                    "quality": [asdict(q) for q in quality],
                                                    "throughput": [asdict(t) for t in throughput]}, indent=1))
    md = out_dir / "bench.md"
    md.write_text(markdown(quality, throughput, header))
    return md


DEFAULT_PROBLEMS = ("softmax", "layernorm", "matmul", "conv2d", "conv_relu_maxpool")


def parse_problems(values: Optional[list[str]]) -> list[str]:
    """`--problems` as given (`a b`, `a,b`, or both), each once in order; none: DEFAULT_PROBLEMS."""
    names = [name.strip() for value in values or () for name in value.split(",")]
    return list(dict.fromkeys(n for n in names if n)) or list(DEFAULT_PROBLEMS)


def run_bench(problems: list[str], *, rounds: int, candidates: int, seed: int, out_dir: Path, db: str | None,
              language: str = "any", timeout_s: float = 300.0, quiet: bool = True,
              ray_address: Optional[str] = None) -> tuple[Path, str]:
    """One offline search per problem on a fixed seed and budget, then the two tables."""
    import platform

    import torch
    import triton

    from kgen import __version__
    from kgen.db import open_db
    from kgen.progress import make_progress
    from kgen.search import SearchConfig, run_search

    database = open_db(db or str(out_dir / "bench.db"))
    quality, throughput = [], []
    try:
        for problem in problems:
            config = SearchConfig(problem=problem, rounds=rounds, candidates=candidates, proposer="offline",
                                  language=language, seed=seed, timeout_s=timeout_s)
            summary = run_search(database, config, ray_address=ray_address, progress=make_progress(quiet))
            quality.append(quality_row(database, summary.run_id))
            throughput.append(throughput_row(database, summary.run_id))
    finally:
        database.close()
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (no timings)"
    header = (f"## kgen bench: {device}, torch {torch.__version__}, triton {triton.__version__}, kgen {__version__}, "
              f"python {platform.python_version()}\n\n`kgen bench --problems {' '.join(problems)} --rounds {rounds} "
              f"--candidates {candidates} --seed {seed} --language {language}`")
    path = write_report(out_dir, quality, throughput, header)
    return path, path.read_text()
