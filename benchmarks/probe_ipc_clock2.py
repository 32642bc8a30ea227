"""Probe 2 for issue 28: which GPU-side clock can the judge read for a runner's forward? One device call, ~30 s:

    python3 benchmarks/probe_ipc_clock2.py --json $OUT/ipc2.json | tee $OUT/ipc2.txt

Probe 1 (probe_ipc_clock.py, H100 2026-11-26) had the judge's own stream wait on the runner's interprocess
events and record its own timing events between the waits: 2.5 us for a 19 us or 102 us forward, 0.66 ms for a
1.8 ms one. The waits hold (cross-process ordering works), but a judge event is stamped when the GPU runs the
judge's context, and without MPS the contexts of two processes are time-sliced: the judge's context runs only
once the runner's goes idle or its time slice ends. So both judge events land at the forward's end (short
forwards) or one at a slice boundary inside it (long ones). This probe measures the designs that could work
instead, each against the runner's own CUDA events of the same run (`child`, what kgen times with today):

- poll:   the judge's host spins on cudaEventQuery of the runner's interprocess start/end events (perf_counter_ns
          at the first `complete` of each): no judge context on the GPU at all.
- go:     the judge holds the runner's stream: the runner's stream waits on the judge's interprocess `go` event,
          which the judge's stream records behind a gate the judge's host opens (cuStreamWaitValue32 on pinned
          memory, or a spinning gate kernel where stream memory operations are not supported). The judge's
          own timing events: T0 just before `go`, T1 after waiting on the runner's end event. No launch shadow
          needed (the forward is enqueued before the gate opens); T1 - T0 holds two context switches.
- stamps: a kgen kernel the runner enqueues before and after the forward writes %globaltimer (the device's
          nanosecond timer, one clock for every context) into memory the judge allocated (CUDA IPC); the judge
          subtracts. A judge-context stamp after the run checks that the clock is shared (`after` >= end).
- watch:  a one-thread judge kernel spins on a flag the runner's stamp kernel sets, and stamps %globaltimer when
          it sees each flag: works only if the two contexts run at once (MPS); expected to fail here.

Per design and workload (nothing, ~20 us, ~100 us, ~1.8 ms of kernels): the medians, the offset (median of
design - child, us), its noise (1.4826 x MAD, us), the largest deviation from the offset, and the usable runs.
A design is worth building if, for every workload, nearly all runs are usable, the noise is a few us, and the
offset is the same as with nothing to run (then null runs calibrate it, and a shave of any size beyond that
noise shows). Whether the candidate, in the runner's process, can forge each design's signal is argued in
benchmarks/RESULTS.md ("the judge's GPU clock"), not measured here. Without a GPU: a clean skip, exit 0.
"""
import argparse
import ctypes
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # kgen, from a checkout (the GPU machine has no install)
from kgen.harness.gate import GATE_PTX

SHADOW_CYCLES = 2_000_000  # ~1 ms at the H100's ~1.98 GHz: the host enqueues the forward while the GPU waits
WATCH_TIMEOUT_NS = 50_000_000
# (name, elements per launch, launches): ~5 us, ~25 us, ~450 us per launch on an H100 (8 bytes per element)
WORKLOADS = (("nothing", 1 << 10, 0), ("~20us", 1 << 21, 4), ("~100us", 1 << 23, 4), ("~1.8ms", 1 << 27, 4))

