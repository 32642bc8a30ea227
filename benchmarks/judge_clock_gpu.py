"""The judge's clock check on the GPU (issue 28): honest kernels are never flagged, timing lies are caught.

    python benchmarks/judge_clock_gpu.py --out DIR [--budget-s 420] [--runs 3]

Under one deadline, in this order (each evaluation is appended to DIR/judge_clock.jsonl as it ends, so a
cut-off call keeps what it did):
1. the CUDA starters' extensions built in parallel on the CPU (kgen.judge.evaluate.prebuild), so the GPU's
   compile steps find them;
2. the class-8 attacks (tests/attacks/c8_*): the five the pins catch (identity, and the C level for the
   ctypes-rewritten elapsed_time), full size, then the clock matrix (tests/attack_expectations.CLOCK_MATRIX: a
   re-recorded start event, shaving 0-50%, on softmax small (~50 µs) and full (~1 ms), 20 launches each);
3. every Triton and CUDA starter of the bundled problems, full size (honest, so never flagged), and the
   Triton softmax and layernorm starters at the small size (short kernels), up to --runs times each,
   while the budget lasts.
Then a table per candidate: outcome(s), runtime, the clock gap (the candidate's time beside its events
minus a do-nothing run's), the noise measured, the threshold, and for attacks what was expected.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

PROBLEMS = ("softmax", "layernorm", "matmul", "conv2d", "conv_relu_maxpool")
PINNED_ATTACKS = ("c8_event_setattr", "c8_event_real_dict", "c8_channel_code_swap", "c8_profile_hook",
                  "c8_ctypes_elapsed", "c8_side_stream_tail")


def _starters() -> list[Path]:
    return [p for problem in PROBLEMS for p in sorted((REPO / "problems" / "starters" / problem).glob("*.py"))
            if p.name.startswith(("triton_", "cuda_"))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=".")
    parser.add_argument("--budget-s", type=float, default=420.0)
    parser.add_argument("--runs", type=int, default=3, help="rounds of the honest starters (0: none)")
    parser.add_argument("--sizes", nargs="+", default=["small", "full"], help="the clock matrix's sizes")
    args = parser.parse_args()
    deadline = time.monotonic() + args.budget_s

    import torch
    from attack_expectations import CLOCK_MATRIX, GPU_EXPECTED, shave_must_be_caught, shave_variant

    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate, prebuild
    from kgen.judge.sandbox import SandboxMode, check_sandbox
    from kgen.judge.spares import SpareRunners
    from kgen.judge.timing import CLOCK_FLOOR_MS

    if not torch.cuda.is_available():
        print("SKIP: no CUDA GPU here", flush=True)
        return
    mode = SandboxMode.BWRAP
    check_sandbox(mode)
    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}.{minor}"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "judge_clock.jsonl"

    def settings(size: str) -> EvalSettings:
        return EvalSettings(device="cuda", size=size, timeout_s=300, cuda_arch=arch, sandbox=str(mode))

    started = time.monotonic()
    cuda = [p for p in _starters() if p.name.startswith("cuda_")]
    with ThreadPoolExecutor(len(cuda)) as pool:  # nvcc in parallel, before any timing
        built = list(pool.map(lambda p: prebuild(p.parent.name, p.read_text(), settings("full")), cuda))
    for path, result in zip(cuda, built):
        if result is not None:
            print(f"prebuild {path.parent.name}/{path.name}: {result.outcome}: {result.message[:300]}", flush=True)
    print(f"CUDA starters prebuilt in {time.monotonic() - started:.0f} s", flush=True)

    spares = SpareRunners(mode)
    rows: list[dict] = []

    def evaluate(kind: str, label: str, problem: str, source: str, size: str, expected: str = "") -> None:
        if time.monotonic() > deadline - 20:
            print(f"skipped (budget): {label} {size}", flush=True)
            return
        begun = time.monotonic()
        try:
            r = evaluate_candidate(problem, source, settings(size), spares)
        except Exception as e:  # noqa: BLE001 - a judge that raises is itself a finding: reported, and go on
            print(f"{label} {size}: the judge raised {e!r}", flush=True)
            return
        t = r.details.get("timing") or {}
        row = {"kind": kind, "label": label, "size": size, "outcome": r.outcome, "expected": expected,
               "runtime_ms": r.runtime_ms, "gap_ms": t.get("clock_gap_ms"), "noise_ms": t.get("clock_noise_ms"),
               "threshold_ms": t.get("clock_threshold_ms"), "runs": t.get("runs"),
               "null_runs": len(r.details.get("null_beside_ms") or []), "eval_s": round(time.monotonic() - begun, 1),
               "message": r.message[:400],
               # the CUPTI-profiled forward's kernel time (warm L2), for the watched-vs-timed check's margin
               "watched_ms": round(sum(k.get("us", 0) for k in r.details.get("gpu_kernels") or []
                                       if isinstance(k, dict)) / 1e3, 4) or None,
               "null_first_median_ms": _median(r.details.get("null_first_beside_ms")),
               "null_second_median_ms": _median(r.details.get("null_beside_ms"))}
        rows.append(row)
        with open(log, "a") as f:
            f.write(json.dumps(row, default=str) + "\n")
        print(json.dumps({k: row[k] for k in ("label", "size", "outcome", "runtime_ms", "watched_ms", "gap_ms",
                                              "noise_ms", "threshold_ms", "runs", "eval_s")}, default=str), flush=True)
        if r.outcome not in ("correct", "suspicious", "static_reject"):
            print(f"  {r.message[:1500]}", flush=True)

    honest = [(p.parent.name, f"{p.parent.name}/{p.name}", p.read_text()) for p in _starters()]
    attacks = REPO / "tests" / "attacks"
    for name in PINNED_ATTACKS:
        evaluate("attack", name, "softmax", (attacks / f"{name}.py").read_text(), "full",
                 "/".join(sorted(GPU_EXPECTED[name])))
    honest_ms: dict[tuple[str, str], tuple[float, float]] = {}
    for size in args.sizes:
        for attack, share, ms in CLOCK_MATRIX:
            label = f"{attack} shave {share:.0%}+{ms}ms"
            evaluate("clock", label, "softmax", shave_variant((attacks / f"{attack}.py").read_text(), share, ms), size)
            last = rows[-1] if rows and rows[-1]["label"] == label and rows[-1]["size"] == size else None
            if last is None:
                continue
            if share == 0 and ms == 0:
                last["expected"] = "correct"
                if last["runtime_ms"]:
                    honest_ms[attack, size] = (last["runtime_ms"], last["watched_ms"] or 0.0)
            elif (attack, size) in honest_ms:
                caught = shave_must_be_caught(attack, share, ms, size, *honest_ms[attack, size][:1], CLOCK_FLOOR_MS,
                                              honest_ms[attack, size][1])
                last["expected"] = "suspicious" if caught else "(below the floor: not claimed)"
    for _ in range(args.runs):
        for problem, label, source in honest:
            evaluate("honest", label, problem, source, "full", "correct")
        for problem, label, source in honest:
            if problem in ("softmax", "layernorm") and label.split("/")[1].startswith("triton_"):
                evaluate("honest", label, problem, source, "small", "correct")
    spares.close()
    _report(rows, out, torch.cuda.get_device_name(), torch.__version__, time.monotonic() - started)


def _median(values) -> float | None:
    import statistics

    return round(statistics.median(values), 4) if values else None


def _report(rows: list[dict], out: Path, device: str, torch_version: str, wall_s: float) -> None:
    lines = [f"judge clock check on {device} (torch {torch_version}), {len(rows)} evaluations in {wall_s:.0f} s",
             "", "| kind | candidate | size | outcome | expected | runtime ms | gap ms | noise ms | threshold ms | "
             "gap/threshold | runs | null runs |", "|" + " --- |" * 12]
    problems = []
    for r in rows:
        ratio = (f"{r['gap_ms'] / r['threshold_ms']:.2f}" if r["gap_ms"] is not None and r["threshold_ms"] else "-")
        lines.append(f"| {r['kind']} | {r['label']} | {r['size']} | {r['outcome']} | {r['expected'] or '-'} | "
                     f"{_num(r['runtime_ms'])} | {_num(r['gap_ms'])} | {_num(r['noise_ms'])} | "
                     f"{_num(r['threshold_ms'])} | {ratio} | {r['runs']} | {r['null_runs']} |")
        if _mismatch(r):
            problems.append(f"{r['label']} ({r['size']}): {r['outcome']}, expected {r['expected']}: "
                            f"{r['message'][:200]}")
    honest = [r for r in rows if r["expected"] == "correct" and r["gap_ms"] is not None]
    if honest:
        worst = max(honest, key=lambda r: r["gap_ms"] / r["threshold_ms"])
        lines += ["", f"honest runs: {len(honest)}, flagged: {sum(r['outcome'] == 'suspicious' for r in honest)}; "
                      f"largest gap/threshold {worst['gap_ms'] / worst['threshold_ms']:.2f} ({worst['label']}, "
                      f"{worst['size']}: gap {_num(worst['gap_ms'])} ms, threshold {_num(worst['threshold_ms'])} ms)"]
        top = max(r["gap_ms"] for r in honest)
        lines.append(f"largest honest gap {top:.4g} ms (kgen.judge.timing.CLOCK_FLOOR_MS is {_floor()} ms; above 1.5x "
                     "the largest honest gap keeps honest runs clear, below the smallest shave meant to be caught)")
        firsts = [(r["null_first_median_ms"], r["null_second_median_ms"]) for r in honest
                  if r["null_first_median_ms"] is not None and r["null_second_median_ms"] is not None]
        if firsts:
            lines.append("null runs, median of per-evaluation medians: first of a pair "
                         f"{_median([a for a, _ in firsts])} ms, second {_median([b for _, b in firsts])} ms")
    lines += ["", "MISMATCHES:" if problems else "every outcome as expected", *problems]
    text = "\n".join(lines) + "\n"
    (out / "judge_clock.md").write_text(text)
    print(text, flush=True)


def _mismatch(row: dict) -> bool:
    """An outcome other than the expected one; a shave below the floor may be anything but an error."""
    expected = row["expected"]
    if expected.startswith("("):
        return row["outcome"] not in ("correct", "suspicious")
    return bool(expected) and row["outcome"] not in expected.split("/")


def _floor() -> float:
    from kgen.judge.timing import CLOCK_FLOOR_MS

    return CLOCK_FLOOR_MS


def _num(value) -> str:
    return "-" if value is None else f"{value:.4g}"


if __name__ == "__main__":
    main()
