"""Verify: is a candidate's output the reference's, to the dtype's tolerance?

The reference runs in float64 on the same inputs. An output passes when
  - it is exactly a `torch.Tensor` (a subclass could defer its work until read), strided, with the
    reference's shape, dtype and device;
  - it has NaN/Inf exactly where the reference does (never where the reference is finite);
  - its normwise relative error ‖out − ref‖ / ‖ref‖ is ≤ rtol (1e-5 for fp32: fp32 arithmetic lands
    near 1e-7, TF32 near 3e-4 and fp16 near 5e-4, so those shortcuts fail unless the user loosens
    rtol; 1e-2 for fp16/bf16);
  - every element is close: |out − ref| ≤ atol + rtol·|ref|, with atol = rtol · rms(ref).
    Why that atol: an element whose exact value is near zero is computed from terms of the output's
    typical size (a dot product, a normalized difference), so its rounding error scales with that
    typical size, not with the element: rms(ref) measures it. The root-mean-square rather than the
    max so one large element cannot loosen every other one; scaled by rtol so it stays far below
    any element of typical size: an output of zeros (softmax over 65536 columns has outputs near
    1.5e-5, so a plain atol of 1e-4 would pass zeros) fails on every element near the rms.
max_rel_err reports max |out − ref| / max(|ref|, rms(ref)) over elements: relative to the element,
floored at the output's typical size.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Optional

import torch

DEFAULT_RTOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2, torch.float64: 1e-7}
# Every byte 0xFF: a NaN in fp16, bf16, fp32 and fp64 alike.
POISON_BYTE = 0xFF


def default_rtol(dtype: torch.dtype) -> float:
    return DEFAULT_RTOL.get(dtype, 1e-5)


@dataclass
class Comparison:
    ok: bool
    message: str = ""
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None
    norm_rel_err: Optional[float] = None
    atol: Optional[float] = None
    rtol: Optional[float] = None


def as_outputs(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def to_float64(x: Any) -> Any:
    return x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def clone_inputs(inputs: list[Any]) -> list[Any]:
    return [x.clone() if isinstance(x, torch.Tensor) else copy.deepcopy(x) for x in inputs]


def reference_outputs(model: torch.nn.Module, inputs: list[Any]) -> list[torch.Tensor]:
    """The reference's outputs in float64 (its parameters and floating inputs cast), same device."""
    model64 = copy.deepcopy(model).to(torch.float64)
    with torch.no_grad():
        return [o.detach() for o in as_outputs(model64(*[to_float64(x) for x in inputs]))]


def fingerprint(tensors: list[Any]) -> list[float]:
    """Cheap float64 checksums (sum, sum of |x|, index-weighted sum) of each tensor: equal
    before and after means unchanged, short of a deliberate forgery."""
    prints = []
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        d = t.detach().flatten().to(torch.float64)
        weights = torch.arange(1, d.numel() + 1, device=d.device, dtype=torch.float64).remainder_(97)
        prints += [float(torch.nansum(d)), float(torch.nansum(torch.abs(d))), float(torch.nansum(d * weights))]
    return prints


def _equal(x: torch.Tensor, y: torch.Tensor) -> bool:
    if x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
        return False
    if x.is_floating_point() or x.is_complex():
        nan_x, nan_y = torch.isnan(x), torch.isnan(y)
        return torch.equal(nan_x, nan_y) and torch.equal(torch.where(nan_x, 0, x), torch.where(nan_y, 0, y))
    return torch.equal(x, y)


def same_tensors(a: list[Any], b: list[Any]) -> bool:
    """Element-for-element equal tensor lists (NaNs in the same places count as equal)."""
    return len(a) == len(b) and all(
        _equal(x, y) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
        else not isinstance(x, torch.Tensor) and not isinstance(y, torch.Tensor) for x, y in zip(a, b))


def poison_allocator(device: torch.device, sizes_bytes: list[int]) -> None:
    """Fill the memory the next allocations will likely get with NaN bytes, so a candidate that returns
    uninitialized memory (hoping for a leftover reference result) returns NaNs: first the cached free
    blocks of the CUDA caching allocator, then blocks of the outputs' sizes (CPU: the malloc free
    lists), all allocated at once, filled, and freed."""
    held = []
    sizes = list(sizes_bytes)
    if device.type == "cuda":
        try:
            sizes += [b["size"] for seg in torch.cuda.memory_snapshot() for b in seg.get("blocks", [])
                      if b.get("state") == "inactive"]
        except RuntimeError:
            pass
    for n in sorted(sizes, reverse=True):
        if n <= 0:
            continue
        try:
            t = torch.empty(int(n), dtype=torch.uint8, device=device)
        except (RuntimeError, MemoryError):
            break
        t.fill_(POISON_BYTE)
        held.append(t)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    del held


