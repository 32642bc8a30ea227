"""Which problems' baselines a collection starts next, on which evaluator, and how many at once.

A collection of hundreds of entries over ~100 problems has ~100 baselines to time (eager and torch.compile,
each in a child process of its own: kgen.judge.baselines). Their compile is CPU work and many can run at once;
only their timed runs take the GPU's timing lock. What limits how many are in flight on one evaluator:
- the GPU's memory: each child holds a CUDA context, the L2 flush buffer, the reference's parameters, inputs,
  outputs and intermediates (`footprint_bytes`); together they get at most BASELINE_MEMORY_SHARE of the free
  memory its evaluator measured at the start, the rest is the candidates';
- the CPUs: at most one per CPUS_PER_BASELINE of the evaluator's share of the cluster's CPUs (the compile stage's
  builds and the judge's sandboxes need the others).
Order: a problem whose candidates are compiled and queued for an evaluator comes first (its speedups are
wanted now), then the problems in the order their entries were sent to the compile stage (the order they
will reach the GPU).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Optional

# CUDA context, allocator slack and the 256 MB L2 flush buffer of one baseline child (an H100's context alone is
# ~500 MB), beside what the reference itself holds
BASELINE_PROCESS_BYTES = 1 << 30
# the reference's parameters + inputs + outputs (bytes it moves at least), times this: a second set of inputs
# drawn while the first is alive, intermediates, torch.compile's own buffers
TENSOR_FACTOR = 4
# the share of an evaluator's free GPU memory its baselines may hold together; its candidates get the rest
BASELINE_MEMORY_SHARE = 0.5
# one baseline child in flight per this many of an evaluator's CPUs (each compiles on one thread:
# TORCHINDUCTOR_COMPILE_THREADS=1), at least MIN_BASELINES
CPUS_PER_BASELINE = 2
MIN_BASELINES = 2


def baselines_per_evaluator(cluster_cpus: int, evaluators: int) -> int:
    """How many baselines one evaluator runs at once at most (its actor's "baselines" concurrency group):
    by its share of the cluster's CPUs."""
    return max(MIN_BASELINES, cluster_cpus // max(evaluators, 1) // CPUS_PER_BASELINE)


def footprint_bytes(problem) -> Optional[int]:
    """What one baseline child of `problem` holds on its GPU, estimated from the reference's tensors (shapes on
    the meta device: no memory, no time); None when the reference does not run on the meta device."""
    try:
        from kgen.problems.roofline import compute_roofline

        return BASELINE_PROCESS_BYTES + TENSOR_FACTOR * compute_roofline(problem).bytes_moved
    except Exception:  # noqa: BLE001 - unknown size: the queue runs it alone on its evaluator
        return None


@dataclass
class _Slot:
    """One evaluator's baselines: its memory budget (None: not measured, only the count limits) and what it holds."""

    budget_bytes: Optional[int]
    held: dict = field(default_factory=dict)  # problem key -> bytes (None: unknown size, it runs alone)

    def fits(self, size: Optional[int], cap: int) -> bool:
        if not self.held:
            return True  # one at a time always goes, however big: the baselines must be timed
        if len(self.held) >= cap or size is None or None in self.held.values():
            return False
        return self.budget_bytes is None or sum(self.held.values()) + size <= self.budget_bytes


class BaselineQueue:
    """The problems whose baselines are missing, started in `order` (keys, first to reach the GPU first) as
    memory and CPUs allow. `start(key, index)` sends one to evaluator `index`; `next_starts` returns what to send
    now, `finished` frees its room."""

    def __init__(self, order: Iterable[str], sizes: dict[str, Optional[int]], free_bytes: list[Optional[int]],
                 cap: int):
        self.waiting = list(order)
        self.sizes = sizes
        self.cap = cap
        self.slots = [_Slot(int(free * BASELINE_MEMORY_SHARE) if free else None) for free in free_bytes]
        self.where: dict[str, int] = {}  # key in flight -> evaluator index

    def next_starts(self, queued_first: Iterable[str] = ()) -> list[tuple[str, int]]:
        """(problem key, evaluator index) for each baseline to start now: the problems in `queued_first` (those
        with candidates waiting for an evaluator) ahead of the rest, each on the evaluator with the most room."""
        urgent = [k for k in dict.fromkeys(queued_first) if k in self.waiting]
        ordered = urgent + [k for k in self.waiting if k not in urgent]
        starts = []
        for key in ordered:
            index = self._room_for(self.sizes.get(key))
            if index is None:
                continue  # no room for this one now: smaller ones behind it may still fit
            self.waiting.remove(key)
            self.slots[index].held[key] = self.sizes.get(key)
            self.where[key] = index
            starts.append((key, index))
        return starts

    def _room_for(self, size: Optional[int]) -> Optional[int]:
        fitting = [i for i, s in enumerate(self.slots) if s.fits(size, self.cap)]
        if not fitting:
            return None

        def room(i: int) -> tuple[float, int]:  # the most memory left, then the fewest in flight
            slot = self.slots[i]
            left = 0 if slot.budget_bytes is None else slot.budget_bytes - sum(v or 0 for v in slot.held.values())
            return left, -len(slot.held)

        return max(fitting, key=room)

    def finished(self, key: str) -> None:
        index = self.where.pop(key)
        self.slots[index].held.pop(key, None)

    @property
    def in_flight(self) -> int:
        return len(self.where)

    def __bool__(self) -> bool:
        return bool(self.waiting or self.where)
