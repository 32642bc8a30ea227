"""Where a collection run's time went, from its results DB alone (read-only):
`python benchmarks/collection_where.py RESULTS.db [RUN_ID]`.

Prints the evaluators' busy share, how long the GPU waited for its first candidate, the CUDA builds the CPU
compile stage left to the GPU's compile step (each then built on the evaluator's critical path), the judge's
phases summed over the evaluations, and the baselines' pace. Used on the H100 240-entry collection (issue 30).
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
from datetime import datetime


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()  # stored as naive UTC; only differences are used


def main() -> None:
    conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
    run = int(sys.argv[2]) if len(sys.argv) > 2 else conn.execute("SELECT max(id) FROM runs").fetchone()[0]
    rows = conn.execute("SELECT c.language, e.details FROM evaluations e JOIN candidates c "
                        "ON c.id = e.candidate_id WHERE c.run_id = ? ORDER BY e.id", (run,)).fetchall()
    total = conn.execute("SELECT count(*) FROM candidates WHERE run_id = ?", (run,)).fetchone()[0]
    evaluations, stage_starts, phases, left_to_gpu, builds_s = [], [], {}, [], []
    for language, text in rows:
        details = json.loads(text)
        stage = details.get("compile_stage") or {}
        if stage.get("start"):
            stage_starts.append(stage["start"])
        builds_s += [b["s"] for b in stage.get("builds") or [] if not b.get("cached") and "s" in b]
        where = (details.get("nodes") or {}).get("evaluation") or {}
        if where.get("start") and where.get("end"):
            evaluations.append((where["start"], where["end"]))
            judged = details.get("phases") or {}
            for phase, seconds in judged.items():
                phases[phase] = phases.get(phase, 0.0) + (seconds or 0.0)
            if language == "cuda" and not stage.get("builds") and judged.get("compile_s", 0) > 20:
                left_to_gpu.append(judged["compile_s"])  # its GPU compile step built it: the stage did not
    if not evaluations:
        print(f"run {run}: no evaluation reached an evaluator ({len(rows)} of {total} entries evaluated)")
        return
    start = min(stage_starts + [s for s, _ in evaluations])
    end = max(e for _, e in evaluations)
    busy = sum(e - s for s, e in evaluations)
    span = end - start
    print(f"run {run}: {len(rows)} of {total} entries evaluated, {len(evaluations)} on an evaluator; "
          f"{span:.0f} s from the first compile-stage start to the last evaluation's end "
          f"({len(rows) / span * 3600:.0f} evaluations per hour over that span)")
    print(f"evaluators busy {busy:.0f} s ({busy / span:.0%} of the span, summed over evaluators); "
          f"first candidate on an evaluator {min(s for s, _ in evaluations) - start:.0f} s after the start")
    if builds_s:
        print(f"CPU compile stage: {len(builds_s)} CUDA builds, median {statistics.median(builds_s):.0f} s, "
              f"max {max(builds_s):.0f} s")
    print(f"CUDA builds the compile stage left to the GPU's compile step: {len(left_to_gpu)}, "
          f"{sum(left_to_gpu):.0f} s of evaluator time")
    summed = sorted(phases.items(), key=lambda kv: -kv[1])
    print("judge phases summed: " + ", ".join(f"{k} {v:.0f} s" for k, v in summed))
    stored = [_epoch(t) for (t,) in conn.execute("SELECT created_at FROM baselines ORDER BY created_at")]
    if len(stored) > 1:
        print(f"baselines: {len(stored)} stored, one every {(stored[-1] - stored[0]) / (len(stored) - 1):.1f} s "
              "between the first and the last")


if __name__ == "__main__":
    main()
