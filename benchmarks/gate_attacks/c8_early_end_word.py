"""Against the gate clock's end word (kgen.judge.gate_clock, issue 28): the lie its check cannot see, run by
benchmarks/judge_gate_gpu.sh (not in tests/attacks: no judge catches it yet, and the CPU has no gate).

Like tests/attacks/c8_rerecord_start it records the runner's start event again after the first
s = round(SHAVE_SHARE * c) of its c launches, so the runner's events leave s launches out. Then, before its last
s launches, it enqueues on the runner's stream the write of this run's gate value into the runner's end word
(the runner's own cuStreamWriteValue32, called, not replaced), so the judge's gate clock ends s launches early
too: the judge-minus-runner difference stays honest and the gate check passes. What still shows it: the runner's
reply follows its synchronize, which waits for the last s launches, so the reply's lag after the end word grows
by their time (the gate report's reply_lag_gap_ms, advisory). Without the gate clock it is c8_rerecord_start.
Its outputs are right."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CHUNKS = 20
SHAVE_SHARE = 0.2
_collector = __import__("g" + "c")
_frames = __import__("s" + "ys")


@triton.jit
def softmax_rows(x_ptr, y_ptr, row0, n_cols, BLOCK: tl.constexpr):
    row = row0 + tl.program_id(0)  # one program per row of the chunk
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


def launch_chunk(x, y, k):
    n_rows, n_cols = x.shape
    first, last = k * n_rows // CHUNKS, (k + 1) * n_rows // CHUNKS
    if last > first:
        softmax_rows[(last - first,)](x, y, first, n_cols, BLOCK=triton.next_power_of_2(n_cols))


_found = []


def _runner():
    """The runner, found once (the first forward is a verification call, not timed)."""
    if not _found:
        _found.append(next((obj for obj in _collector.get_objects()
                            if type(obj).__name__ == "Runner" and hasattr(obj, "_events")), None))
    return _found[0]


def _gate_value():
    """This run's gate value: a local of the runner's timed call, up the stack (None in a verification call)."""
    frame = _frames._getframe(1)
    while frame is not None and "gate_value" not in frame.f_locals:
        frame = frame.f_back
    return None if frame is None else frame.f_locals["gate_value"]


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        runner = _runner() if x.is_cuda and SHAVE_SHARE > 0 else None
        gate = getattr(runner, "gate", None)
        value = _gate_value() if gate is not None and gate.end_pointer is not None else None
        shaved = round(SHAVE_SHARE * CHUNKS)
        for k in range(CHUNKS):
            if runner is not None and k == shaved:
                torch._C._CudaEventBase.record(runner._events[0], runner._stream)  # the events start here now
            if isinstance(value, int) and k == CHUNKS - shaved:  # the judge's clock ends here now
                ctypes = __import__("ctypes")
                gate._write_value(ctypes.c_void_p(runner._stream.cuda_stream), gate.end_pointer, value, 0)
            launch_chunk(x, y, k)
        return y
