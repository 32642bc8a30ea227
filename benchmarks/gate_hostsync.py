"""The gate clock on forwards that wait on the GPU inside (issue 30: a leaderboard entry of that shape came out
`suspicious` on the H100). Evaluates each candidate with the judge (bubblewrap, the gate clock) and writes, per
evaluation, its outcome and the gate report's per-run figures: judge ms, runner ms, their difference, how the
gate opened, the reply lag; and the do-nothing runs' figures beside them.
  python3 benchmarks/gate_hostsync.py OUT_DIR [problem=candidate.py[@size]] ...
"""
import json
import statistics
import sys
import time
from pathlib import Path


def summary(result):
    result = vars(result)
    details = result.get("details") or {}
    gate = details.get("judge_clock") or {}
    samples = gate.get("samples") or []
    nulls = gate.get("null_samples") or []
    diffs = [a - b for a, b, *_ in samples]
    null_diffs = [a - b for a, b in nulls]
    quart = (lambda v: [round(x, 4) for x in statistics.quantiles(v, n=4)] if len(v) >= 4 else v)
    return {"outcome": result.get("outcome"), "message": (result.get("message") or "")[:600],
            "runtime_ms": result.get("runtime_ms"),
            "gate": {k: v for k, v in gate.items() if k not in ("samples", "null_samples", "end")},
            "diff_quartiles_ms": quart(diffs), "null_diff_quartiles_ms": quart(null_diffs),
            "opened_by": sorted({s[2] for s in samples}), "first_runs": samples[:8], "null_first": nulls[:6],
            "phases": details.get("phases"), "timing": details.get("timing")}


def main():
    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate
    from kgen.judge.sandbox import SandboxMode
    from kgen.judge.spares import SpareRunners

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    spares = SpareRunners(SandboxMode.BWRAP)
    results = {}
    try:
        for spec in sys.argv[2:]:
            problem, rest = spec.split("=", 1)
            path, _, size = rest.partition("@")
            settings = EvalSettings(device="cuda", size=size or "small", timeout_s=300)
            started = time.perf_counter()
            result = evaluate_candidate(problem, Path(path).read_text(), settings, spares)
            results[spec] = dict(summary(result), wall_s=round(time.perf_counter() - started, 1))
            gate = results[spec]["gate"]
            passed = gate.get("from_pass") or {}
            print(spec, results[spec]["outcome"], "gap", gate.get("gap_ms"), "thr", gate.get("threshold_ms"),
                  "done runs", gate.get("done_runs"), "end gap", gate.get("end_gap_ms"),
                  "wake", passed.get("wake_median_ms"), passed.get("null_wake_median_ms"),
                  results[spec]["diff_quartiles_ms"], results[spec]["null_diff_quartiles_ms"],
                  results[spec]["message"][:200], flush=True)
            (out / "gate_hostsync.json").write_text(json.dumps(results, indent=1, default=str))
    finally:
        spares.close()


if __name__ == "__main__":
    main()
