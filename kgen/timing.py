"""Timing (GPU only): the median time of a forward, measured so that a candidate cannot hide work.

Each run: flush L2 (write a 256 MB buffer), record the start event, call forward on the next input
set of a rotation, synchronize the whole device (work on any side stream is waited for), record the
end event. Warm-up first; then at least `min_runs` runs and `min_s` seconds. The event and
synchronize functions are the C-level ones captured when this module is imported (before any
candidate), and `tampered()` says whether anything reachable from torch was swapped since.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

L2_FLUSH_BYTES = 256 << 20
WARMUP_RUNS = 10
WARMUP_MAX_S = 2.0
MAX_RUNS = 10_000
MAX_TIMED_S = 30.0

# The functions timing relies on, captured at import (the worker imports this before the candidate).
_TIMING_NAMES = ("torch.cuda.Event", "torch.cuda.Event.record", "torch.cuda.Event.elapsed_time",
                 "torch.cuda.Event.synchronize", "torch.cuda.synchronize", "torch.cuda.current_stream",
                 "torch._C._cuda_synchronize", "torch.cuda.Stream", "torch.cuda.default_stream")


def _resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    obj: Any = torch
    for part in parts[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


@dataclass(frozen=True)
class TimingStats:
    median_ms: float
    mean_ms: float
    min_ms: float
    p10_ms: float
    p90_ms: float
    runs: int
    warmup_runs: int


def _cuda_event_base():
    return getattr(torch._C, "_CudaEventBase", None)


class _Clock:
    """CUDA events and device-wide synchronize through C-level functions captured now."""

    def __init__(self):
        base = _cuda_event_base()
        self.event_class = base
        self.record = getattr(base, "record", None)
        self.elapsed = getattr(base, "elapsed_time", None)
        self.sync = getattr(torch._C, "_cuda_synchronize", None)

    def new_event(self):
        return self.event_class(enable_timing=True)

    def stamp(self, event) -> None:
        self.record(event, torch.cuda.current_stream())


_CLOCK = _Clock()


def flush_l2(buffer: torch.Tensor) -> None:
    buffer.fill_(1)


def time_forward(forward: Callable[..., Any], input_sets: list[list[Any]], min_runs: int = 100,
                 min_s: float = 1.0, on_output: Callable[[Any, int], None] | None = None) -> TimingStats:
    """Median time of `forward(*inputs)` over a rotation of input sets; `on_output(out, set_index)` sees
    the last timed output (kept alive until then, every other one dropped at once)."""
    clock = _CLOCK
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    warm_started = time.perf_counter()
    warmup = 0
    with torch.no_grad():
        while warmup < WARMUP_RUNS and (warmup < 2 or time.perf_counter() - warm_started < WARMUP_MAX_S):
            forward(*input_sets[warmup % len(input_sets)])
            warmup += 1
        clock.sync()
        times: list[float] = []
        started = time.perf_counter()
        spent_ms = 0.0
        out = None
        index = 0
        while len(times) < MAX_RUNS and (len(times) < min_runs or spent_ms < min_s * 1e3) \
                and time.perf_counter() - started < MAX_TIMED_S + min_s:
            index = len(times) % len(input_sets)
            flush_l2(flush)
            start, end = clock.new_event(), clock.new_event()
            out = None
            clock.stamp(start)
            out = forward(*input_sets[index])
            clock.sync()
            clock.stamp(end)
            clock.sync()
            elapsed = clock.elapsed(start, end)
            times.append(elapsed)
            spent_ms += elapsed
        if on_output is not None:
            on_output(out, index)
    del flush
    ordered = sorted(times)
    return TimingStats(median_ms=statistics.median(ordered), mean_ms=statistics.fmean(ordered), min_ms=ordered[0],
                       p10_ms=ordered[len(ordered) // 10], p90_ms=ordered[(len(ordered) * 9) // 10],
                       runs=len(ordered), warmup_runs=warmup)


def snapshot_timing_functions() -> dict[str, Any]:
    """Identity (and code object) of everything timing relies on, to compare after the candidate ran."""
    snap: dict[str, Any] = {}
    for name in _TIMING_NAMES:
        obj = _resolve(name)
        snap[name] = (obj, getattr(obj, "__code__", None))
    snap["kgen.timing._CLOCK"] = (_CLOCK, None)
    for attr in ("record", "elapsed", "sync", "event_class"):
        snap[f"kgen.timing._CLOCK.{attr}"] = (getattr(_CLOCK, attr), None)
    return snap


def tampered(snapshot: dict[str, Any]) -> list[str]:
    """Names in `snapshot` whose object or code changed."""
    changed = []
    for name, (obj, code) in snapshot.items():
        if name == "kgen.timing._CLOCK":
            now = _CLOCK
        elif name.startswith("kgen.timing._CLOCK."):
            now = getattr(_CLOCK, name.rsplit(".", 1)[1], None)
        else:
            now = _resolve(name)
        if now is not obj or getattr(now, "__code__", None) is not code:
            changed.append(name)
    return changed
