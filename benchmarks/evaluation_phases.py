"""Each evaluation of a search's newest run, one line: when it started (s after the first), its wall, its judge
phases, its timing (runs, warm-up runs, whether it was redone after a `suspicious` first timing), and the waits for
sandboxes it had (issue 26: where two evaluators per GPU spent their seconds).

    python3 benchmarks/evaluation_phases.py DB
"""

from __future__ import annotations

import json
import sqlite3
import sys


def main() -> None:
    c = sqlite3.connect(sys.argv[1])
    run_id = c.execute("select max(id) from runs").fetchone()[0]
    rows = c.execute("select e.candidate_id, e.details from evaluations e join candidates k on k.id = e.candidate_id "
                     "where k.run_id = ? order by e.id", (run_id,)).fetchall()
    first = None
    for cid, details in rows:
        d = json.loads(details or "{}")
        where = (d.get("nodes") or {}).get("evaluation") or {}
        start, end = where.get("start"), where.get("end")
        first = first if first is not None else start
        timing = d.get("timing") or {}
        waits: dict[str, float] = {}
        for stage, kind, seconds in d.get("steps") or []:
            if "start" in stage and seconds > 0.05:
                waits[f"{stage}/{kind}"] = round(waits.get(f"{stage}/{kind}", 0) + seconds, 2)
        phases = {k: v for k, v in (d.get("phases") or {}).items() if v >= 0.05}
        print(f"#{cid} at {start - first:.1f} s, {end - start:.2f} s, gpus {where.get('gpus')}"
              f"{' lane' if where.get('lane') else ''}: {phases}; timing runs {timing.get('runs')} "
              f"(warm-up {timing.get('warmup_runs')}), judge wall median {timing.get('judge_wall_median_ms')} ms, "
              f"redone {'timing_first' in d}; gpu_lock {d.get('gpu_lock')}; waits {waits}")


if __name__ == "__main__":
    main()
