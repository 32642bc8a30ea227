"""Roofline: the fewest bytes a kernel must move and the FLOPs it must do, and the device's ceilings.

Bytes: every input and parameter read once, every output written once. FLOPs: torch's FLOP counter
(matmul, conv ...) on the meta device, or the problem's own `KGEN_FLOPS` where the counter does not
count its operators (softmax, norms). Ceilings are measured once per device (a large device-to-device
copy for bandwidth; large matmuls for FLOP/s: fp32 with TF32 off, TF32, fp16/bf16) and cached in a JSON file.

The compute ceiling is the fastest arithmetic that can still pass the accuracy check, because the floor
is used to call a time physically impossible (`suspicious`), and a legitimate kernel must never be:
  * fp32 problems at the default tolerance (1e-5): plain TF32 fails it, but error-compensated 3xTF32
    (three TF32 products per fp32 product) passes, so the ceiling is max(fp32 FMA, TF32 / 3);
  * fp32 problems under a looser --rtol (TF32 lands near 3e-4, fp16/bf16 near 5e-4 to 4e-3): any
    tensor-core rate, so max(fp32, TF32, fp16/bf16);
  * fp16/bf16 problems: the 16-bit tensor-core rate.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from kgen.problems import Problem

FP32_DEFAULT_RTOL = 1e-5  # kgen.verify's default for fp32; anything looser admits plain TF32 / 16-bit math


@dataclass(frozen=True)
class Roofline:
    bytes_moved: int
    flops: int
    dtype: str = "float32"  # the problem's floating dtype: it decides which arithmetic may pass the check

    def compute_rate(self, ceilings: Ceilings, rtol: float | None = None) -> float:
        """FLOP/s of the fastest arithmetic that can pass the accuracy check (module docstring)."""
        rate = ceilings.fp32_flops_per_s
        if self.dtype in ("float16", "bfloat16"):
            return max(rate, ceilings.half_flops_per_s)
        if self.dtype == "float32" and (rtol is None or rtol <= FP32_DEFAULT_RTOL):
            return max(rate, ceilings.tf32_flops_per_s / 3)
        return max(rate, ceilings.tf32_flops_per_s, ceilings.half_flops_per_s)

    def floor_ms(self, ceilings: Ceilings | None, rtol: float | None = None) -> float | None:
        if ceilings is None:
            return None
        return 1e3 * max(self.bytes_moved / ceilings.bandwidth_bytes_per_s,
                         self.flops / self.compute_rate(ceilings, rtol))

    def bound(self, ceilings: Ceilings, rtol: float | None = None) -> str:
        mem = self.bytes_moved / ceilings.bandwidth_bytes_per_s
        return "memory" if mem >= self.flops / self.compute_rate(ceilings, rtol) else "compute"


@dataclass(frozen=True)
class Ceilings:
    device: str
    bandwidth_bytes_per_s: float
    fp32_flops_per_s: float      # fp32 FMA (TF32 off)
    torch_version: str
    measured_at: float
    tf32_flops_per_s: float = 0.0  # TF32 tensor cores
    half_flops_per_s: float = 0.0  # 16-bit tensor cores (the faster of fp16 and bf16)


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
    return Roofline(bytes_moved=int(moved), flops=flops, dtype=problem.dtype)


def _cache_path() -> Path:
    from kgen.resources import cache_dir

    return cache_dir() / "ceilings.json"


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
    """Measure HBM bandwidth (1 GiB copy, bytes read + written) and FLOP/s of 8192³ matmuls: fp32 with
    TF32 off, TF32, and the faster of fp16 and bf16."""
    with torch.cuda.device(device_index):
        src = torch.randn(1 << 28, device="cuda")  # 1 GiB fp32
        dst = torch.empty_like(src)
        copy_ms = _median_ms(lambda: dst.copy_(src), 20)
        bandwidth = 2 * _nbytes(src) / (copy_ms / 1e3)
        del src, dst
        prev = torch.backends.cuda.matmul.allow_tf32
        n = 8192
        a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
        rate = lambda ms: 2 * n**3 / (ms / 1e3)
        try:
            torch.backends.cuda.matmul.allow_tf32 = False
            fp32 = rate(_median_ms(lambda: a @ b, 10))
            torch.backends.cuda.matmul.allow_tf32 = True
            tf32 = rate(_median_ms(lambda: a @ b, 10))  # a GPU without TF32 runs fp32 here: same rate
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
        half = 0.0  # the faster of fp16 and bf16 (a V100 has fp16 tensor cores and no bf16 ones)
        for dtype in (torch.float16, torch.bfloat16):
            try:
                a16, b16 = a.to(dtype), b.to(dtype)
                half = max(half, rate(_median_ms(lambda: a16 @ b16, 10)))
                del a16, b16
            except RuntimeError:  # no matmul of that type on this GPU
                pass
        del a, b
        return Ceilings(device=torch.cuda.get_device_name(device_index), bandwidth_bytes_per_s=bandwidth,
                        fp32_flops_per_s=fp32, torch_version=torch.__version__, measured_at=time.time(),
                        tf32_flops_per_s=tf32, half_flops_per_s=half)


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
    cached = cache.get(key)
    if isinstance(cached, dict) and "tf32_flops_per_s" in cached and "half_flops_per_s" in cached:
        return Ceilings(**cached)  # entries from before the tensor-core rates were measured are re-measured
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
