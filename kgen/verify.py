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
# Every byte 0xFF: a NaN in fp16, bf16, fp32 and fp64 alike (the judge poisons output regions with it).
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


def _unravel(flat_index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    idx = []
    for s in reversed(shape):
        idx.append(flat_index % s if s else 0)
        flat_index //= s if s else 1
    return tuple(reversed(idx))


def _first(mask: torch.Tensor) -> int:
    return int(torch.argmax(mask.flatten().to(torch.uint8)))


COMPARE_CHUNK_ELEMENTS = 1 << 24  # float64 temporaries stay ~128 MB each, whatever the output's size


def _located(label: str, flat_index: int, shape: tuple[int, ...]) -> str:
    return f"{label}[{', '.join(map(str, _unravel(flat_index, shape)))}]"


def compare(out: Any, ref: torch.Tensor, expected_dtype: torch.dtype, rtol: float, label: str = "output") -> Comparison:
    """Judge one output against its float64 reference (see the module docstring for the rule), in
    chunks, so a 1 GiB output never needs several float64 copies of itself at once."""
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
    shape = tuple(ref.shape)
    flat_out, flat_ref = out.detach().reshape(-1), ref.reshape(-1)
    chunks = [(i, min(i + COMPARE_CHUNK_ELEMENTS, flat_ref.numel()))
              for i in range(0, flat_ref.numel(), COMPARE_CHUNK_ELEMENTS)]
    # Pass 1: non-finite values where the reference has none (or different ones), and the reference's norm.
    ref_sq, finite_count = 0.0, 0
    for a, b in chunks:
        o, r = flat_out[a:b].to(torch.float64), flat_ref[a:b]
        r_finite = torch.isfinite(r)
        fresh = r_finite & ~torch.isfinite(o)
        if bool(fresh.any()):
            i = a + _first(fresh)
            total = sum(int((torch.isfinite(flat_ref[x:y]) & ~torch.isfinite(flat_out[x:y].to(torch.float64))).sum())
                        for x, y in chunks)
            return Comparison(False, f"{_located(label, i, shape)} = {flat_out[i].item()} where the reference is "
                                     f"{flat_ref[i].item():.6g} (NaN/Inf where the reference has none; {total} such "
                                     "elements)", rtol=rtol)
        if not bool(r_finite.all()):
            same = torch.where(r_finite, True, (torch.isnan(r) & torch.isnan(o)) | (r == o))
            if not bool(same.all()):
                i = a + _first(~same)
                return Comparison(False, f"{_located(label, i, shape)} = {flat_out[i].item()}, the reference is "
                                         f"{flat_ref[i].item()}", rtol=rtol)
        r_f = torch.where(r_finite, r, 0.0)
        ref_sq += float(torch.sum(r_f * r_f))
        finite_count += int(r_finite.sum())
    ref_norm = math.sqrt(ref_sq)
    rms = ref_norm / math.sqrt(max(finite_count, 1))
    atol = rtol * rms
    # Pass 2: the error, normwise and per element.
    diff_sq, max_abs, max_rel, off, first_off = 0.0, 0.0, 0.0, 0, None
    for a, b in chunks:
        o, r = flat_out[a:b].to(torch.float64), flat_ref[a:b]
        r_finite = torch.isfinite(r)
        r_f = torch.where(r_finite, r, 0.0)
        diff = torch.where(r_finite, torch.abs(o - r_f), 0.0)
        diff_sq += float(torch.sum(diff * diff))
        if diff.numel():
            abs_ref = torch.abs(r_f)
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / torch.clamp(abs_ref, min=max(rms, 1e-300))).max()))
            too_far = diff > atol + rtol * abs_ref
            n_off = int(too_far.sum())
            if n_off and first_off is None:
                first_off = a + _first(too_far)
            off += n_off
    diff_norm = math.sqrt(diff_sq)
    norm_rel = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    result = Comparison(True, "", max_abs, max_rel, norm_rel, atol, rtol)
    if first_off is not None:
        i = first_off
        o_i, r_i = float(flat_out[i].to(torch.float64)), float(flat_ref[i])
        result.ok = False
        result.message = (f"{_located(label, i, shape)} = {o_i:.8g}, reference {r_i:.8g} (|diff| {abs(o_i - r_i):.3g} > "
                          f"atol {atol:.3g} + rtol {rtol:g}·|ref|; {off} of {ref.numel()} elements off; "
                          f"normwise rel err {norm_rel:.3g})")
    elif norm_rel > rtol:
        result.ok = False
        result.message = (f"{label}: normwise relative error ‖out − ref‖/‖ref‖ = {norm_rel:.3g} > rtol {rtol:g} "
                          f"(max |diff| {max_abs:.3g})")
    return result
