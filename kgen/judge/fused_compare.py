"""The judge's measures of an output against its float64 reference, fused into two Triton passes.

kgen.judge.verify defines the measures (its module docstring: the tolerance rule) with torch operations, in
chunks of COMPARE_CHUNK_ELEMENTS: on a GPU that is ~15 float64 elementwise kernels per chunk, each reading and
writing a float64 temporary (softmax's 268M-element output: ~60 GB of memory traffic per compare, ~30 ms on
the H100, and a trial runs `own_error` and `compare`, ~14 trials and checked timed runs a candidate). Here, for
the common case (a GPU output and reference, every element finite, nothing excused), each pass reads the
output and the reference once and writes one partial per block:
  pass 1: non-finite elements (output or reference) and sum ref^2;
  pass 2: sum diff^2, max diff, max diff / max(|ref|, floor), max diff / (floor + |ref|), the elements
          with diff > tol * (rms + |ref|) and the first of them; diff = |out - ref| in float64.
The partials are reduced with torch. The two sums add the same float64 terms in another order (a relative
difference near 1e-16, far below any bar), and the ratios' floor is the rms, a sum's root: max |diff| is exactly
verify's, the ratios and the counts against a bar of rms + |ref| are to that rounding (float64 division is
IEEE-rounded in both). Anything else (a host reference, a non-finite element, an
excused overflow, a dtype other than the float ones) takes verify's general path, which stays the
definition. KGEN_FUSED_COMPARE=0 turns this off (an A/B of the judge's cost).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Optional

import torch

BLOCK = 2048
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
ON_CPU = False  # tests set it (in a process with TRITON_INTERPRET=1): the same kernels in Triton's interpreter

_kernels = None
# why the fused passes are off in this process (a GPU or Triton that cannot compile or run them): verify's torch
# path does the same work, so a failure here costs speed, never a verdict
broken: Optional[str] = None


def disable(error: BaseException) -> None:
    """Turn the fused passes off for this process after `error` (the caller then takes verify's torch path)."""
    global broken
    broken = f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"


def _build():
    """The two kernels, defined on first use: kgen imports verify on machines without Triton."""
    global _kernels
    if _kernels is not None:
        return _kernels
    import triton
    import triton.language as tl

    @triton.jit
    def finite_and_ref_sq(out_ptr, ref_ptr, n, bad_ptr, sq_ptr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        o = tl.load(out_ptr + offs, mask=inside, other=0.0).to(tl.float64)
        r = tl.load(ref_ptr + offs, mask=inside, other=0.0).to(tl.float64)
        bad = (o != o) | (tl.abs(o) == float("inf")) | (r != r) | (tl.abs(r) == float("inf"))
        tl.store(bad_ptr + pid, tl.sum(bad.to(tl.int32), axis=0))
        tl.store(sq_ptr + pid, tl.sum(r * r, axis=0))

    @triton.jit
    def errors(out_ptr, ref_ptr, n, params_ptr, sq_ptr, max_ptr, rel_ptr, elem_ptr, off_ptr, first_ptr,
               BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = offs < n
        # float64 scalars come in memory: a Python float argument would be specialized as float32
        floor = tl.load(params_ptr)
        rms = tl.load(params_ptr + 1)
        tol = tl.load(params_ptr + 2)
        o = tl.load(out_ptr + offs, mask=inside, other=0.0).to(tl.float64)
        r = tl.load(ref_ptr + offs, mask=inside, other=0.0).to(tl.float64)
        diff = tl.abs(o - r)  # 0 outside: it adds nothing to any measure
        abs_ref = tl.abs(r)
        tl.store(sq_ptr + pid, tl.sum(diff * diff, axis=0))
        tl.store(max_ptr + pid, tl.max(diff, axis=0))
        tl.store(rel_ptr + pid, tl.max(diff / tl.maximum(abs_ref, floor), axis=0))
        tl.store(elem_ptr + pid, tl.max(diff / (floor + abs_ref), axis=0))
        too_far = (diff > tol * (rms + abs_ref)) & inside
        tl.store(off_ptr + pid, tl.sum(too_far.to(tl.int32), axis=0))
        tl.store(first_ptr + pid, tl.min(tl.where(too_far, offs, n), axis=0))

    _kernels = (finite_and_ref_sq, errors)
    return _kernels


def usable(flat_out: torch.Tensor, flat_ref: torch.Tensor) -> bool:
    """Whether the fused passes apply: a float output and a float64 reference on the same GPU (or the CPU under
    Triton's interpreter, ON_CPU), contiguous, of the same length, with int64 offsets to spare."""
    if os.environ.get("KGEN_FUSED_COMPARE", "1") == "0" or broken is not None:
        return False
    if flat_out.device != flat_ref.device or (flat_out.device.type != "cuda" and not ON_CPU):
        return False
    if flat_out.dtype not in FLOAT_DTYPES or flat_ref.dtype != torch.float64:
        return False
    if flat_out.numel() != flat_ref.numel() or not 0 < flat_out.numel() < 2 ** 40:
        return False
    if not (flat_out.is_contiguous() and flat_ref.is_contiguous()):  # a strided view: the torch path reads it
        return False
    try:
        _build()
    except Exception:  # noqa: BLE001 - no usable Triton here: verify's torch path does the same work
        return False
    return True


def warm(device, dtype: torch.dtype = torch.float32) -> None:
    """Compile both kernels for a `dtype` output now (Triton keeps them in its cache on disk, which the
    evaluators on this machine read): the search does it beside Ray's start, so the first evaluation's
    warm-up does not. A length divisible by 16, as most outputs are (Triton specializes on it)."""
    out = torch.randn(4096, device=device).to(dtype)
    measure(out, out.to(torch.float64), 1e-5)


def _blocks(n: int) -> int:
    return math.ceil(n / BLOCK)


@dataclass
class Errors:
    diff_sq: float  # sum |out - ref|^2
    max_abs: float  # max |out - ref|
    max_rel: float  # max |out - ref| / max(|ref|, floor)
    elem: float  # max |out - ref| / (floor + |ref|)
    off: int  # elements with |out - ref| > tol * (rms + |ref|)
    first_off: Optional[int]  # the first of them (flat index)


@dataclass
class Measures:
    ref_sq: float  # sum ref^2
    rms: float  # rms(ref) = sqrt(ref_sq) / sqrt(n), as verify.compare takes it
    errors: Errors  # pass 2, floored at max(rms, 1e-300), elements off against `tol`


def measure(flat_out: torch.Tensor, flat_ref: torch.Tensor, tol: float) -> Optional[Measures]:
    """Both passes, where they apply (`usable`) and every element is finite; None sends the caller to verify's
    torch path: not usable here, a non-finite element, or Triton failing to compile or run them (which turns
    them off for this process, `disable`)."""
    if not usable(flat_out, flat_ref):
        return None
    try:
        ref_sq = _finite_ref_sq(flat_out, flat_ref)
        if ref_sq is None:
            return None
        rms = math.sqrt(ref_sq) / math.sqrt(flat_ref.numel())
        return Measures(ref_sq, rms, _errors(flat_out, flat_ref, max(rms, 1e-300), rms, tol))
    except Exception as e:  # noqa: BLE001 - Triton could not compile or run them here: the torch path instead
        disable(e)
        return None


def _finite_ref_sq(out: torch.Tensor, ref: torch.Tensor) -> Optional[float]:
    """Pass 1: sum ref^2 over all elements when the output and the reference are finite everywhere, else None."""
    kernel, _ = _build()
    blocks = _blocks(out.numel())
    bad = torch.empty(blocks, dtype=torch.int32, device=out.device)
    sq = torch.empty(blocks, dtype=torch.float64, device=out.device)
    kernel[(blocks,)](out, ref, out.numel(), bad, sq, BLOCK=BLOCK)
    nonfinite, ref_sq = torch.stack([bad.sum().to(torch.float64), sq.sum()]).tolist()
    return None if nonfinite else ref_sq


def _errors(out: torch.Tensor, ref: torch.Tensor, floor: float, rms: float, tol: float) -> Errors:
    """Pass 2 over finite data: verify.compare's measures, and own_error's."""
    _, kernel = _build()
    n = out.numel()
    blocks = _blocks(n)
    device = out.device
    params = torch.tensor([floor, rms, tol], dtype=torch.float64, device=device)
    sq, mx, rel, elem = (torch.empty(blocks, dtype=torch.float64, device=device) for _ in range(4))
    off = torch.empty(blocks, dtype=torch.int32, device=device)
    first = torch.empty(blocks, dtype=torch.int64, device=device)
    kernel[(blocks,)](out, ref, n, params, sq, mx, rel, elem, off, first, BLOCK=BLOCK)
    floats = torch.stack([sq.sum(), mx.max(), rel.max(), elem.max()]).tolist()
    counts = torch.stack([off.sum().to(torch.int64), first.min()]).tolist()
    first_off = int(counts[1]) if counts[0] else None
    return Errors(floats[0], floats[1], floats[2], floats[3], int(counts[0]), first_off)
