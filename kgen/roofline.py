"""Roofline: the fewest bytes a kernel must move and the FLOPs it must do, and the device's ceilings.

Bytes: every input and parameter read once, every output written once. FLOPs: torch's FLOP counter
(matmul, conv ...) on the meta device, or the problem's own `KGEN_FLOPS` where the counter does not
count its operators (softmax, norms). Ceilings are measured once per device (a large device-to-device
copy for bandwidth, a large fp32 matmul with TF32 off for FLOP/s) and cached in a JSON file.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from kgen.problems import Problem


@dataclass(frozen=True)
class Roofline:
    bytes_moved: int
    flops: int

    def floor_ms(self, ceilings: "Ceilings | None") -> float | None:
        if ceilings is None:
            return None
        return 1e3 * max(self.bytes_moved / ceilings.bandwidth_bytes_per_s, self.flops / ceilings.fp32_flops_per_s)

    def bound(self, ceilings: "Ceilings") -> str:
        mem = self.bytes_moved / ceilings.bandwidth_bytes_per_s
        return "memory" if mem >= self.flops / ceilings.fp32_flops_per_s else "compute"


@dataclass(frozen=True)
class Ceilings:
    device: str
    bandwidth_bytes_per_s: float
    fp32_flops_per_s: float
    torch_version: str
    measured_at: float


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def compute_roofline(problem: Problem) -> Roofline:
    with torch.device("meta"):
        model = problem.module.Model(*problem.init_inputs())
        inputs = list(problem.module.get_inputs())
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            out = model(*inputs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    state = list(model.parameters()) + list(model.buffers())
    moved = (sum(_nbytes(x) for x in inputs if isinstance(x, torch.Tensor)) + sum(_nbytes(t) for t in state)
             + sum(_nbytes(o) for o in outs if isinstance(o, torch.Tensor)))
    declared = getattr(problem.module, "KGEN_FLOPS", None)
    flops = int(declared) if declared is not None else int(counter.get_total_flops())
    return Roofline(bytes_moved=int(moved), flops=flops)


def _cache_path() -> Path:
    root = os.environ.get("KGEN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "kgen")
    return Path(root) / "ceilings.json"


def _median_ms(fn, reps: int) -> float:
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    for i in range(reps):
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(start, end))
    return times[len(times) // 2]


def measure_ceilings(device_index: int = 0) -> Ceilings:
    """Measure HBM bandwidth (1 GiB copy, bytes read + written) and fp32 FLOP/s (8192³, TF32 off)."""
    with torch.cuda.device(device_index):
        src = torch.randn(1 << 28, device="cuda")  # 1 GiB fp32
        dst = torch.empty_like(src)
        copy_ms = _median_ms(lambda: dst.copy_(src), 20)
        bandwidth = 2 * _nbytes(src) / (copy_ms / 1e3)
        del src, dst
        prev = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            n = 8192
            a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
            mm_ms = _median_ms(lambda: a @ b, 10)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
        flops = 2 * n**3 / (mm_ms / 1e3)
        return Ceilings(device=torch.cuda.get_device_name(device_index), bandwidth_bytes_per_s=bandwidth,
                        fp32_flops_per_s=flops, torch_version=torch.__version__, measured_at=time.time())


def device_ceilings(measure: bool = True) -> Ceilings | None:
    """This machine's GPU ceilings, from the cache or measured now; None without a GPU."""
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(0)
    path = _cache_path()
    cache: dict = {}
    if path.is_file():
        try:
            cache = json.loads(path.read_text())
        except (OSError, ValueError):
            cache = {}
    key = f"{name}|{torch.__version__}"
    if key in cache:
        return Ceilings(**cache[key])
    if not measure:
        return None
    ceilings = measure_ceilings(0)
    cache[key] = asdict(ceilings)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cache, indent=1))
    except OSError:
        pass  # an unwritable cache costs a re-measure next time, nothing else
    return ceilings
