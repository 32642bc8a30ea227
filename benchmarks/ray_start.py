"""How long a local Ray cluster takes to start for a search (issue 26: 6.5-7.1 s before the search prepared its
roofline and this machine's facts in a thread beside ray.init, 8.7-9.5 s after), each variant in a fresh
process, so the question "does the thread slow ray.init down" gets figures on the machine that shows it.

    python3 benchmarks/ray_start.py [--reps 2] [--json OUT.json]

Variants: `alone` (ray.init as kgen.search.cluster.connect calls it), `beside` (the same with kgen's
prepare_beside_cluster_start work in a thread: import torch, this machine's facts, the problem's roofline),
`noprestart` (alone, Ray told not to prestart a worker per CPU for the first driver). Prints each start's
seconds and the first remote call's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r'''
import json, logging, sys, threading, time
started = time.monotonic()
import ray
variant = sys.argv[1]
thread = None
if variant == "beside":
    def prepare():
        import torch
        from kgen.judge.evaluator_facts import this_machine
        from kgen.problems.problem import load_problem
        from kgen.problems.roofline import compute_roofline
        if torch.cuda.is_available():
            this_machine()
        compute_roofline(load_problem("softmax", "full"))
    thread = threading.Thread(target=prepare, daemon=True)
    thread.start()
kwargs = dict(address="local", include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
if variant == "noprestart":
    kwargs["_system_config"] = {"prestart_worker_first_driver": False}
before = time.monotonic()
ray.init(**kwargs)
init_s = time.monotonic() - before
@ray.remote(num_cpus=0)
def ping():
    return 1
before = time.monotonic()
ray.get(ping.remote())
first_task_s = time.monotonic() - before
if thread is not None:
    thread.join()
print(json.dumps({"variant": variant, "init_s": round(init_s, 3), "first_task_s": round(first_task_s, 3),
                  "all_done_s": round(time.monotonic() - started, 3)}))
ray.shutdown()
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    for _ in range(args.reps):
        for variant in ("alone", "beside", "noprestart"):
            done = subprocess.run([sys.executable, "-c", CHILD, variant], capture_output=True, text=True, timeout=180)
            line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
            row = json.loads(line) if line.startswith("{") else {"variant": variant, "error": done.stderr[-500:]}
            rows.append(row)
            print(row, flush=True)
    for variant in ("alone", "beside", "noprestart"):
        inits = [r["init_s"] for r in rows if r.get("variant") == variant and "init_s" in r]
        if inits:
            print(f"{variant:10s} ray.init median {statistics.median(inits):.2f} s over {len(inits)}: {inits}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
