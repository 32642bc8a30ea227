"""The runner's side of the judge's gate clock (KGEN_JUDGE_CLOCK=gate, issue 28; the judge's side is
kgen.judge.gate_clock).

A timed run enqueues, on the runner's stream: a wait on a gate word the judge writes -> the runner's start
event -> forward -> the runner's end event -> an interprocess end event the judge polls from its host. The
judge opens the gate itself and stamps its own clock then, so a start event the candidate records again
mid-forward no longer shortens the judge's figure, and the end event is recorded by the runner after
forward returned (a later record only makes it later).

The end page: this runner's own page, unsealed, which its stream writes and the judge reads. Word STARTED_WORD
gets the run's value right behind the gate wait (before the start event): the judge reads it just before it
opens the gate, and a value already there means the stream did not wait. Word END_WORD gets it behind the end
event: the end the judge times to where it cannot open the interprocess event (legacy CUDA IPC does not cross
the sandbox's PID namespace: cudaErrorMapBufferObjectFailed on the H100). Word DONE_WORD gets it right behind
the forward's launches, before the end event, in runs whose gate was already open when forward returned (a
forward that waits on the GPU inside, or one whose launches outlast the shadow): the stream may have run dry
there, so each marker behind the forward lands only as the host enqueues it, and the end word came 8-10 us
after the end event on the H100 (fourteenth session); the judge's check of a shave times to this word instead.
All three are only as trustworthy as
this process: the candidate's host code and kernels can write the page too (kgen.judge.gate_clock says what
that allows and what still bounds it).

The gate page is a memfd the judge sealed against new writable mappings (F_SEAL_FUTURE_WRITE) before it
sent it: this process maps it read-only and registers it with the driver as read-only device memory,
so neither the candidate's host code nor its kernels can open the gate early. The wait is
cuStreamWaitValue32 on that word; where the driver refuses stream memory operations, a one-thread
kernel spins on it (probe 2's gate kernel, benchmarks/probe_ipc_clock2.py) with a timeout, so a gate
nobody opens cannot hang the GPU for good.
"""

from __future__ import annotations

import ctypes
import mmap
from typing import Any, Optional

PAGE_BYTES = 4096
WORD_BYTES = 4
END_WORD, STARTED_WORD, DONE_WORD = 0, 1, 2  # of a runner's end page
CU_MEMHOSTREGISTER_DEVICEMAP = 0x02
CU_MEMHOSTREGISTER_READ_ONLY = 0x08
CU_STREAM_WAIT_VALUE_GEQ = 0x0
GATE_KERNEL_TIMEOUT_NS = 10_000_000_000  # the spinning gate gives up after 10 s: the judge's deadline kills us first

# One thread spins until *flag >= value (or the global timer passes the timeout): the gate where stream
# memory operations are refused. Loaded by the driver from PTX: no nvcc, no Triton.
GATE_PTX = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry kgen_gate(.param .u64 flag, .param .u32 value, .param .u64 timeout_ns)
{
    .reg .pred %p<3>;
    .reg .b32 %r<3>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [flag];
    cvta.to.global.u64 %rd1, %rd1;
    ld.param.u32 %r1, [value];
    ld.param.u64 %rd2, [timeout_ns];
    mov.u64 %rd3, %globaltimer;
    add.s64 %rd3, %rd3, %rd2;
SPIN:
    ld.volatile.global.u32 %r2, [%rd1];
    setp.ge.u32 %p1, %r2, %r1;
    @%p1 bra DONE;
    mov.u64 %rd4, %globaltimer;
    setp.gt.u64 %p2, %rd4, %rd3;
    @%p2 bra DONE;
    bra SPIN;
DONE:
    ret;
}
"""


CODE_BYTES = 32  # of each driver function the gate calls: a patched entry (a jump elsewhere, a `ret`) changes them


def code_fingerprint(functions: list[Any]) -> tuple[tuple[int, bytes], ...]:
    """Where each ctypes function points and the first CODE_BYTES of its machine code: the gate is only as good
    as its wait, so a candidate that rewrites cuStreamWaitValue32 (its pointer or its code, with ctypes) to
    skip it is seen after the run (Runner.replaced)."""
    prints = []
    for function in functions:
        address = ctypes.cast(function, ctypes.c_void_p).value or 0
        prints.append((address, ctypes.string_at(address, CODE_BYTES) if address else b""))
    return tuple(prints)


class GateError(RuntimeError):
    """The gate cannot be set up here: the runner reports it and the judge keeps today's clock."""