# Hand-written PTX, loaded by the driver (no nvcc, no build): the runner's own GATE_PTX (its header and
# kgen_gate, which spins until *flag >= value: the judge's gate where stream memory ops are missing), then
# kgen_mark, which stamps the global timer into stamps[slot] and then (fenced) sets *flag = value; kgen_watch,
# which spins on *flag and stamps when it reaches each of two values; kgen_ticks, which records the global
# timer's first 8 increments (its resolution).
PTX = GATE_PTX + r"""
.visible .entry kgen_mark(.param .u64 stamps, .param .u32 slot, .param .u64 flag, .param .u32 value)
{
    .reg .pred %p;
    .reg .b32 %r<3>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [stamps];
    ld.param.u32 %r1, [slot];
    ld.param.u64 %rd2, [flag];
    ld.param.u32 %r2, [value];
    mov.u64 %rd3, %globaltimer;
    cvta.to.global.u64 %rd4, %rd1;
    mul.wide.u32 %rd5, %r1, 8;
    add.s64 %rd4, %rd4, %rd5;
    st.volatile.global.u64 [%rd4], %rd3;
    setp.eq.u64 %p, %rd2, 0;
    @%p bra DONE;
    membar.sys;
    cvta.to.global.u64 %rd2, %rd2;
    st.volatile.global.u32 [%rd2], %r2;
DONE:
    ret;
}

.visible .entry kgen_watch(.param .u64 flag, .param .u32 first, .param .u64 out, .param .u64 timeout_ns)
{
    .reg .pred %p<3>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [flag];
    cvta.to.global.u64 %rd1, %rd1;
    ld.param.u32 %r1, [first];
    ld.param.u64 %rd2, [out];
    cvta.to.global.u64 %rd2, %rd2;
    ld.param.u64 %rd3, [timeout_ns];
    mov.u64 %rd7, 0;
    st.volatile.global.u64 [%rd2], %rd7;
    st.volatile.global.u64 [%rd2+8], %rd7;
    mov.u64 %rd4, %globaltimer;
    st.volatile.global.u64 [%rd2+16], %rd4;
    add.s64 %rd5, %rd4, %rd3;
    add.u32 %r3, %r1, 1;
WAIT1:
    ld.volatile.global.u32 %r2, [%rd1];
    setp.ge.u32 %p1, %r2, %r1;
    @%p1 bra SEEN1;
    mov.u64 %rd6, %globaltimer;
    setp.gt.u64 %p2, %rd6, %rd5;
    @%p2 bra DONE;
    bra WAIT1;
SEEN1:
    mov.u64 %rd6, %globaltimer;
    st.volatile.global.u64 [%rd2], %rd6;
WAIT2:
    ld.volatile.global.u32 %r2, [%rd1];
    setp.ge.u32 %p1, %r2, %r3;
    @%p1 bra SEEN2;
    mov.u64 %rd6, %globaltimer;
    setp.gt.u64 %p2, %rd6, %rd5;
    @%p2 bra DONE;
    bra WAIT2;
SEEN2:
    mov.u64 %rd6, %globaltimer;
    st.volatile.global.u64 [%rd2+8], %rd6;
DONE:
    ret;
}

.visible .entry kgen_ticks(.param .u64 out)
{
    .reg .pred %p<3>;
    .reg .b32 %r<2>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, 0;
    mov.u64 %rd5, 0;
    mov.u64 %rd2, %globaltimer;
LOOP:
    add.s64 %rd5, %rd5, 1;
    setp.gt.u64 %p2, %rd5, 100000000;
    @%p2 bra DONE;
    mov.u64 %rd3, %globaltimer;
    setp.eq.u64 %p1, %rd3, %rd2;
    @%p1 bra LOOP;
    sub.s64 %rd4, %rd3, %rd2;
    st.volatile.global.u64 [%rd1], %rd4;
    add.s64 %rd1, %rd1, 8;
    mov.u64 %rd2, %rd3;
    add.u32 %r1, %r1, 1;
    setp.lt.u32 %p1, %r1, 8;
    @%p1 bra LOOP;
DONE:
    ret;
}
"""


class Kernels:
    """The PTX above, loaded into this process's current context through the driver API (ctypes)."""

    def __init__(self):
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.cu.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        module = ctypes.c_void_p()
        self.check(self.cu.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(PTX.encode())), "cuModuleLoadData")
        self.functions = {}
        for name in ("kgen_mark", "kgen_watch", "kgen_gate", "kgen_ticks"):
            fn = ctypes.c_void_p()
            self.check(self.cu.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()), name)
            self.functions[name] = fn

    def check(self, status: int, what: str) -> None:
        if status != 0:
            text = ctypes.c_char_p()
            self.cu.cuGetErrorString(status, ctypes.byref(text))
            raise RuntimeError(f"{what}: CUDA driver error {status} ({(text.value or b'?').decode()})")

    def launch(self, name: str, stream, *args) -> None:
        values = [ctypes.c_uint32(a) if kind == "u32" else ctypes.c_uint64(a) for kind, a in args]
        params = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
        self.check(self.cu.cuLaunchKernel(self.functions[name], 1, 1, 1, 1, 1, 1, 0,
                                          ctypes.c_void_p(stream.cuda_stream),
                                          ctypes.cast(params, ctypes.c_void_p), None), name)

    def mark(self, stream, stamps_ptr: int, slot: int, flag_ptr: int = 0, value: int = 0) -> None:
        self.launch("kgen_mark", stream, ("u64", stamps_ptr), ("u32", slot), ("u64", flag_ptr), ("u32", value))

    def wait_value(self, stream, host_ptr: int, value: int) -> bool:
        """cuStreamWaitValue32(GEQ) on pinned host memory; False where the driver refuses (then: the gate kernel)."""
        device_ptr = ctypes.c_uint64()
        if self.cu.cuMemHostGetDevicePointer_v2(ctypes.byref(device_ptr), ctypes.c_void_p(host_ptr), 0) != 0:
            return False
        fn = getattr(self.cu, "cuStreamWaitValue32_v2", None) or self.cu.cuStreamWaitValue32
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        return fn(ctypes.c_void_p(stream.cuda_stream), device_ptr.value, value, 0) == 0


