"""Assemble the GPU benchmark's collection of LLM-written KernelBench kernels (issue 30) from the
public KernelBench leaderboard (github.com/anneouyang/KernelBenchLeaderboard, Dec 2024: kernels that
claude-3.5-sonnet, gpt-o1, gpt-4o, deepseek-coder, gemini-1.5-flash and llama-3.1 wrote for KernelBench,
each with the speedups over torch eager and torch.compile KernelBench measured for it).

That repository states no license, so its kernels are not committed here: this script reads them from
a fetched mirror (a bare git dir) and writes, into an ignored folder the lead carries to the GPU:
    OUT/KernelBench/level{L}/{P}_{name}.py   the references the kernels were written for (KernelBench's, MIT)
    OUT/solutions/{hash}.py                  the kernels
    OUT/collection.jsonl                     one row each: level, problem_id, candidate, claimed speedups
Usage: python benchmarks/assemble_kb_collection.py MIRROR_GIT_DIR [OUT] [--entries N]
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
from pathlib import Path

MAX_KERNEL_MS = 2.0  # the leaderboard's own kernel time: slow kernels make a 9-minute GPU budget hopeless


def git_show(mirror: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", mirror, "show", f"HEAD:{path}"], check=True, capture_output=True,
                          text=True).stdout


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mirror")
    parser.add_argument("out", nargs="?", default="benchmarks/collection_kb")
    parser.add_argument("--entries", type=int, default=50)
    args = parser.parse_args()
    raw = json.loads(git_show(args.mirror, "docs/assets/raw_data.json"))
    names = {}  # solution file -> problem name, from the leaderboard's index ("Level 1: 19_ReLU")
    for key, solutions in json.loads(git_show(args.mirror, "docs/assets/data.json")).items():
        for s in solutions:
            names[s["file"]] = key.split(": ", 1)[1]
    rows = [r for r in raw if r["level"] in (1, 2) and r["kernel_eval_time"] <= MAX_KERNEL_MS and r["file"] in names]
    by_problem = collections.defaultdict(list)
    for r in rows:
        by_problem[(r["level"], r["problem_id"])].append(r)
    # the three problems with the largest claims first (the claims most worth checking), then those
    # with the most kernels (fewer problems: fewer baselines to time)
    claimed = sorted(by_problem, key=lambda k: -max(r["torch_speedup"] for r in by_problem[k]))[:3]
    rest = sorted((k for k in by_problem if k not in claimed), key=lambda k: (-len(by_problem[k]), k))
    chosen = []
    for key in claimed + rest:
        if len(chosen) >= args.entries:
            break
        chosen += sorted(by_problem[key], key=lambda r: r["display_name"])
    out = Path(args.out)
    (out / "solutions").mkdir(parents=True, exist_ok=True)
    with open(out / "collection.jsonl", "w") as jsonl:
        for r in chosen:
            # raw_data's problem_id counts from 0; KernelBench's id is the name's number (and the file's)
            level, name = r["level"], names[r["file"]]
            pid = int(name.split("_", 1)[0])
            ref = out / "KernelBench" / f"level{level}" / f"{name}.py"
            ref.parent.mkdir(parents=True, exist_ok=True)
            if not ref.exists():
                ref.write_text(git_show(args.mirror, f"docs/assets/problems/l{level}_p{pid}.py"))
            (out / "solutions" / f"{r['file']}.py").write_text(r["code"])
            jsonl.write(json.dumps({"name": f"{r['display_name']} L{level} {name}", "level": level, "problem_id": pid,
                                    "candidate": f"solutions/{r['file']}.py", "claimed_speedup": r["torch_speedup"],
                                    "claimed_speedup_compile": r["torch_compile_speedup"]}) + "\n")
    problems = len({(r["level"], r["problem_id"]) for r in chosen})
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"{len(chosen)} kernels for {problems} problems in {out} ({size / 1e6:.2f} MB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