def map_read_only(fd: int, size: int = PAGE_BYTES, writable: bool = False) -> int:
    """The address of a read-only shared mapping of `fd` (mmap(2) through libc: Python's mmap object
    hides the address of a read-only map). A writable shared mapping of the judge's sealed page fails;
    `writable`: of the runner's own end page."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
    address = libc.mmap(None, size, prot, mmap.MAP_SHARED, fd, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        raise GateError(f"cannot map the {'end' if writable else 'gate'} page: errno {ctypes.get_errno()}")
    return address


def read_word(address: int, index: int) -> int:
    """The gate word `index` as this process sees it (tests and diagnostics)."""
    return ctypes.c_uint32.from_address(address + WORD_BYTES * index).value


class Gate:
    """The runner's gate: word `index` of the judge's page, registered read-only with the driver, and the
    interprocess end event whose handle goes to the judge once (in the `sealed` message). Built before
    any candidate code exists in the process; every driver function it calls is bound here."""

    def __init__(self, torch: Any, fd: int, index: int, stream: Any, record: Any, end_fd: Optional[int] = None):
        if not 0 <= index < PAGE_BYTES // WORD_BYTES:
            raise GateError(f"gate word {index} is outside the page")
        self.index, self.stream, self._record = index, stream, record
        page = map_read_only(fd)
        self.host = page + WORD_BYTES * index
        self.cu = cu = ctypes.CDLL("libcuda.so.1")
        register = getattr(cu, "cuMemHostRegister_v2", None) or cu.cuMemHostRegister
        register.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
        self._check(register(ctypes.c_void_p(page), PAGE_BYTES,
                             CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_READ_ONLY),
                    "cuMemHostRegister (read-only)")
        pointer = ctypes.c_uint64()
        get_pointer = getattr(cu, "cuMemHostGetDevicePointer_v2", None) or cu.cuMemHostGetDevicePointer
        self._check(get_pointer(ctypes.byref(pointer), ctypes.c_void_p(page), 0), "cuMemHostGetDevicePointer")
        self.device_pointer = pointer.value + WORD_BYTES * index
        self._wait_value = getattr(cu, "cuStreamWaitValue32_v2", None) or cu.cuStreamWaitValue32
        self._wait_value.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        self._launch = cu.cuLaunchKernel
        self._launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        self.kernel = None
        # a wait on 0 passes at once: whether this driver takes stream memory operations at all
        if self._wait_value(ctypes.c_void_p(stream.cuda_stream), self.device_pointer, 0, CU_STREAM_WAIT_VALUE_GEQ):
            module, function = ctypes.c_void_p(), ctypes.c_void_p()
            self._check(cu.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(GATE_PTX.encode())),
                        "cuModuleLoadData (the gate kernel)")
            self._check(cu.cuModuleGetFunction(ctypes.byref(function), module, b"kgen_gate"), "kgen_gate")
            self.kernel = function
        self.kind = "cuStreamWaitValue32" if self.kernel is None else "gate kernel (stream memory operations refused)"
        # cudaEventInterprocess | cudaEventDisableTiming: its state is shared, the judge queries it from its host.
        # Legacy CUDA IPC may not cross the sandbox's PID and IPC namespaces (its memory handles do not): then the
        # end word below, a word of this runner's own end page the stream writes after the end event, stands in
        # (weaker: a kernel of this process could write it too; the judge says which end it used)
        self.end_event, self.end_event_error = None, None
        try:
            self.end_event = torch.cuda.Event(enable_timing=False, interprocess=True)
            self._record(self.end_event, stream)
            self.end_handle = bytes(self.end_event.ipc_handle()).hex()
        except Exception as e:  # noqa: BLE001 - the end word is the judge's alternative
            self.end_event, self.end_event_error = None, f"{type(e).__name__}: {e}"[:300]
        self.end_pointer, self._write_value = None, None
        if end_fd is not None:
            end_host = map_read_only(end_fd, writable=True)
            self._check(register(ctypes.c_void_p(end_host), PAGE_BYTES, CU_MEMHOSTREGISTER_DEVICEMAP),
                        "cuMemHostRegister (the end page)")
            self._check(get_pointer(ctypes.byref(pointer), ctypes.c_void_p(end_host), 0), "cuMemHostGetDevicePointer")
            self.end_pointer = pointer.value
            self._write_value = getattr(cu, "cuStreamWriteValue32_v2", None) or cu.cuStreamWriteValue32
            self._write_value.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
            if self.kernel is not None:  # no stream memory operations: no end word either
                self.end_pointer = None
        if self.end_event is None and self.end_pointer is None:
            raise GateError(f"no end signal the judge can see: the interprocess event failed ({self.end_event_error})"
                            " and stream memory operations are refused")
        torch.cuda.synchronize()
        self.functions = [f for f in (self._wait_value, self._write_value, self._launch) if f is not None]
        self.fingerprint = code_fingerprint(self.functions)

    def rewritten(self) -> bool:
        """Whether a driver function the gate calls points elsewhere or runs other code than at the start."""
        return code_fingerprint(self.functions) != self.fingerprint

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            text = ctypes.c_char_p()
            self.cu.cuGetErrorString(status, ctypes.byref(text))
            raise GateError(f"{what}: CUDA driver error {status} ({(text.value or b'?').decode()})")

    def describe(self) -> dict[str, Any]:
        """What the judge needs, sent once: the end event's handle (or why there is none), whether the end and
        started words are written, and how the gate waits."""
        return {"end_event": self.end_handle if self.end_event is not None else None,
                "end_event_error": self.end_event_error, "end_word": self.end_pointer is not None,
                "started_word": self.end_pointer is not None, "done_word": self.end_pointer is not None,
                "wait": self.kind, "index": self.index}

    def wait(self, value: int) -> None:
        """Enqueue, on the runner's stream, a wait until the gate word reaches `value`, and behind it the
        started word = `value` (where stream memory operations work)."""
        stream = ctypes.c_void_p(self.stream.cuda_stream)
        if self.kernel is None:
            self._check(self._wait_value(stream, self.device_pointer, value & 0xFFFFFFFF, CU_STREAM_WAIT_VALUE_GEQ),
                        "cuStreamWaitValue32")
            if self.end_pointer is not None:
                self._check(self._write_value(stream, self.end_pointer + WORD_BYTES * STARTED_WORD,
                                              value & 0xFFFFFFFF, 0), "cuStreamWriteValue32 (the started word)")
            return
        values = [ctypes.c_uint64(self.device_pointer), ctypes.c_uint32(value & 0xFFFFFFFF),
                  ctypes.c_uint64(GATE_KERNEL_TIMEOUT_NS)]
        params = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
        self._check(self._launch(self.kernel, 1, 1, 1, 1, 1, 1, 0, stream, ctypes.cast(params, ctypes.c_void_p), None),
                    "the gate kernel's launch")

    def mark_done(self, value: int) -> None:
        """Right behind the forward's launches, before the end event: the done word = `value` if the gate is
        open already (the stream may be dry: the judge times a shave to this word, not to the end word that
        the host enqueues microseconds later). Behind a closed gate every marker is queued before the stream
        runs, back to back, and nothing is written (no extra work in the timed window of a forward that was
        queued ahead)."""
        if self.end_pointer is not None and ctypes.c_uint32.from_address(self.host).value >= value & 0xFFFFFFFF:
            self._check(self._write_value(ctypes.c_void_p(self.stream.cuda_stream),
                                          self.end_pointer + WORD_BYTES * DONE_WORD, value & 0xFFFFFFFF, 0),
                        "cuStreamWriteValue32 (the done word)")

    def record_end(self, value: int) -> None:
        """The interprocess end event, right behind the runner's own end event, and the end word = `value` (the
        run's gate value) behind it."""
        if self.end_event is not None:
            self._record(self.end_event, self.stream)
        if self.end_pointer is not None:
            self._check(self._write_value(ctypes.c_void_p(self.stream.cuda_stream),
                                          self.end_pointer + WORD_BYTES * END_WORD, value & 0xFFFFFFFF, 0),
                        "cuStreamWriteValue32")