def forward(torch, x, y, launches: int) -> None:
    for _ in range(launches):  # the "forward": a few launches of a memory-bound kernel
        torch.mul(x, 1.0001, out=y)


def child(conn) -> None:
    """The runner's side: its own stream and events, kgen's stamp kernel, and whatever each mode enqueues."""
    import torch
    import torch.multiprocessing  # CUDA tensors arrive through the pipe (torch's IPC reductions)

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    stamps, flag, go_handle = conn.recv()
    kernels = Kernels()
    stream = torch.cuda.Stream(dev)
    go = torch.cuda.Event.from_ipc_handle(dev, go_handle)
    ipc_start = torch.cuda.Event(interprocess=True)
    ipc_end = torch.cuda.Event(interprocess=True)
    t_start, t_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ipc_start.record(stream)
    ipc_end.record(stream)
    torch.cuda.synchronize()
    buffers = {name: (torch.randn(n, device=dev), torch.empty(n, device=dev), launches)
               for name, n, launches in WORKLOADS}
    conn.send((ipc_start.ipc_handle(), ipc_end.ipc_handle()))
    s_ptr, f_ptr = stamps.data_ptr(), flag.data_ptr()
    while True:
        msg = conn.recv()
        if msg[0] == "bye":
            break
        mode, name, k = msg
        x, y, launches = buffers[name]
        with torch.cuda.stream(stream):
            if mode == "go":
                stream.wait_event(go)
            else:
                torch.cuda._sleep(SHADOW_CYCLES)
                kernels.mark(stream, s_ptr, 0, f_ptr if mode == "watch" else 0, 2 * k + 1)
                ipc_start.record(stream)
            t_start.record(stream)
            forward(torch, x, y, launches)
            t_end.record(stream)
            ipc_end.record(stream)
            if mode != "go":
                kernels.mark(stream, s_ptr, 1, f_ptr if mode == "watch" else 0, 2 * k + 2)
        conn.send("enqueued")
        assert conn.recv() == "sync"
        stream.synchronize()
        conn.send(t_start.elapsed_time(t_end))
    conn.send("bye")


def poll(event, timeout_s: float = 1.0) -> int:
    """perf_counter_ns when `event` first reads complete (0 past the timeout)."""
    deadline = time.perf_counter() + timeout_s
    while not event.query():
        if time.perf_counter() > deadline:
            return 0
    return time.perf_counter_ns()


def robust(diffs: list[float]) -> tuple[float, float, float]:
    """(median, 1.4826 x MAD, largest |d - median|) of the differences, in us."""
    if not diffs:
        return float("nan"), float("nan"), float("nan")
    middle = statistics.median(diffs)
    mad = statistics.median(abs(d - middle) for d in diffs)
    return middle, 1.4826 * mad, max(abs(d - middle) for d in diffs)


