"""What profiling cost a search, per round, and what the next round's prompt showed (issue 17).

    python benchmarks/profile_cost.py DB [RUN_ID] [--prompt OUT.txt]

For the run (default: the newest): per round, the candidates, the seconds the judge spent in its
profile phase (details.phases.profile_s: the profiled forward, the Kineto trace, Triton's statistics),
the GPU-stage seconds (eval_s) and the share; the run's wall time and the profile share of it; the
Nsight Compute profiles of each round's candidates (kgen.judge.ncu_profile: how many, failed, seconds) and
their share of the run; the telemetry's throttling flags. `--prompt` renders the propose prompt the
next round would get from this DB (the real template, history and profiles), the example the README
shows.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict

from sqlalchemy import select


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("run_id", nargs="?", type=int)
    parser.add_argument("--prompt", help="write the next round's rendered propose prompt here")
    args = parser.parse_args()

    from kgen.store.db import Candidate, Evaluation, Run, open_db

    db = open_db(args.db, create=False)
    with db.reader() as s:
        run = s.get(Run, args.run_id) if args.run_id else s.scalars(select(Run).order_by(Run.id.desc())).first()
        if run is None:
            sys.exit("no run in the DB")
        rows = s.execute(select(Candidate.round, Evaluation.outcome, Evaluation.eval_s, Evaluation.details)
                         .join(Evaluation, Evaluation.candidate_id == Candidate.id)
                         .where(Candidate.run_id == run.id)).all()
        wall_s = (run.finished_at - run.created_at).total_seconds() if run.finished_at else None
        problem_path, size, device = run.problem_path, run.size, run.device
    per_round: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    throttled = 0
    for rnd, outcome, eval_s, details in rows:
        r = per_round[rnd or 0]
        r["candidates"] += 1
        r["correct"] += outcome == "correct"
        r["eval_s"] += eval_s or 0.0
        r["profile_s"] += ((details or {}).get("phases") or {}).get("profile_s") or 0.0
        r["profiled"] += "kernel_profile" in (details or {})
        throttled += bool(((details or {}).get("telemetry") or {}).get("throttled"))
        ncu = (details or {}).get("ncu") or {}
        if ncu:  # Nsight Compute profiles, attached after the candidate's round (kgen.judge.ncu_profile)
            r["ncu_profiled"] += 1
            r["ncu_failed"] += bool(ncu.get("error"))
            r["ncu_s"] += ncu.get("s") or 0.0
    total_profile = sum(r["profile_s"] for r in per_round.values())
    total_ncu = sum(r.get("ncu_s", 0.0) for r in per_round.values())
    report = {"run": run.id, "status": run.status, "wall_s": wall_s, "device": device,
              "rounds": {k: dict(v) for k, v in sorted(per_round.items())},
              "profile_s": round(total_profile, 2),
              "profile_share_of_run": round(total_profile / wall_s, 4) if wall_s else None,
              "ncu_s": round(total_ncu, 2), "ncu_share_of_run": round(total_ncu / wall_s, 4) if wall_s else None,
              "throttled_timings": throttled}
    print(json.dumps(report, indent=1))
    if args.prompt:
        from kgen.problems.problem import load_problem
        from kgen.proposers.prompts import PromptRenderer, prompt_context
        from kgen.store.history import build_history

        problem = load_problem(problem_path, size)
        history = build_history(db, problem, run_id=run.id)  # the run's stored evaluating machine
        text = PromptRenderer().render("propose.j2", prompt_context(problem, history, round_index=run.rounds_done))
        with open(args.prompt, "w") as f:
            f.write(text)
    db.close()


if __name__ == "__main__":
    main()
