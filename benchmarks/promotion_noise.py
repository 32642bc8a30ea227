"""How far apart the judge's evaluations of one kernel land on this GPU, against kgen.promotion's rule
(a new best's 95% interval of the median wholly below the best's, and 2% faster). Evaluates softmax
starters, each source several times in fresh judge processes, and prints JSON: per evaluation the
median, the interval and the runs; per pair whether the later one would displace the earlier.

    python benchmarks/promotion_noise.py [OUT.json]
"""
import json
import re
import sys
from itertools import combinations
from pathlib import Path

import torch

from kgen.evaluate import evaluate_candidate
from kgen.problems import load_problem
from kgen.promotion import beats, samples_of, spread_of, within_noise
from kgen.records import EvalSettings

STARTERS = Path(__file__).resolve().parent.parent / "problems" / "starters" / "softmax"
TWO_PASS = (STARTERS / "triton_online_two_pass.py").read_text()
SOURCES = {
    "two_pass": TWO_PASS,
    "two_pass_block4096": re.sub(r"^BLOCK_SIZE = \d+", "BLOCK_SIZE = 4096", TWO_PASS, count=1, flags=re.M),
    "in_registers": (STARTERS / "triton_row_in_registers.py").read_text(),
}
REPEATS = {"two_pass": 3, "two_pass_block4096": 2, "in_registers": 2}

problem = load_problem("softmax", "full")
settings = EvalSettings(device="cuda", size="full", sandbox="none")
evaluations = []
for name, source in SOURCES.items():
    for repeat in range(REPEATS[name]):
        result = evaluate_candidate(problem, source, settings)
        spread = spread_of(result.runtime_ms, samples_of(result.details))
        evaluations.append({"name": name, "repeat": repeat, "outcome": result.outcome,
                            "median_ms": spread.median_ms, "ci_low_ms": spread.low_ms, "ci_high_ms": spread.high_ms,
                            "runs": spread.runs, "half_width_pct": 100 * spread.half_width_ms / spread.median_ms
                            if spread.has_interval else None, "_spread": spread})
        print(name, repeat, result.outcome, spread, file=sys.stderr, flush=True)
pairs = []
for a, b in combinations(evaluations, 2):
    if a["median_ms"] is None or b["median_ms"] is None:
        continue
    pairs.append({"earlier": f"{a['name']}#{a['repeat']}", "later": f"{b['name']}#{b['repeat']}",
                  "same_source": a["name"] == b["name"],
                  "diff_pct": 100 * (b["median_ms"] - a["median_ms"]) / a["median_ms"],
                  "later_displaces": beats(b["_spread"], a["_spread"]),
                  "tie": within_noise(a["_spread"], b["_spread"])})
for e in evaluations:
    del e["_spread"]
text = json.dumps({"gpu": torch.cuda.get_device_name(), "evaluations": evaluations, "pairs": pairs}, indent=2)
if len(sys.argv) > 1:
    Path(sys.argv[1]).write_text(text)
print(text)