def _unravel(flat_index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    idx = []
    for s in reversed(shape):
        idx.append(flat_index % s if s else 0)
        flat_index //= s if s else 1
    return tuple(reversed(idx))


def _first(mask: torch.Tensor) -> int:
    return int(torch.argmax(mask.flatten().to(torch.uint8)))


def compare(out: Any, ref: torch.Tensor, expected_dtype: torch.dtype, rtol: float, label: str = "output") -> Comparison:
    """Judge one output against its float64 reference (see the module docstring for the rule)."""
    if type(out) is not torch.Tensor:
        return Comparison(False, f"{label} is a {type(out).__module__}.{type(out).__qualname__}, not a plain "
                                 "torch.Tensor", rtol=rtol)
    if out.layout != torch.strided:
        return Comparison(False, f"{label} has layout {out.layout}, not strided", rtol=rtol)
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(False, f"{label} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}", rtol=rtol)
    if out.dtype != expected_dtype:
        return Comparison(False, f"{label} has dtype {out.dtype}, expected {expected_dtype}", rtol=rtol)
    if out.device != ref.device:
        return Comparison(False, f"{label} is on {out.device}, expected {ref.device}", rtol=rtol)
    o = out.detach().to(torch.float64)
    ref_finite = torch.isfinite(ref)
    out_finite = torch.isfinite(o)
    fresh_nonfinite = ref_finite & ~out_finite
    if bool(fresh_nonfinite.any()):
        i = _first(fresh_nonfinite)
        idx = _unravel(i, tuple(ref.shape))
        return Comparison(False, f"{label}[{', '.join(map(str, idx))}] = {o.flatten()[i].item()} where the reference "
                                 f"is {ref.flatten()[i].item():.6g} (NaN/Inf where the reference has none; "
                                 f"{int(fresh_nonfinite.sum())} such elements)", rtol=rtol)
    if not bool(ref_finite.all()):
        nonfinite_match = torch.where(ref_finite, True, (torch.isnan(ref) & torch.isnan(o)) | (ref == o))
        if not bool(nonfinite_match.all()):
            i = _first(~nonfinite_match)
            idx = _unravel(i, tuple(ref.shape))
            return Comparison(False, f"{label}[{', '.join(map(str, idx))}] = {o.flatten()[i].item()}, the reference "
                                     f"is {ref.flatten()[i].item()}", rtol=rtol)
    ref_f = torch.where(ref_finite, ref, 0.0)
    diff = torch.where(ref_finite, torch.abs(o - ref_f), 0.0)
    n = max(int(ref_finite.sum()), 1)
    ref_norm = float(torch.linalg.vector_norm(ref_f))
    diff_norm = float(torch.linalg.vector_norm(diff))
    rms = ref_norm / math.sqrt(n)
    atol = rtol * rms
    norm_rel = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    abs_ref = torch.abs(ref_f)
    max_abs = float(diff.max()) if diff.numel() else 0.0
    max_rel = float((diff / torch.clamp(abs_ref, min=max(rms, 1e-300))).max()) if diff.numel() else 0.0
    result = Comparison(True, "", max_abs, max_rel, norm_rel, atol, rtol)
    too_far = diff > atol + rtol * abs_ref
    if bool(too_far.any()):
        i = _first(too_far)
        idx = _unravel(i, tuple(ref.shape))
        result.ok = False
        result.message = (f"{label}[{', '.join(map(str, idx))}] = {o.flatten()[i].item():.8g}, reference "
                          f"{ref.flatten()[i].item():.8g} (|diff| {diff.flatten()[i].item():.3g} > atol {atol:.3g} + "
                          f"rtol {rtol:g}·|ref|; {int(too_far.sum())} of {ref.numel()} elements off; "
                          f"normwise rel err {norm_rel:.3g})")
    elif norm_rel > rtol:
        result.ok = False
        result.message = (f"{label}: normwise relative error ‖out − ref‖/‖ref‖ = {norm_rel:.3g} > rtol {rtol:g} "
                          f"(max |diff| {max_abs:.3g})")
    return result
