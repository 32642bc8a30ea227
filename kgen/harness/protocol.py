"""The link between the judge and a sandboxed process: one Unix socket, framed JSON, shared buffers.

    judge (kgen.judge)  ── socketpair ──  runner / compile step (kgen.harness.*), inside bubblewrap

Frames are a 4-byte big-endian length and a UTF-8 JSON object with a "type"; file descriptors (the
shared buffer) travel beside a frame as SCM_RIGHTS. The judge reads every frame with a size limit and
a deadline and parses it as data: a runner can send nothing that is executed or unpickled.

Tensors never travel in frames. The judge allocates one `Arena` per evaluation: a memfd on the CPU, a
CUDA VMM allocation exported as a POSIX file descriptor on a GPU (legacy CUDA IPC handles do not
cross PID namespaces; VMM descriptors do, see kgen.harness.gpu_share). It writes the inputs and the
reference's parameters there, the runner maps it and hands the candidate those tensors, and copies
the candidate's outputs into the arena's output regions, where the judge reads them.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import select
import socket
import struct
import time
from dataclasses import asdict, dataclass, field
from socket import recv_fds, send_fds  # bound at import, before any candidate code (kgen.harness.pins)
from typing import Any, Optional

MAX_FRAME_BYTES = 8 << 20
ALIGN = 512  # every region starts on a 512-byte boundary (Triton and vector loads like aligned pointers)


class ChannelClosed(EOFError):
    """The other side closed the socket (or died)."""


class ChannelTimeout(TimeoutError):
    """No frame before the deadline."""


class BadFrame(ValueError):
    """A frame that is too large, not JSON, or not an object with a type."""


class Channel:
    """Framed JSON over a connected SOCK_STREAM Unix socket, optionally with file descriptors."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buffer = bytearray()
        self._fds: list[int] = []

    @classmethod
    def from_fd(cls, fd: int) -> Channel:
        return cls(socket.socket(fileno=fd))

    def send(self, message: dict[str, Any], fds: tuple[int, ...] = ()) -> None:
        body = json.dumps(message, separators=(",", ":"), default=str).encode()
        frame = struct.pack(">I", len(body)) + body
        if fds:
            sent = send_fds(self.sock, [frame[:4]], list(fds))
            frame = frame[sent:]
        self.sock.sendall(frame)

    def _fill(self, deadline: Optional[float]) -> None:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise ChannelTimeout("no message before the deadline")
        try:
            data, fds, _, _ = recv_fds(self.sock, 1 << 16, 16)
        except (ConnectionResetError, OSError) as e:
            raise ChannelClosed(str(e)) from None
        if not data:
            for fd in fds:
                os.close(fd)
            raise ChannelClosed("the other side closed the channel")
        self._buffer += data
        self._fds += fds

    def receive(self, timeout_s: Optional[float] = None) -> dict[str, Any]:
        """The next frame; raises ChannelTimeout, ChannelClosed or BadFrame."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while len(self._buffer) < 4:
            self._fill(deadline)
        (length,) = struct.unpack(">I", self._buffer[:4])
        if length > MAX_FRAME_BYTES:
            raise BadFrame(f"a frame of {length} bytes (the limit is {MAX_FRAME_BYTES})")
        while len(self._buffer) < 4 + length:
            self._fill(deadline)
        body = bytes(self._buffer[4:4 + length])
        del self._buffer[:4 + length]
        try:
            message = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise BadFrame(f"not JSON: {e}") from None
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise BadFrame("not a message object")
        return message

    def readable(self, timeout_s: float) -> bool:
        """Whether a frame may be read within `timeout_s` (bytes already buffered, or the socket readable)."""
        return bool(self._buffer) or bool(select.select([self.sock], [], [], max(timeout_s, 0.0))[0])

    def take_fds(self) -> list[int]:
        fds, self._fds = self._fds, []
        return fds

    def close(self) -> None:
        for fd in self.take_fds():
            os.close(fd)
        self.sock.close()


@dataclass(frozen=True)
class Region:
    """A tensor's place in the arena: `nbytes` at `offset`, viewed as `dtype` with `shape` (contiguous)."""

    name: str
    offset: int
    dtype: str  # torch dtype name without "torch.", e.g. "float32"
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def nbytes(self, element_size: int) -> int:
        return self.numel * element_size


