"""`kgen bench`: kernel quality against torch, torch.compile and the roofline, and search throughput.

For each problem: a search with the offline proposer on a fixed seed and budget, then one table row
(eager, torch.compile, optionally max-autotune, the best kgen kernel, speedups, % of roofline) and one
row of search statistics (candidates evaluated per minute, the share of the evaluation span the GPUs
were busy, median compile time, the seconds before the first candidate reached a GPU). Each
problem's rows are handed to `on_problem` and bench.md / bench.json rewritten as soon as its search
ends, so a run cut off by a deadline still leaves every finished problem's results.

The searches share one Ray cluster. With several GPU counts (`gpu_counts=(1, 2)`) the problem set runs
once per count, each on a fresh local cluster using the first that many GPUs, with a DB and caches
of its own (so no count inherits another's candidates or compiled kernels), and a scaling table
compares their evaluation rates.

The default budget (five problems, 2 rounds of 2 Triton candidates, eager and torch.compile
baselines; max-autotune on request) took 411 s on an H100 with a fresh DB when issue 26 measured it
(each problem paid 24-28 s before its first candidate reached the GPU). Since then the cluster starts
once for the whole bench, each search's evaluators start their sandboxes while its baselines compile
(stopped while they are timed), and max-autotune is off unless asked for; benchmarks/RESULTS.md holds
the figure once measured. The JSON's `elapsed_s` (per problem, since the bench began), `startup_s` (a
search's start to its first candidate on a GPU) and `startup` (Ray start, evaluators up, baselines,
first result, and the judge's phases summed: kgen.search.loop.Search.startup), and bench.md's table of where
the seconds went, show where the time goes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

from sqlalchemy import select

from kgen.core.errors import KgenError
from kgen.store.db import Baseline, Candidate, Database, Evaluation, Run
from kgen.store.promotion import candidate_spread, promoted_best
from kgen.store.queries import correct_candidates

DEFAULT_PROBLEMS = ("softmax", "layernorm", "matmul", "conv2d", "conv_relu_maxpool")


def parse_problems(values: Optional[list[str]]) -> list[str]:
    """`--problems` as given (`a b`, `a,b`, or both), each once in order; none: DEFAULT_PROBLEMS."""
    names = [name.strip() for value in values or () for name in value.split(",")]
    return list(dict.fromkeys(n for n in names if n)) or list(DEFAULT_PROBLEMS)
# The caches each GPU-count pass gets afresh (environment variable -> folder in the pass's temporary folder).
PASS_CACHES = {"KGEN_CACHE_DIR": "kgen-cache", "TRITON_CACHE_DIR": "triton-cache"}


@contextlib.contextmanager
def pass_caches(gpus: int):
    """Fresh, empty caches for one GPU-count pass (kgen's builds, Triton's kernels), in a temporary folder
    removed after it: never under --out, whose report and DBs are what a reader (or a device call that
    returns a few files) takes away; the local cluster's workers inherit the environment."""
    saved = {name: os.environ.get(name) for name in PASS_CACHES}
    with tempfile.TemporaryDirectory(prefix=f"kgen-bench-{gpus}gpu-", ignore_cleanup_errors=True) as root:
        for name, folder in PASS_CACHES.items():
            os.environ[name] = str(Path(root) / folder)
        try:
            yield Path(root)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


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
    gpu_eval_s_median: Optional[float] = None  # one candidate's GPU stage, start to result
    startup_s: Optional[float] = None  # the run's start to its first candidate on a GPU (baselines, evaluator start)
    eval_span_s: Optional[float] = None  # the first candidate's GPU stage start to the last one's end
    elapsed_s: Optional[float] = None  # since the bench began, when this problem's search ended
    # where the search's seconds went (kgen.search.loop.Search.startup): its own start, and the judge's phases summed
    startup: Optional[dict] = None


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b else None


def quality_row(db: Database, run_id: int) -> QualityRow:
    with db.reader() as s:
        run = s.get(Run, run_id)
        base = s.scalars(select(Baseline).where(Baseline.problem_hash == run.problem_hash,
                                                Baseline.size == run.size, Baseline.device == run.device)
                         .order_by(Baseline.id.desc())).first()
    correct = correct_candidates(db, run_id=run_id)
    # the promoted best (kgen.store.promotion), as the leaderboard and export see it; without a GPU nothing is
    # timed, and the first correct one is shown, untimed
    best = promoted_best(sorted(correct, key=lambda c: c.id), candidate_spread)
    eager = base.eager_ms if base else None
    compiled = base.compile_ms if base else None
    autotune = base.compile_max_autotune_ms if base else None
    from kgen.problems.problem import load_problem
    from kgen.problems.roofline import compute_roofline, device_ceilings

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
    return sum(b - a for a, b in _union(intervals))


