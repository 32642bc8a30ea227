"""Is a timing on one GPU disturbed by work on another GPU of the same host (issue 27)? The same starter
through the judge (kgen.judge.evaluate.evaluate_candidate, sandboxed, full size) on cuda:0, alone, then while a
second process keeps cuda:1 busy (fp32 matmuls back to back), alternating, `--repeats` times each.

    python benchmarks/gpu_interference.py [--problem softmax] [--starter triton_row_in_registers.py] [--repeats 3]

Prints each evaluation's median and the two conditions' medians, and whether they differ by more than the
promotion noise (kgen.store.promotion: 3%). Needs two GPUs; exits 2 with one line otherwise.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LOAD = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda:1"); b = torch.randn(8192, 8192, device="cuda:1")
print("busy", flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(10):
        a @ b
    torch.cuda.synchronize(1)
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--problem", default="softmax")
    parser.add_argument("--starter", default="triton_row_in_registers.py")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="a JSON file for the figures")
    args = parser.parse_args()
    import torch

    if torch.cuda.device_count() < 2:
        print(f"gpu_interference: {torch.cuda.device_count()} GPU(s) here; it needs two", file=sys.stderr)
        return 2
    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate
    from kgen.judge.sandbox import SandboxMode
    from kgen.judge.spares import SpareRunners

    source = (ROOT / "problems" / "starters" / args.problem / args.starter).read_text()
    settings = EvalSettings(device="cuda:0", size="full", timeout_s=300, sandbox=str(SandboxMode.BWRAP))
    spares = SpareRunners(SandboxMode.BWRAP)
    figures: dict[str, list[float]] = {"alone": [], "GPU 1 busy": []}
    try:
        evaluate_candidate(args.problem, source, settings, spares)  # compiles, warms the caches
        for _ in range(args.repeats):
            for condition in figures:
                load = None
                if condition != "alone":
                    load = subprocess.Popen([sys.executable, "-c", LOAD, "120"], stdout=subprocess.PIPE, text=True)
                    load.stdout.readline()  # its matmuls have started
                started = time.monotonic()
                result = evaluate_candidate(args.problem, source, settings, spares)
                if load is not None:
                    load.kill()
                    load.wait()
                print(f"{condition:11s} {result.outcome} {result.runtime_ms} ms ({time.monotonic() - started:.0f} s)",
                      flush=True)
                if result.runtime_ms:
                    figures[condition].append(result.runtime_ms)
    finally:
        spares.close()
    alone, busy = (statistics.median(v) if v else None for v in figures.values())
    if alone and busy:
        diff = busy / alone - 1
        print(f"median alone {alone:.4f} ms, with GPU 1 busy {busy:.4f} ms: {diff:+.1%} "
              f"({'within' if abs(diff) <= 0.03 else 'beyond'} the 3% promotion noise)")
    if args.out:
        Path(args.out).write_text(json.dumps({"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                                              "problem": args.problem, "starter": args.starter, **figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