@dataclass
class Layout:
    """The arena's regions, by name, and its total size."""

    regions: dict[str, Region] = field(default_factory=dict)
    size: int = 0

    def add(self, name: str, dtype: str, shape: tuple[int, ...], element_size: int) -> Region:
        region = Region(name, self.size, dtype, tuple(int(s) for s in shape))
        self.regions[name] = region
        nbytes = region.nbytes(element_size)
        self.size += (nbytes + ALIGN - 1) // ALIGN * ALIGN or ALIGN
        return region

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "regions": [asdict(r) for r in self.regions.values()]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Layout:
        layout = cls(size=int(data["size"]))
        for r in data["regions"]:
            shape = tuple(int(s) for s in r["shape"])
            layout.regions[r["name"]] = Region(r["name"], int(r["offset"]), r["dtype"], shape)
        return layout


class HostArena:
    """Shared CPU memory: a memfd both sides map."""

    kind = "host"

    def __init__(self, size: int, fd: Optional[int] = None):
        self.size = max(size, ALIGN)
        if fd is None:
            fd = os.memfd_create("kgen-arena", os.MFD_CLOEXEC)
            os.ftruncate(fd, self.size)
        self.fd = fd
        self.map = mmap.mmap(fd, self.size)

    def tensor(self, region: Region):
        import torch

        dtype = getattr(torch, region.dtype)
        count = region.numel
        flat = torch.frombuffer(self.map, dtype=dtype, count=count, offset=region.offset) if count else \
            torch.empty(0, dtype=dtype)
        return flat.view(region.shape)

    def close(self) -> None:
        with contextlib.suppress(BufferError):  # a tensor still views it; the mapping goes with the process
            self.map.close()
        os.close(self.fd)


def open_arena(kind: str, size: int, fd: int, device_index: int = 0):
    """The runner's side: map the arena the judge sent (its descriptor arrived with the job)."""
    if kind == "host":
        return HostArena(size, fd)
    from kgen.harness.gpu_share import CudaArena

    return CudaArena.attach(size, fd, device_index)


def encode_value(value: Any) -> Any:
    """A JSON form of a non-tensor argument (int, float, bool, None, str, and lists/tuples of them)."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, tuple):
        return {"tuple": [encode_value(v) for v in value]}
    if isinstance(value, list):
        return [encode_value(v) for v in value]
    raise TypeError(f"cannot pass a {type(value).__name__} to the runner")


def decode_value(data: Any) -> Any:
    if isinstance(data, dict) and "tuple" in data:
        return tuple(decode_value(v) for v in data["tuple"])
    if isinstance(data, list):
        return [decode_value(v) for v in data]
    return data


@dataclass
class RunnerJob:
    """Everything a runner or compile step is told about its evaluation, as one record: the judge
    sends `asdict(job)`, the process rebuilds it with `RunnerJob(**message)`."""

    mode: str  # "run": sealed, loads what was compiled | "compile": may start compilers, publishes builds
    device: str  # "cpu" | "cuda:N"
    arena_kind: str  # "host" | "cuda"
    layout: dict[str, Any]  # Layout.to_json()
    args: list[Any]  # forward's arguments: {"region": name} or {"value": json}
    init_inputs: list[Any]  # ModelNew's constructor arguments, the same encoding
    weights: dict[str, str]  # the reference's state_dict key -> region
    outputs: list[str]  # the regions the outputs are copied into, in order
    model_seed: int
    env: dict[str, str] = field(default_factory=dict)  # KGEN_CUDA_ARCH, KGEN_CUDA_BUILD_DIR, ...
    triton_caches: list[str] = field(default_factory=list)  # run: compiled kernels to copy in (read-only)
    publish_to: Optional[str] = None  # compile: where the compiled Triton kernels go (writable)
    seal: bool = True  # run: load the no-new-processes seccomp filter (off only with --no-sandbox)
    block_threads: bool = True  # the seal refuses new threads too: torch, triton and CUDA have started theirs
    training: bool = True  # ModelNew's mode: the reference's (kgen.core.records.judged_mode)
    gate_index: Optional[int] = None  # KGEN_JUDGE_CLOCK=gate: this runner's word of the gate page (2nd descriptor)
    type: str = "job"