def gpu_interval(details: Optional[dict]) -> Optional[tuple[float, float]]:
    """When a candidate held its GPU (epoch s): the evaluation process's own window where the evaluator
    recorded it (details.gpu_start/gpu_end), else the evaluator actor's window around the evaluation
    (details.nodes.evaluation.start/end)."""
    details = details or {}
    if "gpu_start" in details and "gpu_end" in details:
        return details["gpu_start"], details["gpu_end"]
    evaluation = (details.get("nodes") or {}).get("evaluation") or {}
    if "start" in evaluation and "end" in evaluation:
        return evaluation["start"], evaluation["end"]
    return None


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of [start, end] intervals as disjoint, sorted intervals."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _overlap(gaps: list[tuple[float, float]], cover: list[tuple[float, float]]) -> float:
    """Seconds of the disjoint `gaps` that the disjoint `cover` overlaps."""
    return sum(max(0.0, min(b, d) - max(a, c)) for a, b in gaps for c, d in cover)


@dataclass
class GpuUseRow:
    """One GPU's use over one pass (every problem's search on that many GPUs), from the first candidate on
    any GPU to the last result: how much of that span it evaluated candidates (and of that, timed them,
    drew the reference, ran the judge's compile step), and why it stood idle the rest: another GPU still
    evaluating (the round's last candidates: a round ends when its last result is in), candidates still in
    their CPU compile stage (CUDA's nvcc), or nothing to do at all (the proposer, the next problem's
    baselines and start)."""

    gpus: Optional[int]  # the pass's GPU count (None: one pass, every GPU)
    gpu: str  # the Ray node (its id's first 8 characters) and the GPU ids the evaluator held
    evaluations: int
    span_s: float
    busy_s: float
    timing_s: float
    reference_s: float
    judge_compile_s: float
    idle_other_gpus_busy_s: float
    idle_compiles_s: float
    idle_nothing_s: float


def gpu_use_rows(db: Database, run_ids: Sequence[int], gpus: Optional[int] = None) -> list[GpuUseRow]:
    """Per GPU, its use over the runs of one pass (see GpuUseRow); [] where nothing ran on a GPU."""
    with db.reader() as s:
        rows = list(s.execute(select(Evaluation).join(Candidate).where(Candidate.run_id.in_(list(run_ids))))
                    .scalars())
    per_gpu: dict[str, list[Evaluation]] = {}
    compiles: list[tuple[float, float]] = []
    for e in rows:
        details = e.details or {}
        stage = details.get("compile_stage") if isinstance(details.get("compile_stage"), dict) else {}
        if isinstance(stage.get("start"), (int, float)) and isinstance(stage.get("end"), (int, float)):
            compiles.append((stage["start"], stage["end"]))
        where = (details.get("nodes") or {}).get("evaluation") or {}
        if e.device in (None, "cpu") or gpu_interval(details) is None or not where.get("gpus"):
            continue
        key = f"{str(where.get('node_id') or '?')[:8]} GPU {','.join(map(str, where['gpus']))}"
        per_gpu.setdefault(key, []).append(e)
    if not per_gpu:
        return []
    windows = {key: _union([gpu_interval(e.details) for e in evals]) for key, evals in per_gpu.items()}
    start = min(w[0][0] for w in windows.values())
    end = max(w[-1][1] for w in windows.values())
    compiling = _union(compiles)
    out = []
    for key in sorted(per_gpu):
        busy = windows[key]
        gaps = [(a, b) for a, b in zip([start] + [b for _, b in busy], [a for a, _ in busy] + [end]) if b > a]
        others = _union([i for other, w in windows.items() if other != key for i in w])
        by_others = _overlap(gaps, others)
        # of the gaps no other GPU filled: the part some candidate was still compiling on the CPUs
        lonely = _gaps_outside(gaps, others)
        by_compiles = _overlap(lonely, compiling)
        idle = sum(b - a for a, b in gaps)

        def phase(name: str, evals: list[Evaluation] = per_gpu[key]) -> float:
            return sum(float(((e.details or {}).get("phases") or {}).get(name) or 0.0) for e in evals)

        out.append(GpuUseRow(gpus=gpus, gpu=key, evaluations=len(per_gpu[key]), span_s=end - start,
                             busy_s=sum(b - a for a, b in busy), timing_s=phase("timing_s"),
                             reference_s=phase("reference_s"), judge_compile_s=phase("compile_s"),
                             idle_other_gpus_busy_s=by_others, idle_compiles_s=by_compiles,
                             idle_nothing_s=max(idle - by_others - by_compiles, 0.0)))
    return out


