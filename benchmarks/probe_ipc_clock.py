"""Probe for issue 28: can the judge clock a runner's forward on the GPU itself, to microseconds, with events the
candidate's process cannot touch? Run on a GPU machine (one call, ~30 s):

    python3 benchmarks/probe_ipc_clock.py [--runs 200] [--json PATH]

The design it tests (not in kgen yet): the runner (here a child process) records two *interprocess* CUDA events
around the forward, behind the GPU-side launch shadow it already enqueues (torch.cuda._sleep, as
kgen.harness.runner.timed does), and tells the judge (the parent) right after its end record. The judge's own stream
then waits on the start event, records its own timing event, waits on the end event and records another: the two
judge events bracket the forward as the GPU ran it. Interprocess events cannot be timed themselves
(cudaEventInterprocess requires cudaEventDisableTiming), hence the judge's own pair. A run counts only if the
start event had not completed when the judge's waits were enqueued (else the judge's first event could be late
and the interval short: such a run says "too late", never a wrong figure). The child also times the same
interval with its own ordinary events (what the runner reports today).

It prints, per workload (a ~20 us, ~100 us and ~1 ms kernel), the median of child and judge times, the median and
max |judge - child| of the usable runs and how many runs were usable. The design is worth building if the
differences are a few microseconds and nearly every run is usable: then a shave of any size beyond that noise is
caught, where today's clock check allows 0.5 ms + 10%.
"""
import argparse
import json
import multiprocessing as mp
import statistics
import sys

SHADOW_CYCLES = 2_000_000  # ~1 ms at the H100's ~1.98 GHz: the host enqueues the forward while the GPU waits


def child(conn, runs: int, workloads: list[tuple[str, int]]) -> None:
    import torch

    dev = torch.device("cuda", 0)
    stream = torch.cuda.Stream(dev)
    ipc_start = torch.cuda.Event(enable_timing=False, interprocess=True)
    ipc_end = torch.cuda.Event(enable_timing=False, interprocess=True)
    t_start, t_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):  # record once on this stream so the handles refer to a real event
        ipc_start.record(stream)
        ipc_end.record(stream)
    torch.cuda.synchronize()
    conn.send((ipc_start.ipc_handle(), ipc_end.ipc_handle()))
    assert conn.recv() == "ready"
    for name, n in workloads:
        x = torch.randn(n, device=dev)
        y = torch.empty_like(x)
        for k in range(runs + 10):  # 10 warm-up runs, reported but flagged
            with torch.cuda.stream(stream):
                torch.cuda._sleep(SHADOW_CYCLES)
                ipc_start.record(stream)
                t_start.record(stream)
                for _ in range(4):  # the "forward": a few launches of a memory-bound kernel
                    torch.mul(x, 1.0001, out=y)
                t_end.record(stream)
                ipc_end.record(stream)
            conn.send(("enqueued", name, k))
            assert conn.recv() == "waits_enqueued"
            stream.synchronize()
            conn.send(("timed", name, k, t_start.elapsed_time(t_end)))
    conn.send(("done",))


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    args.add_argument("--runs", type=int, default=200)
    args.add_argument("--json")
    opts = args.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("probe_ipc_clock: needs a CUDA GPU (interprocess events); nothing to do here")
        return 0
    # elements per launch for ~5 us, ~25 us, ~250 us per launch on an H100 (8 bytes moved per element at ~3 TB/s)
    workloads = [("~20us", 1 << 21), ("~100us", 1 << 23), ("~1ms", 1 << 27)]
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=child, args=(there, opts.runs, workloads))
    proc.start()
    h_start, h_end = here.recv()
    dev = torch.device("cuda", 0)
    ev_start = torch.cuda.Event.from_ipc_handle(dev, h_start)
    ev_end = torch.cuda.Event.from_ipc_handle(dev, h_end)
    judge_stream = torch.cuda.Stream(dev)
    j0, j1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    here.send("ready")
    rows: dict[str, list[dict]] = {name: [] for name, _ in workloads}
    while True:
        msg = here.recv()
        if msg[0] == "done":
            break
        _, name, k = msg
        judge_stream.wait_event(ev_start)
        j0.record(judge_stream)
        judge_stream.wait_event(ev_end)
        j1.record(judge_stream)
        late = ev_start.query()  # the start already passed: j0 may be late, the run is not usable
        here.send("waits_enqueued")
        _, name2, k2, child_ms = here.recv()
        assert (name2, k2) == (name, k)
        j1.synchronize()
        rows[name].append({"k": k, "child_ms": child_ms, "judge_ms": j0.elapsed_time(j1), "late": late})
    proc.join()
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "runs": opts.runs, "workloads": {}}
    print(f"{out['device']}, torch {out['torch']}, {opts.runs} runs per workload after 10 warm-up runs")
    print(f"{'workload':9s} {'child ms':>9s} {'judge ms':>9s} {'med |d| us':>10s} {'max |d| us':>10s} {'usable':>7s}")
    for name, rs in rows.items():
        rs = [r for r in rs if r["k"] >= 10]
        usable = [r for r in rs if not r["late"]]
        diffs = [abs(r["judge_ms"] - r["child_ms"]) * 1e3 for r in usable] or [float("nan")]
        summary = {"child_ms": statistics.median(r["child_ms"] for r in rs),
                   "judge_ms": statistics.median(r["judge_ms"] for r in rs),
                   "median_abs_diff_us": statistics.median(diffs), "max_abs_diff_us": max(diffs),
                   "usable": len(usable), "runs": len(rs)}
        out["workloads"][name] = summary
        print(f"{name:9s} {summary['child_ms']:9.4f} {summary['judge_ms']:9.4f} {summary['median_abs_diff_us']:10.2f} "
              f"{summary['max_abs_diff_us']:10.2f} {len(usable):3d}/{len(rs)}")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
