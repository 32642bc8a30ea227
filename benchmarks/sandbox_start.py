"""How long a spare sandbox takes to be ready (issue 27): every candidate starts three (kgen.judge.spares), each
importing torch and then making its CUDA context, and on the H100 boxes that took 6.5-9.5 s of a search against
~1.9 s on a quiet CPU box. Measures, on this machine's first GPU (or the CPU without one):
- `none`: one runner without bubblewrap (--no-sandbox's process), alone;
- `bwrap`: one runner in the sandbox, alone;
- `bwrap xN`: N runners in the sandbox started at once (a search's prestart starts 6 per evaluator);
each one's import_s (torch imported, the operator trace warmed), gpu_s (its CUDA context and Triton's warm-up
kernel) and its seconds from start to warm, as the judge sees them.

    python benchmarks/sandbox_start.py [--at-once 6] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def start_and_wait(device: str, mode, count: int) -> list[dict]:
    from kgen.judge.spares import start_process

    started = time.monotonic()
    slots = [start_process(device, mode, "run") for _ in range(count)]
    rows = []
    try:
        for slot in slots:
            if device != "cpu":
                slot.channel.send({"type": "warm"})
            seconds = {}
            for expected in ("ready", "warmed") if device != "cpu" else ("ready",):
                message = slot.channel.receive(timeout_s=300)
                if message.get("type") != expected:
                    raise RuntimeError(f"expected {expected}, got {message.get('type')}: {message.get('message')}")
                seconds.update(message.get("seconds") or {})
            rows.append(dict(seconds, warm_after_s=round(time.monotonic() - started, 3)))
    finally:
        for slot in slots:
            slot.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--at-once", type=int, default=6)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import torch

    from kgen.judge.sandbox import SandboxMode, _run_as_nobody
    from kgen.judge.spares import spare_key

    device = spare_key("cuda") if torch.cuda.is_available() else "cpu"
    probe_started = time.monotonic()
    _run_as_nobody(device != "cpu")
    results = {"device": device, "probe_s": round(time.monotonic() - probe_started, 3)}
    print(f"run-as-nobody probe (once per process): {results['probe_s']} s", flush=True)
    for label, mode, count in (("none", SandboxMode.NONE, 1), ("bwrap", SandboxMode.BWRAP, 1),
                               (f"bwrap x{args.at_once}", SandboxMode.BWRAP, args.at_once)):
        try:
            rows = start_and_wait(device, mode, count)
        except Exception as e:  # noqa: BLE001 - a measurement that failed is said, the others still run
            print(f"{label}: failed: {type(e).__name__}: {e}", flush=True)
            continue
        results[label] = rows
        worst = max(rows, key=lambda r: r["warm_after_s"])
        print(f"{label}: import_s {[r.get('import_s') for r in rows]}, gpu_s {[r.get('gpu_s') for r in rows]}, "
              f"last warm after {worst['warm_after_s']} s", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