def _gaps_outside(gaps: list[tuple[float, float]], cover: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of the disjoint `gaps` that the disjoint `cover` does not overlap."""
    out = []
    for a, b in gaps:
        cursor = a
        for c, d in cover:
            if d <= cursor or c >= b:
                continue
            if c > cursor:
                out.append((cursor, c))
            cursor = max(cursor, d)
        if cursor < b:
            out.append((cursor, b))
    return out


def _epoch(when: dt.datetime) -> float:
    return when.replace(tzinfo=dt.timezone.utc).timestamp()  # the DB stores naive UTC


def throughput_row(db: Database, run_id: int, elapsed_s: Optional[float] = None) -> ThroughputRow:
    """Throughput from what the search stored: each evaluation records when its GPU work began and
    ended (see gpu_interval), each prebuild its compile_s."""
    with db.reader() as s:
        run = s.get(Run, run_id)
        rows = list(s.execute(select(Evaluation).join(Candidate).where(Candidate.run_id == run_id)).scalars())
    evaluated = [e for e in rows if e.outcome != "no_code"]
    intervals = [i for i in (gpu_interval(e.details) for e in evaluated) if i is not None]
    end = run.finished_at or max((e.created_at for e in rows), default=run.created_at)
    wall_s = max((end - run.created_at).total_seconds(), 1e-9)
    gpu_devices = max(1, int((run.settings or {}).get("gpus", 1) or 1))
    busy_share = timing_share = span = startup = None
    if intervals and run.device and run.device != "cpu":
        first_start = min(a for a, _ in intervals)  # from the first GPU work: "once round 1 is compiled"
        span = max(max(b for _, b in intervals) - first_start, 1e-9)
        startup = max(first_start - _epoch(run.created_at), 0.0)
        busy = _busy_seconds(intervals) if gpu_devices == 1 else sum(b - a for a, b in intervals)
        busy_share = busy / span / gpu_devices
        timed = sum(((e.details or {}).get("phases") or {}).get("timing_s", 0.0) for e in evaluated)
        timing_share = timed / span / gpu_devices
    compile_times = [e.compile_s for e in evaluated if e.compile_s is not None]
    gpu_evals = [b - a for a, b in intervals]
    return ThroughputRow(problem=run.problem, run_id=run_id, evaluated=len(evaluated),
                         correct=sum(e.outcome == "correct" for e in evaluated), wall_s=wall_s,
                         evaluated_per_min=len(evaluated) / (wall_s / 60.0), gpu_busy_share=busy_share,
                         compile_s_median=statistics.median(compile_times) if compile_times else None,
                         timing_share=timing_share, gpus=gpu_devices,
                         gpu_eval_s_median=statistics.median(gpu_evals) if gpu_evals else None,
                         startup_s=startup, eval_span_s=span, elapsed_s=elapsed_s,
                         startup=(run.settings or {}).get("startup"))


@dataclass
class ScalingRow:
    """One GPU count's pass over the problem set: evaluations per hour of evaluation span (the GPUs'
    working time, from each search's first candidate on a GPU to its last result: baselines and
    evaluator start left out, so a pass that found its baselines cached gains nothing) and of wall time."""

    gpus: int
    evaluated: int
    eval_span_s: float
    wall_s: float
    per_hour: float
    per_hour_wall: float
    vs_first: Optional[float] = None  # per_hour / the first count's per_hour
    vs_first_wall: Optional[float] = None  # per_hour_wall / the first count's (what a user waits for)


def scaling_rows(passes: dict[int, list[ThroughputRow]]) -> list[ScalingRow]:
    """One row per GPU count, in the order the passes ran."""
    rows = []
    for gpus, throughput in passes.items():
        evaluated = sum(t.evaluated for t in throughput)
        span = sum(t.eval_span_s or 0.0 for t in throughput)
        wall = sum(t.wall_s for t in throughput)
        rows.append(ScalingRow(gpus=gpus, evaluated=evaluated, eval_span_s=span, wall_s=wall,
                               per_hour=evaluated / span * 3600 if span else 0.0,
                               per_hour_wall=evaluated / wall * 3600 if wall else 0.0))
    for row in rows:
        row.vs_first = _ratio(row.per_hour, rows[0].per_hour) if rows else None
        row.vs_first_wall = _ratio(row.per_hour_wall, rows[0].per_hour_wall) if rows else None
    return rows


# The breakdown's columns: the search's own start (from its start, s), then the judge's phases summed over
# its evaluations (kgen.judge.judge: the reference, compile step, runner start, calibration, ablation, candidate
# import and verification, timing, and the kernel audit's profile).
STARTUP_COLUMNS = (("ray start", "ray_start_s"), ("evaluators up", "evaluators_s"), ("baselines", "baselines_s"),
                   ("first on GPU", "first_on_gpu_s"), ("first result", "first_result_s"))
JUDGE_COLUMNS = (("reference", "reference_s"), ("compile", "compile_s"), ("runner start", "runner_start_s"),
                 ("calibration", "calibration_s"), ("ablation", "ablation_s"), ("verify", ("import_s", "verify_s")),
                 ("timing", "timing_s"), ("audit", "profile_s"))


def breakdown(t: ThroughputRow) -> dict[str, Optional[float]]:
    """Where one problem's seconds went, by column name (None: not recorded)."""
    startup = t.startup or {}
    judge = startup.get("judge_s") or {}
    row: dict[str, Optional[float]] = {name: startup.get(key) for name, key in STARTUP_COLUMNS}
    for name, keys in JUDGE_COLUMNS:
        keys = keys if isinstance(keys, tuple) else (keys,)
        found = [judge[k] for k in keys if isinstance(judge.get(k), (int, float))]
        row[name] = sum(found) if found else None
    row["wall"] = t.wall_s
    return row


