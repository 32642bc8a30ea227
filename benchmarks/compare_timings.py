"""The same candidates' timed medians in two searches' DBs (issue 26): whether judging two candidates per GPU (their
untimed work side by side, their timed runs apart: kgen.judge.gpu_lock) moves what the judge measures. Candidates are
matched by their source's hash; each search's newest run, or --run-a / --run-b.

    python3 benchmarks/compare_timings.py A.db B.db [--labels one-per-gpu two-per-gpu]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics


def timings(path: str, run_id: int | None) -> dict[str, tuple[int, float, dict]]:
    """source hash -> (candidate id, median ms, timing details) of the run's correct evaluations."""
    c = sqlite3.connect(path)
    run_id = run_id or c.execute("select max(id) from runs").fetchone()[0]
    rows = c.execute("select k.id, k.source_hash, e.runtime_ms, e.details from evaluations e join candidates k "
                     "on k.id = e.candidate_id where k.run_id = ? and e.outcome = 'correct' "
                     "and e.runtime_ms is not null", (run_id,)).fetchall()
    out = {}
    for cid, source_hash, ms, details in rows:
        timing = (json.loads(details or "{}").get("timing") or {})
        out[source_hash] = (cid, float(ms), timing)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--run-a", type=int, default=None)
    parser.add_argument("--run-b", type=int, default=None)
    parser.add_argument("--labels", nargs=2, default=["A", "B"])
    args = parser.parse_args()
    a, b = timings(args.a, args.run_a), timings(args.b, args.run_b)
    common = sorted(set(a) & set(b), key=lambda h: a[h][0])
    if not common:
        print("no candidate in both")
        return
    la, lb = args.labels
    print(f"| candidate ({la} / {lb}) | {la} median ms | {lb} median ms | {lb} / {la} | {la} p10-p90 ms | "
          f"{lb} p10-p90 ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    ratios = []
    for h in common:
        (ca, ma, ta), (cb, mb, tb) = a[h], b[h]
        ratios.append(mb / ma)
        spread = lambda t: f"{t.get('p10_ms', 0):.4f}-{t.get('p90_ms', 0):.4f}"
        print(f"| {ca} / {cb} | {ma:.4f} | {mb:.4f} | {mb / ma:.4f} | {spread(ta)} | {spread(tb)} |")
    print(f"{len(common)} candidates in both: {lb}/{la} median ratio {statistics.median(ratios):.4f}, "
          f"min {min(ratios):.4f}, max {max(ratios):.4f}")


if __name__ == "__main__":
    main()
