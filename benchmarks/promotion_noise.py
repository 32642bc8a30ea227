"""How far apart the judge's evaluations of one kernel land on a GPU, against kgen.store.promotion's rule (a
new best's 95% interval of the median wholly below the best's, and MIN_GAIN faster).

    python benchmarks/promotion_noise.py collect RAW.json   # on the GPU: softmax starters, each source
                                                            # evaluated several times, fresh judge each time
    python benchmarks/promotion_noise.py analyze RAW.json   # anywhere: intervals, and per pair of
                                                            # evaluations whether the later displaces the earlier
"""
import json
import re
import sys
from itertools import combinations
from pathlib import Path

STARTERS = Path(__file__).resolve().parent.parent / "problems" / "starters" / "softmax"
REPEATS = {"two_pass": 3, "two_pass_block4096": 2, "in_registers": 2}


def sources() -> dict[str, str]:
    two_pass = (STARTERS / "triton_online_two_pass.py").read_text()
    return {"two_pass": two_pass,
            "two_pass_block4096": re.sub(r"^BLOCK_SIZE = \d+", "BLOCK_SIZE = 4096", two_pass, count=1, flags=re.M),
            "in_registers": (STARTERS / "triton_row_in_registers.py").read_text()}


def collect(path: Path) -> None:
    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate
    from kgen.problems.problem import load_problem

    problem = load_problem("softmax", "full")
    settings = EvalSettings(device="cuda", size="full", sandbox="none")
    found = []
    for name, source in sources().items():
        for repeat in range(REPEATS[name]):
            r = evaluate_candidate(problem, source, settings)
            found.append({"name": name, "repeat": repeat, "outcome": r.outcome, "runtime_ms": r.runtime_ms,
                          "message": r.message[:300], "timing": r.details.get("timing"),
                          "samples_ms": r.details.get("samples_ms")})
            print(name, repeat, r.outcome, r.runtime_ms, flush=True)
    path.write_text(json.dumps(found))


def analyze(path: Path) -> None:
    from kgen.store.promotion import beats, spread_of, within_noise

    found = [e for e in json.loads(path.read_text()) if e["runtime_ms"] is not None]
    spreads = [spread_of(e["runtime_ms"], e["samples_ms"] or []) for e in found]
    print("| evaluation | median ms | 95% interval | ± | runs |\n| --- | ---: | --- | ---: | ---: |")
    for e, s in zip(found, spreads):
        print(f"| {e['name']} #{e['repeat']} | {s.median_ms:.4f} | [{s.low_ms:.4f}, {s.high_ms:.4f}] | "
              f"{100 * s.half_width_ms / s.median_ms:.2f}% | {s.runs} |")
    print("\n| earlier → later | later's median | intervals apart | later displaces | tie |\n"
          "| --- | ---: | --- | --- | --- |")
    for (a, sa), (b, sb) in combinations(zip(found, spreads), 2):
        apart = sb.high_ms < sa.low_ms or sa.high_ms < sb.low_ms
        print(f"| {a['name']} #{a['repeat']} → {b['name']} #{b['repeat']} | "
              f"{100 * (sb.median_ms - sa.median_ms) / sa.median_ms:+.2f}% | {apart} | {beats(sb, sa)} | "
              f"{within_noise(sa, sb)} |")


if __name__ == "__main__":
    {"collect": collect, "analyze": analyze}[sys.argv[1]](Path(sys.argv[2]))