def breakdown_header() -> str:
    names = [*(n for n, _ in STARTUP_COLUMNS), *(n for n, _ in JUDGE_COLUMNS), "wall"]
    return ("where the seconds went (s; the first five from the search's start, the judge's phases summed over its "
            "evaluations)\n\n| problem | " + " | ".join(names) + " |\n|" + " --- |" * (len(names) + 1))


def breakdown_line(t: ThroughputRow) -> str:
    return f"| {t.problem} | " + " | ".join(_f(v, "{:.1f}") for v in breakdown(t).values()) + " |"


def _f(v: Optional[float], fmt: str = "{:.3f}") -> str:
    return "-" if v is None else fmt.format(v)


QUALITY_HEADER = ("| problem | eager ms | torch.compile ms | max-autotune ms | floor ms | kgen ms | vs eager "
                  "| vs compile | vs max-autotune | % roofline | best id | language |\n"
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
THROUGHPUT_HEADER = ("| problem | run | GPUs | evaluated | correct | wall s | evaluated/min | per GPU-hour "
                     "| GPU busy | of which timing | GPU eval s (median) | compile s (median) | startup s "
                     "| bench elapsed s |\n"
                     "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
GPU_USE_HEADER = ("| pass GPUs | GPU | evaluations | span s | busy | of which timing | reference | judge's compile "
                  "| idle: other GPU busy (round end) | idle: compiling on CPUs | idle: nothing to do (proposer, "
                  "baselines, start) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
SCALING_HEADER = ("| GPUs | evaluated | evaluation span s | wall s | per hour (span) | per hour (wall) "
                  "| vs first (span) | vs first (wall) |\n| --- | --- | --- | --- | --- | --- | --- | --- |")


def quality_line(q: QualityRow) -> str:
    return (f"| {q.problem} | {_f(q.eager_ms)} | {_f(q.compile_ms)} | {_f(q.max_autotune_ms)} | "
            f"{_f(q.floor_ms)} | {_f(q.best_ms)} | {_f(q.speedup_eager, '{:.2f}x')} | "
            f"{_f(q.speedup_compile, '{:.2f}x')} | {_f(q.speedup_max_autotune, '{:.2f}x')} | "
            f"{_f(q.roofline_pct, '{:.0f}%')} | {q.best_id or '-'} | {q.best_language or '-'} |")


def throughput_line(t: ThroughputRow) -> str:
    return (f"| {t.problem} | {t.run_id} | {t.gpus} | {t.evaluated} | {t.correct} | {t.wall_s:.0f} | "
            f"{t.evaluated_per_min:.1f} | {t.evaluated_per_min * 60 / t.gpus:.0f} | {_f(t.gpu_busy_share, '{:.0%}')} | "
            f"{_f(t.timing_share, '{:.0%}')} | {_f(t.gpu_eval_s_median, '{:.1f}')} | "
            f"{_f(t.compile_s_median, '{:.1f}')} | {_f(t.startup_s, '{:.0f}')} | {_f(t.elapsed_s, '{:.0f}')} |")


def gpu_use_line(g: GpuUseRow) -> str:
    def share(v: float) -> str:
        return f"{v / g.span_s:.0%}" if g.span_s > 0 else "-"

    return (f"| {g.gpus if g.gpus is not None else 'all'} | {g.gpu} | {g.evaluations} | {g.span_s:.0f} | "
            f"{share(g.busy_s)} | {share(g.timing_s)} | {share(g.reference_s)} | {share(g.judge_compile_s)} | "
            f"{share(g.idle_other_gpus_busy_s)} | {share(g.idle_compiles_s)} | {share(g.idle_nothing_s)} |")


def scaling_line(s: ScalingRow) -> str:
    return (f"| {s.gpus} | {s.evaluated} | {s.eval_span_s:.0f} | {s.wall_s:.0f} | {s.per_hour:.0f} | "
            f"{s.per_hour_wall:.0f} | {_f(s.vs_first, '{:.2f}x')} | {_f(s.vs_first_wall, '{:.2f}x')} |")


def markdown(quality: list[QualityRow], throughput: list[ThroughputRow], header: str,
             scaling: Sequence[ScalingRow] = (), gpu_use: Sequence[GpuUseRow] = ()) -> str:
    if len(scaling) > 1:  # one row per problem and pass: say which pass (GPU count) each row is
        gpus_of_run = {t.run_id: t.gpus for t in throughput}
        quality = [dataclasses.replace(q, problem=f"{q.problem} ({gpus_of_run.get(q.run_id, '?')} GPU)")
                   for q in quality]
        throughput_labelled = [dataclasses.replace(t, problem=f"{t.problem} ({t.gpus} GPU)") for t in throughput]
    else:
        throughput_labelled = throughput
    lines = [header, "", QUALITY_HEADER, *map(quality_line, quality), "", THROUGHPUT_HEADER,
             *map(throughput_line, throughput), "", breakdown_header(), *map(breakdown_line, throughput_labelled)]
    if gpu_use:  # shares of each pass's span (from the first candidate on a GPU to the last result)
        lines += ["", GPU_USE_HEADER, *map(gpu_use_line, gpu_use)]
    if scaling:
        lines += ["", SCALING_HEADER, *map(scaling_line, scaling)]
    return "\n".join(lines) + "\n"


def write_report(out_dir: Path, quality: list[QualityRow], throughput: list[ThroughputRow], header: str,
                 scaling: Sequence[ScalingRow] = (), complete: bool = True,
                 gpu_use: Sequence[GpuUseRow] = ()) -> Path:
    """bench.json and bench.md as they stand (`complete` False: more problems are still to come). Each
    file is written whole and renamed into place, so a run killed mid-write leaves the last version."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {"header": header, "when": dt.datetime.now().isoformat(), "complete": complete,
              "quality": [asdict(q) for q in quality], "throughput": [asdict(t) for t in throughput],
              "scaling": [asdict(s) for s in scaling], "gpu_use": [asdict(g) for g in gpu_use]}
    for name, text in (("bench.json", json.dumps(report, indent=1)),
                       ("bench.md", markdown(quality, throughput, header, scaling, gpu_use))):
        partial = out_dir / f".{name}.partial"
        partial.write_text(text)
        partial.replace(out_dir / name)
    return out_dir / "bench.md"


def _header(problems: list[str], *, rounds: int, candidates: int, seed: int, language: str, max_autotune: bool,
            gpu_counts: Sequence[Optional[int]]) -> str:
    import platform

    import torch
    import triton

    from kgen import __version__

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (no timings)"
    options = "".join(f" --problems {p}" for p in problems)
    options += f" --rounds {rounds} --candidates {candidates} --seed {seed} --language {language}"
    options += " --max-autotune" if max_autotune else ""
    options += "".join(f" --gpus {g}" for g in gpu_counts if g is not None)
    return (f"## kgen bench: {device}, torch {torch.__version__}, triton {triton.__version__}, kgen {__version__}, "
            f"python {platform.python_version()}\n\n`kgen bench{options}`")


def problem_summary(t: ThroughputRow) -> str:
    """One plain line on a finished problem's search, for the console beside its quality row."""
    parts = [f"{t.evaluated} evaluated ({t.correct} correct) in {t.wall_s:.0f} s"]
    if t.startup_s is not None:
        parts.append(f"first candidate on a GPU after {t.startup_s:.0f} s")
    if t.gpu_busy_share is not None:
        parts.append(f"{t.evaluated_per_min * 60 / t.gpus:.0f} per GPU-hour, GPU busy {t.gpu_busy_share:.0%}")
    if t.elapsed_s is not None:
        parts.append(f"{t.elapsed_s:.0f} s since the bench began")
    seconds = ", ".join(f"{name} {v:.1f}" for name, v in breakdown(t).items() if v is not None and name != "wall")
    return f"  {t.problem} (run {t.run_id}): " + "; ".join(parts) + (f"\n    seconds: {seconds}" if seconds else "")


def run_bench(problems: list[str], *, rounds: int, candidates: int, seed: int, out_dir: Path, db: str | None,
              language: str = "triton", timeout_s: float = 300.0, quiet: bool = True,
              ray_address: Optional[str] = None, max_autotune: bool = False,
              gpu_counts: Sequence[Optional[int]] = (None,),
              on_problem: Callable[[QualityRow, ThroughputRow], None] = lambda q, t: None) -> tuple[Path, str]:
    """One offline search per problem (per GPU count) on a fixed seed and budget, on one Ray cluster
    per count; `on_problem` gets each problem's rows the moment its search ends, and the report is
    rewritten then."""
    from kgen.search import cluster as ray_cluster
    from kgen.search.loop import SearchConfig, run_search
    from kgen.search.progress import make_progress
    from kgen.store.db import open_db

    if len(gpu_counts) > 1 and db is not None:
        raise KgenError("several --gpus passes each write a results DB of their own under --out; leave out --db")
    for gpus in gpu_counts:
        if gpus is not None:
            ray_cluster.check_gpu_count(gpus, ray_address)
    started = time.monotonic()
    header = _header(problems, rounds=rounds, candidates=candidates, seed=seed, language=language,
                     max_autotune=max_autotune, gpu_counts=gpu_counts)
    quality: list[QualityRow] = []
    throughput: list[ThroughputRow] = []
    passes: dict[Optional[int], list[ThroughputRow]] = {}
    gpu_use: list[GpuUseRow] = []
    for gpus in gpu_counts:
        # A pass of its own: its own DB (the offline proposer skips any source a DB has seen, so a
        # shared one would give later passes other candidates) and caches (pass_caches), so every pass
        # does the same work from the same cold start.
        with pass_caches(gpus) if gpus is not None else contextlib.nullcontext():
            database = open_db(db or str(out_dir / ("bench.db" if gpus is None else f"bench-{gpus}gpu.db")))
            try:
                connecting = time.monotonic()
                cluster = ray_cluster.connect(ray_address, num_gpus=gpus)
                ray_start_s = round(time.monotonic() - connecting, 3)  # once per pass, before its first search
                for problem in problems:
                    config = SearchConfig(problem=problem, rounds=rounds, candidates=candidates, proposer="offline",
                                          language=language, seed=seed, timeout_s=timeout_s,
                                          baseline_max_autotune=max_autotune,
                                          ncu_budget_s=0)  # throughput is the judge's: no Nsight Compute pauses
                    summary = run_search(database, config, progress=make_progress(quiet), cluster=cluster)
                    quality.append(quality_row(database, summary.run_id))
                    throughput.append(throughput_row(database, summary.run_id, time.monotonic() - started))
                    if ray_start_s is not None:  # the first search of the pass waited for the cluster
                        throughput[-1].startup = dict(throughput[-1].startup or {}, ray_start_s=ray_start_s)
                        ray_start_s = None
                    passes.setdefault(gpus, []).append(throughput[-1])
                    write_report(out_dir, quality, throughput, header, complete=False, gpu_use=gpu_use)
                    on_problem(quality[-1], throughput[-1])
                gpu_use += gpu_use_rows(database, [t.run_id for t in passes.get(gpus, [])], gpus)
            finally:
                ray_cluster.shutdown()
                database.close()
    scaling = scaling_rows(passes) if len(gpu_counts) > 1 else []
    path = write_report(out_dir, quality, throughput, header, scaling, gpu_use=gpu_use)
    return path, path.read_text()
