"""Where a search's wall time went between its candidates (issue 26), from its results DB alone: when each
evaluation ran on its evaluator (details.nodes.evaluation start/end), the gaps between them (the evaluator idle:
nothing compiled yet, a Nsight Compute profile, the driver busy), the first candidate against the rest, and the
judge's phases per candidate.

    python3 benchmarks/search_timeline.py RESULTS.db [--run ID] [--wall S]

`--wall`: the command's wall seconds (Python start to exit), to say what lies outside the evaluations.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--run", type=int, default=None, help="default: the newest run")
    parser.add_argument("--wall", type=float, default=None)
    args = parser.parse_args()
    c = sqlite3.connect(args.db)
    run_id = args.run or c.execute("select max(id) from runs").fetchone()[0]
    settings = json.loads(c.execute("select settings from runs where id = ?", (run_id,)).fetchone()[0] or "{}")
    startup = settings.get("startup", {})
    rows = c.execute("select e.candidate_id, e.outcome, e.details from evaluations e join candidates k "
                     "on k.id = e.candidate_id where k.run_id = ? and e.outcome != 'no_code'", (run_id,)).fetchall()
    spans, phases = [], []
    setups: dict[str, list[dict]] = {"compile_setup": [], "runner_setup": []}  # the sandboxes' setup steps
    for candidate_id, outcome, details in rows:
        d = json.loads(details or "{}")
        for key, kept in setups.items():
            if isinstance(d.get(key), dict) and d[key]:
                kept.append(d[key])
        ev = (d.get("nodes") or {}).get("evaluation") or {}
        if isinstance(ev.get("start"), (int, float)) and isinstance(ev.get("end"), (int, float)):
            spans.append((ev["start"], ev["end"], candidate_id, outcome, d.get("phases") or {}))
    if not spans:
        print(f"run {run_id}: no evaluation with its start and end recorded")
        return
    spans.sort()
    first_start, last_end = spans[0][0], max(s[1] for s in spans)
    # the union of the evaluations' spans (several evaluators overlap): [start, end, who ended it, who began it]
    merged: list[list] = []
    for start, end, candidate_id, *_ in spans:
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1][1:3] = [end, candidate_id]
        else:
            merged.append([start, end, candidate_id, candidate_id])
    busy = sum(end - start for start, end, *_ in merged)
    print(f"run {run_id}: {len(spans)} evaluations from the first's start to the last's end: "
          f"{last_end - first_start:.1f} s, some evaluator busy {busy:.1f} s ({busy / (last_end - first_start):.0%})")
    gaps = [(merged[k + 1][0] - merged[k][1], merged[k][2], merged[k + 1][3]) for k in range(len(merged) - 1)]
    idle = [g for g in gaps if g[0] > 0.5]
    print(f"  no evaluator busy: {sum(g for g, *_ in gaps):.1f} s in all; gaps over 0.5 s: "
          + (", ".join(f"{g:.1f} s after #{a} (before #{b})" for g, a, b in idle) or "none"))
    durations = [end - start for start, end, *_ in spans]
    later = durations[1:]
    median, mean = (statistics.median(later), statistics.fmean(later)) if later else (0.0, 0.0)
    print(f"  first evaluation {durations[0]:.1f} s; the others: median {median:.2f} s, mean {mean:.2f} s")
    for _start, _end, _cid, _outcome, p in spans[1:]:
        phases.append(p)
    names = sorted({n for p in phases for n in p}, key=lambda n: -sum(p.get(n, 0) for p in phases))
    if phases:
        print("  judge phases, mean per evaluation after the first (s): "
              + ", ".join(f"{n} {statistics.fmean(p.get(n, 0.0) for p in phases):.2f}" for n in names))
        first = spans[0][4]
        print("  the first evaluation's phases (s): " + ", ".join(f"{n} {v:.2f}" for n, v in first.items()))
    for key, kept in setups.items():  # where the compile step's and the runner's setup went (issue 26)
        if kept:
            steps = list(dict.fromkeys(n for k in kept for n in k))
            print(f"  {key}, mean of {len(kept)} (s): " + ", ".join(
                f"{n} {statistics.fmean(k.get(n, 0.0) for k in kept):.3f}" for n in steps)
                + f"; sum {statistics.fmean(sum(k.values()) for k in kept):.3f}")
    if startup:
        print("  startup (s, from the search's start): " + ", ".join(
            f"{k} {v}" for k, v in startup.items() if k != "judge_s"))
    if args.wall is not None:
        inside = (last_end - first_start)
        print(f"  the command's wall {args.wall:.1f} s: {args.wall - inside:.1f} s outside the evaluations' span "
              "(Python start, Ray start, the first candidate's way to the evaluator, the end and Ray's shutdown)")


if __name__ == "__main__":
    main()