def report(rows: dict, meta: dict, json_path) -> None:
    """Print the table and the verdicts; write everything (every run's row too) to `json_path`."""
    out = dict(meta, designs={})
    print(f"{out['device']}, torch {out['torch']}; %globaltimer increments (ns): {out['globaltimer_ticks_ns']}; "
          f"go's gate: {out['gate']}{'; BUDGET RAN OUT: fewer runs' if out['out_of_time'] else ''}")
    print(f"{'design':7s} {'workload':8s} {'child ms':>9s} {'design ms':>9s} {'offset us':>9s} {'noise us':>8s} "
          f"{'max dev':>8s} {'usable':>9s}  notes")
    for design, by_workload in rows.items():
        out["designs"][design] = {}
        offsets = {}
        for name, rs in by_workload.items():
            usable = [r for r in rs if r["design_ms"] == r["design_ms"] and not r.get("late")
                      and r.get("held", True)]
            diffs = [(r["design_ms"] - r["child_ms"]) * 1e3 for r in usable]
            offset, noise, worst = robust(diffs)
            offsets[name] = offset
            notes = ""
            if design == "stamps" and rs:
                after = [r["after_us"] for r in rs]
                notes = f"judge's stamp after the runner's end: min {min(after):.1f} us, median " \
                        f"{statistics.median(after):.1f} us"
            seen = [r for r in rs if r.get("start_lag_us") is not None]
            if design == "watch" and seen:  # every run that saw both flags, started late or not
                lag_start = statistics.median(r["start_lag_us"] for r in seen)
                lag_end = statistics.median(r["end_lag_us"] for r in seen)
                notes = f"watcher started after the runner's start stamp in {sum(r['late'] for r in rs)}/{len(rs)}; " \
                        f"flags seen late by (medians): start {lag_start:.1f} us, end {lag_end:.1f} us"
            if design == "go":
                notes = f"runner held behind the gate: {sum(r.get('held', False) for r in rs)}/{len(rs)}"
            summary = {"child_ms": statistics.median(r["child_ms"] for r in rs) if rs else None,
                       "design_ms": statistics.median(r["design_ms"] for r in usable) if usable else None,
                       "offset_us": offset, "noise_us": noise, "max_dev_us": worst, "usable": len(usable),
                       "runs": len(rs), "notes": notes, "rows": rs}
            out["designs"][design][name] = summary
            print(f"{design:7s} {name:8s} {summary['child_ms'] or float('nan'):9.4f} "
                  f"{summary['design_ms'] or float('nan'):9.4f} {offset:9.2f} {noise:8.2f} {worst:8.2f} "
                  f"{len(usable):4d}/{len(rs):<4d}  {notes}")
        base = offsets.get("nothing", float("nan"))
        spread = max((abs(o - base) for o in offsets.values()), default=float("nan"))
        s = out["designs"][design]
        works = all(v["runs"] and v["usable"] >= 0.95 * v["runs"] and v["noise_us"] <= 5.0 for v in s.values()) \
            and spread <= 5.0
        out["designs"][design]["verdict"] = {"works": works, "offset_spread_us": spread}
        print(f"{design:7s} -> {'WORKS' if works else 'does not work'}: offset moves {spread:.2f} us across "
              f"workloads (a calibrated offset needs <= 5 us), noise <= 5 us and >= 95% usable required")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(out, f, indent=1, default=str)


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    args.add_argument("--runs", type=int, default=200, help="runs per workload for poll/stamps and for go")
    args.add_argument("--watch-runs", type=int, default=30)
    args.add_argument("--budget-s", type=float, default=45.0, help="stop starting new runs past this")
    args.add_argument("--json")
    opts = args.parse_args()
    started = time.perf_counter()
    try:
        import torch
    except ImportError:
        print("probe_ipc_clock2: skipped: torch is not installed")
        return 0
    if not torch.cuda.is_available():
        print("probe_ipc_clock2: skipped: needs a CUDA GPU (interprocess events, the driver's PTX loader)")
        return 0
    import torch.multiprocessing as tmp

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    ticks = torch.zeros(8, dtype=torch.int64, device=dev)  # the context exists from here: the PTX loads into it
    kernels = Kernels()
    judge_stream = torch.cuda.Stream(dev)
    kernels.launch("kgen_ticks", judge_stream, ("u64", ticks.data_ptr()))
    judge_stream.synchronize()
    stamps = torch.zeros(4, dtype=torch.int64, device=dev)  # slots: runner start, runner end, judge after
    flag = torch.zeros(1, dtype=torch.int32, device=dev)
    watch_out = torch.zeros(3, dtype=torch.int64, device=dev)
    gate = torch.zeros(1, dtype=torch.int32, pin_memory=True)
    go = torch.cuda.Event(interprocess=True)
    go.record(judge_stream)
    judge_stream.synchronize()
    ctx = tmp.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=child, args=(there,), daemon=True)
    proc.start()
    here.send((stamps, flag, go.ipc_handle()))
    h_start, h_end = here.recv()
    ev_start = torch.cuda.Event.from_ipc_handle(dev, h_start)
    ev_end = torch.cuda.Event.from_ipc_handle(dev, h_end)
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    gate_kind = "cuStreamWaitValue32"
    rows: dict[str, dict[str, list[dict]]] = {d: {name: [] for name, _, _ in WORKLOADS}
                                               for d in ("poll", "stamps", "go", "watch")}
    out_of_time = False

    def meta() -> dict:
        return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "runs": opts.runs,
                "globaltimer_ticks_ns": ticks.tolist(), "gate": gate_kind, "out_of_time": out_of_time}

    sequence = itertools.count(1)  # run numbers: the gate's and the watch flag's values only ever grow

    def run(mode: str, name: str, k: int) -> None:
        nonlocal gate_kind
        if mode == "go":  # the gate, then T0 and `go`, all enqueued before the runner enqueues its wait on `go`
            if gate_kind == "cuStreamWaitValue32" and not kernels.wait_value(judge_stream, gate.data_ptr(), k + 1):
                gate_kind = "gate kernel (stream memory operations refused)"
            if gate_kind != "cuStreamWaitValue32":
                kernels.launch("kgen_gate", judge_stream, ("u64", gate.data_ptr()), ("u32", k + 1),
                               ("u64", 1_000_000_000))
            t0.record(judge_stream)
            go.record(judge_stream)
        here.send((mode, name, k))
        assert here.recv() == "enqueued"
        row: dict = {"k": k}
        if mode == "go":
            row["held"] = not ev_end.query()  # the runner's end must still wait behind the judge's gate
            judge_stream.wait_event(ev_end)
            t1.record(judge_stream)
            gate[0] = k + 1  # open the gate
            deadline = time.perf_counter() + 5.0
            while not t1.query():
                if time.perf_counter() > deadline:  # the GPU never saw the gate open: nothing more can run
                    print(f"probe_ipc_clock2: go: the judge's stream never passed its gate ({gate_kind}) in 5 s; "
                          "the results so far:", flush=True)
                    report(rows, meta(), opts.json)
                    sys.stdout.flush()
                    os._exit(3)
            row["design_ms"] = t0.elapsed_time(t1)
        elif mode == "poll":
            row["late"] = bool(ev_start.query())
            seen_start = poll(ev_start)
            seen_end = poll(ev_end)
            row["design_ms"] = (seen_end - seen_start) / 1e6 if seen_start and seen_end else float("nan")
        else:  # watch
            kernels.launch("kgen_watch", judge_stream, ("u64", flag.data_ptr()), ("u32", 2 * k + 1),
                           ("u64", watch_out.data_ptr()), ("u64", WATCH_TIMEOUT_NS))
        here.send("sync")
        row["child_ms"] = here.recv()
        if mode == "poll":  # the runner's stamps of the same run, and the judge's own after it
            kernels.mark(judge_stream, stamps.data_ptr(), 2)
            judge_stream.synchronize()
            s = stamps.tolist()
            rows["stamps"][name].append({"k": k, "child_ms": row["child_ms"], "design_ms": (s[1] - s[0]) / 1e6,
                                         "after_us": (s[2] - s[1]) / 1e3})
        if mode == "watch":
            judge_stream.synchronize()
            seen, s = watch_out.tolist(), stamps.tolist()
            ok = seen[0] > 0 and seen[1] > 0
            row.update(design_ms=(seen[1] - seen[0]) / 1e6 if ok else float("nan"), late=seen[2] > s[0],
                       start_lag_us=(seen[0] - s[0]) / 1e3 if ok else None,
                       end_lag_us=(seen[1] - s[1]) / 1e3 if ok else None)
        rows[mode][name].append(row)

    for mode, runs in (("poll", opts.runs), ("go", opts.runs), ("watch", opts.watch_runs)):
        for name, _, _ in WORKLOADS:
            for _ in range(runs + 5):  # 5 warm-up runs, dropped
                if time.perf_counter() - started > opts.budget_s:
                    out_of_time = True
                    break
                run(mode, name, next(sequence))
            rows[mode][name] = rows[mode][name][5:]
            if mode == "poll":
                rows["stamps"][name] = rows["stamps"][name][5:]
    here.send(("bye",))
    proc.join(timeout=10)

    report(rows, meta(), opts.json)
    print(f"probe_ipc_clock2: {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
