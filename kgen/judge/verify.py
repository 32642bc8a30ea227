"""Verify: is a candidate's output the reference's, to the dtype's tolerance?

The reference runs in float64 on the same inputs; beside it the judge runs the reference's own forward
in the problem's dtype (`reference_and_own_error`) and measures that output's error against float64
(`OwnError`): what torch itself achieves in that dtype on these inputs. An output passes when
  - it is exactly a `torch.Tensor` (a subclass could defer its work until read), strided, with the
    reference's shape, dtype and device;
  - it has NaN/Inf exactly where the reference does (never where the reference is finite), except
    where torch's own forward in the dtype overflows (below);
  - its normwise relative error ‖out − ref‖ / ‖ref‖ is ≤ max(rtol, F · torch's own), F =
    OWN_ERROR_FACTOR = 4; rtol 1e-5 for fp32 (fp32 arithmetic lands near 1e-7, TF32 near 3e-4 and
    fp16 near 5e-4, so those shortcuts fail unless the user loosens rtol), 1e-2 for fp16/bf16;
  - every element is close: |out − ref| ≤ tol·(rms(ref) + |ref|), tol = max(rtol, F · torch's own
    largest such ratio). With tol = rtol this is atol + rtol·|ref| with atol = rtol · rms(ref).
    Why that atol: an element whose exact value is near zero is computed from terms of the output's
    typical size (a dot product, a normalized difference), so its rounding error scales with that
    typical size, not with the element: rms(ref) measures it. The root-mean-square rather than the
    max so one large element cannot loosen every other one; scaled by rtol so it stays far below
    any element of typical size: an output of zeros (softmax over 65536 columns has outputs near
    1.5e-5, so a plain atol of 1e-4 would pass zeros) fails on every element near the rms.
`tolerance_rule_text` states this rule in the prompt the model sees, so the two cannot drift.

Why torch's own error (issue 33). rtol alone failed PyTorch's own fp32 forward on 20 of the 225
KernelBench level 1-3 files that run at the small size on the CPU (benchmarks/precision_sweep.py,
RESULTS.md): where the problem is ill-conditioned (GroupNorm over 2 channels after a GEMM, softmax of
scores ×100 in attention, GRUs and tanh/GELU chains on ×100 inputs) fp32 itself is off by 1e-6 to
3e-5 normwise and up to 6e-3 elementwise, so an honest fp32 kernel, which rounds differently from
torch but not worse, failed too. The bar is never below what torch achieves, and only there is it
above rtol: where torch's own error is under rtol/F (almost every trial at scale 1) the rule is
rtol's, exactly as before, so nothing passes that failed before unless torch itself is that far off.
Why F = 4, from that sweep (1048 trials of every file with an honest alternative): fp32 computations
that sum in another order (matrix products accumulated in blocks of 32 over K, operators through
torch's decompositions, oneDNN off) land within 1.5x (normwise) and 2.6x (elementwise) of torch's own
error on every trial where F x torch's own error is above rtol, i.e. where F decides; an fp32 Triton
attention for level 1 97_ScaledDotProductAttention within 2x (tests/candidates/honest_fp32_attention.py).
TF32 (inputs of every matmul, convolution and attention rounded to 10 bits) lands at least 12x above
torch's own error there (level 2 75_Gemm_GroupNorm_Min_BiasAdd, elementwise; typically 50x to 1000x),
fp16 at least 800x (or not finite). With F = 4, no TF32 or fp16 trial of the sweep passes that failed rtol alone
(F = 16 would let one TF32 trial through). Both bars are needed: the elementwise one is a max over
elements, loose where torch has a single bad element (GroupNorm of 2 channels); the normwise one is
an average, so TF32's error over the whole output still fails it there.

TF32: cuDNN allows TF32 convolutions by default (torch.backends.cudnn.allow_tf32 is True), so on CUDA
the eager fp32 reference would be a TF32 one, and its error would set a bar that admits TF32
shortcuts. The dtype reference therefore runs under `full_precision` (TF32 and reduced-precision
fp16/bf16 reductions off, restored after): the bar is full fp32's.

Overflow: where torch's own forward in the dtype is Inf/NaN but float64 is finite (a cumprod ×100,
exp of large inputs), no output of that dtype can be right. Those elements are left out of every
measure (norms, rms, elementwise), the judge says so in the evaluation's details, and the output may
be anything there except NaN where torch's own is ±Inf. Every other element is held to the rule.
An output that overflows where torch's own stays finite fails: seen once in the sweep, the
alternative order on level 1 90_cumprod ×100 (4 elements near 1e38, finite in torch's order).
max_rel_err reports max |out − ref| / max(|ref|, rms(ref)) over elements: relative to the element,
floored at the output's typical size.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from kgen.judge import fused_compare

DEFAULT_RTOL = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2, torch.float64: 1e-7}
# Every byte 0xFF: a NaN in fp16, bf16, fp32 and fp64 alike (the judge poisons output regions with it).
POISON_BYTE = 0xFF
OWN_ERROR_FACTOR = 4.0  # see the module docstring: how far beyond torch's own error an output may be


def default_rtol(dtype: torch.dtype) -> float:
    return DEFAULT_RTOL.get(dtype, 1e-5)


def tolerance_rule_text(dtype: str | torch.dtype = "float32", rtol: Optional[float] = None) -> str:
    """The rule `compare` applies, in words, for the prompt (prompts/system.j2's `tolerance_rule`)."""
    torch_dtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype), torch.float32)
    name = str(torch_dtype).removeprefix("torch.")
    rtol = rtol if rtol is not None else default_rtol(torch_dtype)
    factor = f"{OWN_ERROR_FACTOR:g}"
    shortcuts = ("plain TF32 math (tl.dot on fp32 inputs uses TF32 unless input_precision=\"ieee\") and fp16/bf16 "
                 "intermediates fail; error-compensated splits pass (3xTF32: x = hi + lo, "
                 "acc += lo·hi + hi·lo + hi·hi; the same with fp16 hi and lo under exact power-of-two scales; all "
                 "three products straight into tl.dot's fp32 accumulator need no per-step flush: kgen's own 3xFP16 "
                 "matmul starter does that over K = 4096 at 2e-7 normwise on an H100)"
                 if torch_dtype == torch.float32 else
                 "computing in a narrower type than torch fails")
    return (f"values are compared with the reference computed in float64 on the same inputs, and judged against "
            f"the error of torch's own {name} forward on those inputs (TF32 off): the normwise relative error "
            f"‖out − ref‖/‖ref‖ must be ≤ max({rtol:g}, {factor} × torch's), and every element must satisfy "
            f"|out − ref| ≤ tol·(rms(ref) + |ref|) with tol = max({rtol:g}, {factor} × torch's largest such ratio); "
            f"so you may round differently from torch, within {factor}× of its error: {shortcuts}; one trial scales "
            f"the inputs ×100, so keep exp, softmax and norms overflow-safe; NaN or Inf fail wherever the float64 "
            f"reference is finite, except elements where torch's own {name} forward overflows (those are not "
            f"compared, but NaN there fails unless torch's is NaN too)")


@dataclass
class Comparison:
    ok: bool
    message: str = ""
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None
    norm_rel_err: Optional[float] = None
    atol: Optional[float] = None
    rtol: Optional[float] = None
    elem_err: Optional[float] = None  # max |out − ref| / (rms(ref) + |ref|): what tol_elem bounds
    tol_elem: Optional[float] = None  # the bars applied: rtol, or looser where torch's own error is (`bars`)
    tol_norm: Optional[float] = None


def as_outputs(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def to_float64(x: Any) -> Any:
    return x.to(torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def clone_inputs(inputs: list[Any]) -> list[Any]:
    return [x.clone() if isinstance(x, torch.Tensor) else copy.deepcopy(x) for x in inputs]


def reference_outputs(model: torch.nn.Module, inputs: list[Any]) -> list[torch.Tensor]:
    """The reference's outputs in float64 (its parameters and floating inputs cast), same device."""
    return float64_outputs(copy.deepcopy(model).to(torch.float64), inputs)


def float64_outputs(model64: torch.nn.Module, inputs: list[Any]) -> list[torch.Tensor]:
    with torch.no_grad():
        return [o.detach() for o in as_outputs(model64(*[to_float64(x) for x in inputs]))]


@contextlib.contextmanager
def full_precision() -> Iterator[None]:
    """The dtype's own precision on CUDA: TF32 (cuBLAS and cuDNN) and reduced-precision fp16/bf16
    reductions off, restored afterwards. cuDNN allows TF32 by default: a bar set from that forward
    would carry TF32's error and so admit TF32 shortcuts."""
    flags = (torch.backends.cuda.matmul, "allow_tf32"), (torch.backends.cudnn, "allow_tf32"), \
        (torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction"), \
        (torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction")
    saved = [getattr(obj, name) for obj, name in flags]
    try:
        for obj, name in flags:
            setattr(obj, name, False)
        yield
    finally:
        for (obj, name), value in zip(flags, saved):
            setattr(obj, name, value)


def dtype_outputs(model: torch.nn.Module, inputs: list[Any]) -> list[Any]:
    """The reference's own forward in its dtype at full precision (`full_precision`), on copies of the inputs."""
    with torch.no_grad(), full_precision():
        return [o.detach() if isinstance(o, torch.Tensor) else o for o in as_outputs(model(*clone_inputs(inputs)))]


HOST_REFERENCE_SHARE = 1 / 8  # float64 references above this share of the GPU's memory are kept on the host
HOST_COPY_BYTES = 2 << 30  # the judge's kept copies of outputs above this size are kept on the host


PINNED_MIN_BYTES = 64 << 20  # host copies from this size up go to page-locked memory
# A process's CUDA context with torch loaded: an allowance per process in `GpuMemoryPlan` (about 0.5 GB on the
# H100 with lazy module loading), not a measurement of this GPU.
CUDA_CONTEXT_BYTES = 600 << 20


def float64_bytes(t: torch.Tensor) -> int:
    """`t`'s bytes once cast as `to_float64` casts it (floating tensors become float64, others stay)."""
    return t.numel() * (8 if t.is_floating_point() else t.element_size())


@dataclass(frozen=True)
class GpuMemoryPlan:
    """The least GPU memory an evaluation holds at once, at a trial's float64 forward (kgen.judge.judge.Judge:
    the arena is allocated and the candidate's runner holds its outputs by then): each part from the problem's
    shapes, none from a guess about the reference's temporaries (those come on top). Where even this is more
    than the GPU has, the float64 reference goes to the host from the first trial, rather than after the GPU
    ran out of memory in one (and the candidate's runner, beside it, perhaps with it)."""

    arena_bytes: int  # inputs, weights and outputs in the problem's dtype, shared with the runners
    inputs_bytes: int  # the trial's inputs, which the judge keeps beside the arena (the references need them)
    float64_bytes: int  # the float64 forward's own: its inputs, weights and outputs in float64
    runner_bytes: int  # the candidate's returned outputs in its runner's process, before they are copied in
    contexts_bytes: int  # CUDA contexts: the judge's, the candidate's runner's and the reference runner's
    total_bytes: int  # the GPU's memory

    @property
    def need_bytes(self) -> int:
        return self.arena_bytes + self.inputs_bytes + self.float64_bytes + self.runner_bytes + self.contexts_bytes

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.total_bytes

    def described(self) -> str:
        gb = 1e9
        return (f"at least {self.need_bytes / gb:.1f} GB of the GPU's {self.total_bytes / gb:.1f} GB at a trial's "
                f"float64 forward: arena {self.arena_bytes / gb:.1f} + trial inputs {self.inputs_bytes / gb:.1f} + "
                f"float64 inputs, weights and outputs {self.float64_bytes / gb:.1f} + the candidate's outputs in its "
                f"runner {self.runner_bytes / gb:.1f} + CUDA contexts {self.contexts_bytes / gb:.1f}")


def gpu_memory_plan(inputs: list[Any], weights: list[torch.Tensor], outputs: list[torch.Tensor],
                    total_bytes: int) -> GpuMemoryPlan:
    """The plan for a problem whose forward takes `inputs` (tensors, on any device: the meta device's do), holds
    `weights` and returns `outputs`, on a GPU of `total_bytes`."""
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    in_bytes = sum(x.numel() * x.element_size() for x in tensors)
    out_bytes = sum(o.numel() * o.element_size() for o in outputs)
    weight_bytes = sum(w.numel() * w.element_size() for w in weights)
    return GpuMemoryPlan(
        arena_bytes=in_bytes + weight_bytes + out_bytes, inputs_bytes=in_bytes,
        float64_bytes=sum(float64_bytes(t) for t in [*tensors, *weights, *outputs]),
        runner_bytes=out_bytes, contexts_bytes=3 * CUDA_CONTEXT_BYTES, total_bytes=int(total_bytes))


def reference_on_host(model64: torch.nn.Module) -> None:
    """Compute `model64`'s float64 forward on the host from now on (`float64_outputs_fitting`)."""
    model64.to("cpu")
    model64._kgen_on_host = True


def reference_is_on_host(model64: torch.nn.Module) -> bool:
    return bool(getattr(model64, "_kgen_on_host", False))


def kept_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` to compare later outputs with (`same_tensors`): on the host when it is large."""
    return _on_host(t.detach()) if t.is_cuda and t.numel() * t.element_size() > HOST_COPY_BYTES \
        else t.detach().clone()


def _on_host(x: Any) -> Any:
    """`x` on the host. A large GPU tensor goes to page-locked memory: through pageable memory a 12.9 GB
    float64 reference (KernelBench's 4096 x 393216 softmax) took seconds each way, on every trial, and the
    chunked checks bring it back to the GPU twice per trial (~15 s of judge work a trial on the H100).
    torch's host allocator caches the block, so the next trial's copy of the same size reuses it;
    `release_pinned` hands the cache back when an evaluation ends."""
    if not isinstance(x, torch.Tensor):
        return x
    if x.is_cuda and x.numel() * x.element_size() >= PINNED_MIN_BYTES:
        try:
            host = torch.empty(x.shape, dtype=x.dtype, pin_memory=True)
        except RuntimeError:  # no page-locked memory to be had: pageable, as before
            return x.to("cpu")
        return host.copy_(x)
    return x.to("cpu")


def release_pinned() -> None:
    """Free the page-locked blocks torch's host allocator keeps cached (`_on_host`'s), so an evaluator
    process does not keep tens of GB of host memory locked between evaluations."""
    empty = getattr(torch._C, "_accelerator_emptyHostCache", None) or getattr(torch._C, "_host_emptyCache", None)
    if empty is not None and torch.cuda.is_available():
        empty()


def float64_outputs_fitting(model64: torch.nn.Module, inputs: list[Any]) -> list[torch.Tensor]:
    """`float64_outputs` on the inputs' device or, where the GPU has no room for the float64 forward
    (KernelBench's largest level-1 inputs need 50-60 GiB of float64 temporaries: L1/L2 norms, average
    pooling), on the host: `model64` moves to the CPU for good (the next trials need the same room) and
    the outputs stay there (`compare` and `own_error` bring them to the GPU chunk by chunk). Outputs over
    HOST_REFERENCE_SHARE of the GPU's memory go to the host too: they would leave the candidate no room."""
    on_gpu = any(isinstance(x, torch.Tensor) and x.is_cuda for x in inputs)
    if on_gpu and reference_is_on_host(model64):
        return float64_outputs(model64, [_on_host(x) for x in inputs])
    try:
        outs = float64_outputs(model64, inputs)
        if on_gpu and sum(o.numel() * o.element_size() for o in outs if isinstance(o, torch.Tensor)) \
                > HOST_REFERENCE_SHARE * torch.cuda.get_device_properties(inputs[0].device).total_memory:
            # this big in float64, they would leave the candidate's run and the checks no room: the host keeps them
            outs = [_on_host(o) for o in outs]
            torch.cuda.empty_cache()
        return outs
    except torch.OutOfMemoryError:
        if not on_gpu:
            raise
    gc.collect()
    torch.cuda.empty_cache()
    reference_on_host(model64)
    return float64_outputs(model64, [_on_host(x) for x in inputs])


def reference_and_own_error(model: torch.nn.Module, model64: torch.nn.Module, inputs: list[Any],
                            ) -> tuple[list[torch.Tensor], list[Optional[OwnError]]]:
    """What the judge compares a trial's outputs with: the float64 outputs (on the host where the GPU
    has no room for them: `float64_outputs_fitting`), and torch's own error in the problem's dtype for
    each (None where that output is not a tensor of the float64 output's shape)."""
    refs = float64_outputs_fitting(model64, inputs)
    owns: list[Optional[OwnError]] = []
    for own, ref in zip(dtype_outputs(model, inputs), refs):
        fits = isinstance(own, torch.Tensor) and isinstance(ref, torch.Tensor) and own.shape == ref.shape
        owns.append(own_error(own, ref) if fits else None)
    return refs, owns + [None] * (len(refs) - len(owns))


def fingerprint(tensors: list[Any]) -> list[float]:
    """Cheap float64 checksums (sum, sum of |x|, index-weighted sum) of each tensor: equal
    before and after means unchanged, short of a deliberate forgery. In chunks: no float64 copy of a
    whole 8 GiB input."""
    prints = []
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        flat = t.detach().reshape(-1)
        total, absolute, weighted = 0.0, 0.0, 0.0
        for a, b in _chunks(flat.numel()):
            d = flat[a:b].to(torch.float64)
            weights = torch.arange(a + 1, b + 1, device=d.device, dtype=torch.float64).remainder_(97)
            total += float(torch.nansum(d))
            absolute += float(torch.nansum(torch.abs(d)))
            weighted += float(torch.nansum(d * weights))
        prints += [total, absolute, weighted]
    return prints


def _equal_part(x: torch.Tensor, y: torch.Tensor) -> bool:
    nan_x, nan_y = torch.isnan(x), torch.isnan(y)
    return torch.equal(nan_x, nan_y) and torch.equal(torch.where(nan_x, 0, x), torch.where(nan_y, 0, y))


def _equal(x: torch.Tensor, y: torch.Tensor) -> bool:
    """Equal shape, dtype and elements (NaN where the other has NaN); `x` on another device than `y` (a
    kept copy on the host) is brought over chunk by chunk."""
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    part = _equal_part if x.is_floating_point() or x.is_complex() else torch.equal
    if not (x.is_contiguous() and y.is_contiguous()):
        return part(x.to(y.device), y)
    # in chunks: the NaN masks and NaN-free copies of a whole 8 GiB input do not fit beside it on the GPU
    flat_x, flat_y = x.reshape(-1), y.reshape(-1)
    return all(part(flat_x[a:b].to(y.device), flat_y[a:b]) for a, b in _chunks(flat_x.numel()))


def same_tensors(a: list[Any], b: list[Any]) -> bool:
    """Element-for-element equal tensor lists (NaNs in the same places count as equal)."""
    return len(a) == len(b) and all(
        _equal(x, y) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)
        else not isinstance(x, torch.Tensor) and not isinstance(y, torch.Tensor) for x, y in zip(a, b))


def repeat_difference(first: list[Any], again: list[Any]) -> str:
    """How two calls' outputs on the same inputs differ, for the judge's message: how many elements and by how
    much against the output's typical size (the last bits of a reduction whose order changes from call to call,
    e.g. float atomicAdd, differ by ~1e-7 of it; stale or uninitialized data by far more)."""
    changed, total, worst, scale = 0, 0, 0.0, 0.0
    for a, b in zip(first, again):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
            return "their shapes or types differ"
        fa, fb = a.detach().reshape(-1), b.detach().reshape(-1)  # `a` may be a kept copy on the host
        total += fa.numel()
        for lo, hi in _chunks(fa.numel()):
            x, y = fa[lo:hi].to(fb.device, torch.float64), fb[lo:hi].to(torch.float64)
            both_nan = torch.isnan(x) & torch.isnan(y)
            differ = (x != y) & ~both_nan
            changed += int(differ.sum())
            gap = torch.where(differ, torch.abs(x - y), 0.0)
            worst = max(worst, float(torch.nan_to_num(gap, nan=math.inf).max()))  # chunks are never empty
            finite = torch.where(torch.isfinite(x), x, 0.0)
            scale += float(torch.sum(finite * finite))
    rms = math.sqrt(scale / max(total, 1))
    relative = f", {worst / rms:.2g} of the output's rms" if rms > 0 and math.isfinite(worst) else ""
    return f"{changed} of {total} elements differ, by at most {worst:.3g}{relative}"


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


@dataclass
class OwnError:
    """torch's own forward in the problem's dtype (TF32 off), measured against float64 on one trial's
    inputs, for one output: what the bar is set from (module docstring)."""

    norm_rel_err: float  # ‖own − ref‖/‖ref‖ over the compared elements
    elem_err: float  # max |own − ref| / (rms(ref) + |ref|) over the compared elements
    overflow: int = 0  # elements where the dtype's forward is not finite but float64 is: not compared
    # per element where overflow > 0: 0 compared, INF_THERE (any value but NaN), NAN_THERE (any value)
    excused: Optional[torch.Tensor] = field(default=None, repr=False)

    def summary(self) -> dict[str, float]:
        return {"norm_rel_err": self.norm_rel_err, "elem_err": self.elem_err, "overflow": self.overflow}


INF_THERE, NAN_THERE = 1, 2


def _chunks(n: int) -> list[tuple[int, int]]:
    return [(i, min(i + COMPARE_CHUNK_ELEMENTS, n)) for i in range(0, n, COMPARE_CHUNK_ELEMENTS)]


def _finite(values: torch.Tensor, ref: torch.Tensor) -> bool:
    """Whether a chunk of an output and its reference are finite everywhere: then every element is
    counted and compared, and the masks the general path builds (a chunk-sized temporary each) select
    every element, so the measures skip them and come out bitwise the same (the same sums over the same
    values). A trial's judge work is mostly these measures (~0.11 s a trial for softmax's 268M elements on an
    H200, ~14 trials and checked timed runs a candidate); an output of no floating dtype is finite."""
    return bool(torch.isfinite(values).all()) and bool(torch.isfinite(ref).all())


def _widened(values: torch.Tensor) -> torch.Tensor:
    """`values` to subtract a float64 reference from: a floating chunk as it is (the subtraction widens it to
    float64 as it reads it, exactly as .to(float64) does, without a float64 copy of it first); any other
    dtype (bool cannot be subtracted, complex would keep its imaginary part) through .to(float64)."""
    return values if values.is_floating_point() else values.to(torch.float64)


def own_error(own: torch.Tensor, ref: torch.Tensor) -> OwnError:
    """Measure torch's own output `own` (the problem's dtype) against the float64 `ref`, in chunks."""
    flat_own, flat_ref = own.detach().reshape(-1), ref.reshape(-1)
    if tuple(own.shape) != tuple(ref.shape):
        raise ValueError(f"the dtype reference has shape {tuple(own.shape)}, float64 {tuple(ref.shape)}")
    fused = fused_compare.measure(flat_own, flat_ref, math.inf)  # finite everywhere, on a GPU: two fused passes
    if fused is not None:
        ref_norm, diff_sq = math.sqrt(fused.ref_sq), fused.errors.diff_sq
        norm = math.sqrt(diff_sq) / ref_norm if ref_norm > 0 else (0.0 if diff_sq == 0 else math.inf)
        return OwnError(norm, fused.errors.elem, 0, None)
    chunks = _chunks(flat_ref.numel())
    excused: Optional[torch.Tensor] = None
    ref_sq, count = 0.0, 0
    finite: list[bool] = []  # per chunk: everything finite, the masks left out (see _finite)
    for a, b in chunks:
        r = flat_ref[a:b].to(own.device)
        finite.append(_finite(flat_own[a:b], r))
        if finite[-1]:
            ref_sq += float(torch.sum(r * r))
            count += b - a
            continue
        o = flat_own[a:b].to(torch.float64)
        lost = torch.isfinite(r) & ~torch.isfinite(o)
        if bool(lost.any()):
            if excused is None:
                excused = torch.zeros(flat_ref.numel(), dtype=torch.int8, device=ref.device)
            excused[a:b] = torch.where(lost, torch.where(torch.isnan(o), NAN_THERE, INF_THERE), 0).to(
                device=ref.device, dtype=torch.int8)
        counted = torch.isfinite(r) & torch.isfinite(o)
        r_f = torch.where(counted, r, 0.0)
        ref_sq += float(torch.sum(r_f * r_f))
        count += int(counted.sum())
    rms = math.sqrt(ref_sq / max(count, 1))
    diff_sq, elem = 0.0, 0.0
    for (a, b), all_finite in zip(chunks, finite):
        r = flat_ref[a:b].to(own.device)
        if all_finite:
            r_f, diff = r, torch.abs(_widened(flat_own[a:b]) - r)
        else:
            o = flat_own[a:b].to(torch.float64)
            counted = torch.isfinite(r) & torch.isfinite(o)
            r_f = torch.where(counted, r, 0.0)
            diff = torch.where(counted, torch.abs(torch.where(counted, o, 0.0) - r_f), 0.0)
        diff_sq += float(torch.sum(diff * diff))
        if diff.numel():
            elem = max(elem, float((diff / (max(rms, 1e-300) + torch.abs(r_f))).max()))
    ref_norm = math.sqrt(ref_sq)
    norm = math.sqrt(diff_sq) / ref_norm if ref_norm > 0 else (0.0 if diff_sq == 0 else math.inf)
    overflow = int((excused != 0).sum()) if excused is not None else 0
    return OwnError(norm, elem, overflow, excused)


def bars(rtol: float, own: Optional[OwnError]) -> tuple[float, float]:
    """(elementwise, normwise) tolerance for one output on one trial: rtol, or OWN_ERROR_FACTOR × torch's
    own error in the problem's dtype on the same inputs, whichever is looser."""
    if own is None:
        return rtol, rtol
    return max(rtol, OWN_ERROR_FACTOR * own.elem_err), max(rtol, OWN_ERROR_FACTOR * own.norm_rel_err)


def compare(out: Any, ref: torch.Tensor, expected_dtype: torch.dtype, rtol: float, label: str = "output",
            own: Optional[OwnError] = None) -> Comparison:
    """Judge one output against its float64 reference (see the module docstring for the rule), in
    chunks, so a 1 GiB output never needs several float64 copies of itself at once. `own`: torch's own
    error in the problem's dtype on these inputs (None: the bar is rtol alone)."""
    tol_elem, tol_norm = bars(rtol, own)

    def failed(message: str) -> Comparison:
        return Comparison(False, message, rtol=rtol, tol_elem=tol_elem, tol_norm=tol_norm)

    if type(out) is not torch.Tensor:
        return failed(f"{label} is a {type(out).__module__}.{type(out).__qualname__}, not a plain torch.Tensor")
    if out.layout != torch.strided:
        return failed(f"{label} has layout {out.layout}, not strided")
    if tuple(out.shape) != tuple(ref.shape):
        return failed(f"{label} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if out.dtype != expected_dtype:
        return failed(f"{label} has dtype {out.dtype}, expected {expected_dtype}")
    if out.device != ref.device and ref.device.type != "cpu":  # a host reference: the GPU had no room for it
        return failed(f"{label} is on {out.device}, expected {ref.device}")
    shape = tuple(ref.shape)
    flat_out, flat_ref = out.detach().reshape(-1), ref.reshape(-1)
    excused = own.excused if own is not None and own.excused is not None else None
    chunks = _chunks(flat_ref.numel())

    def masks(a: int, b: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(output chunk in float64, reference chunk, elements compared, elements where the output may not
        be what it is). The reference chunk is brought to the output's device (a host reference: the GPU
        still does the math)."""
        o, r = flat_out[a:b].to(torch.float64), flat_ref[a:b].to(out.device)
        r_finite = torch.isfinite(r)
        if excused is None:
            return o, r, r_finite, r_finite & ~torch.isfinite(o)
        e = excused[a:b].to(out.device)
        # where torch's own forward overflowed: any value, but NaN only where torch's is NaN too
        bad = r_finite & torch.where(e == 0, ~torch.isfinite(o), (e == INF_THERE) & torch.isnan(o))
        return o, r, r_finite & (e == 0), bad

    # finite everywhere and nothing excused, on a GPU: two fused passes (kgen.judge.fused_compare)
    fused = fused_compare.measure(flat_out, flat_ref, tol_elem) if excused is None else None
    if fused is not None:
        e = fused.errors
        return _verdict(flat_out, flat_ref, shape, expected_dtype, rtol, label, own, tol_elem, tol_norm,
                        math.sqrt(fused.ref_sq), fused.rms, e.diff_sq, e.max_abs, e.max_rel, e.elem, e.off,
                        e.first_off)
    # Pass 1: non-finite values where the reference has none (or different ones), and the reference's norm.
    ref_sq, finite_count = 0.0, 0
    finite: list[bool] = []  # per chunk: everything finite and nothing excused, the masks left out (see _finite)
    for a, b in chunks:
        r = flat_ref[a:b].to(out.device)
        finite.append((excused is None or not bool(excused[a:b].any())) and _finite(flat_out[a:b], r))
        if finite[-1]:
            ref_sq += float(torch.sum(r * r))
            finite_count += b - a
            continue
        o, r, counted, fresh = masks(a, b)
        r_finite = torch.isfinite(r)
        if bool(fresh.any()):
            i = a + _first(fresh)
            total = sum(int(masks(x, y)[3].sum()) for x, y in chunks)
            where = (" (torch's own float32 forward is Inf there, not NaN)" if excused is not None
                     and int(excused[i]) == INF_THERE else "")
            return failed(f"{_located(label, i, shape)} = {flat_out[i].item()} where the reference is "
                          f"{flat_ref[i].item():.6g}{where} (NaN/Inf where the reference has none; {total} such "
                          "elements)")
        if not bool(r_finite.all()):
            same = torch.where(r_finite, True, (torch.isnan(r) & torch.isnan(o)) | (r == o))
            if not bool(same.all()):
                i = a + _first(~same)
                return failed(f"{_located(label, i, shape)} = {flat_out[i].item()}, the reference is "
                              f"{flat_ref[i].item()}")
        r_f = torch.where(counted, r, 0.0)
        ref_sq += float(torch.sum(r_f * r_f))
        finite_count += int(counted.sum())
    ref_norm = math.sqrt(ref_sq)
    rms = ref_norm / math.sqrt(max(finite_count, 1))
    # Pass 2: the error, normwise and per element.
    diff_sq, max_abs, max_rel, elem, off, first_off = 0.0, 0.0, 0.0, 0.0, 0, None
    for (a, b), all_finite in zip(chunks, finite):
        if all_finite:
            r_f = flat_ref[a:b].to(out.device)
            diff = torch.abs(_widened(flat_out[a:b]) - r_f)
        else:
            o, r, counted, _ = masks(a, b)
            r_f = torch.where(counted, r, 0.0)
            diff = torch.where(counted, torch.abs(torch.where(counted, o, 0.0) - r_f), 0.0)
        diff_sq += float(torch.sum(diff * diff))
        if diff.numel():
            abs_ref = torch.abs(r_f)
            floor = max(rms, 1e-300)
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / torch.clamp(abs_ref, min=floor)).max()))
            spread = floor + abs_ref  # rms + |ref|, made once for both measures where rms is no denormal
            elem = max(elem, float((diff / spread).max()))
            too_far = diff > tol_elem * (spread if floor == rms else rms + abs_ref)
            n_off = int(too_far.sum())
            if n_off and first_off is None:
                first_off = a + _first(too_far)
            off += n_off
    return _verdict(flat_out, flat_ref, shape, expected_dtype, rtol, label, own, tol_elem, tol_norm, ref_norm,
                    rms, diff_sq, max_abs, max_rel, elem, off, first_off)


def _verdict(flat_out: torch.Tensor, flat_ref: torch.Tensor, shape: tuple[int, ...], expected_dtype: torch.dtype,
             rtol: float, label: str, own: Optional[OwnError], tol_elem: float, tol_norm: float, ref_norm: float,
             rms: float, diff_sq: float, max_abs: float, max_rel: float, elem: float, off: int,
             first_off: Optional[int]) -> Comparison:
    """The comparison's result and message from its measures (both paths)."""
    atol = rtol * rms
    diff_norm = math.sqrt(diff_sq)
    norm_rel = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    result = Comparison(True, "", max_abs, max_rel, norm_rel, atol, rtol, elem, tol_elem, tol_norm)
    dtype_name = str(expected_dtype).removeprefix("torch.")
    torch_own = (f"; torch's own {dtype_name} forward: normwise {own.norm_rel_err:.3g}, elementwise "
                 f"{own.elem_err:.3g}" if own is not None else "")
    if first_off is not None:
        i = first_off
        o_i, r_i = float(flat_out[i].to(torch.float64)), float(flat_ref[i])
        bar = (f"atol {atol:.3g} + rtol {rtol:g}·|ref|" if tol_elem == rtol else
               f"{tol_elem:.3g}·(rms {rms:.3g} + |ref|)")
        result.ok = False
        result.message = (f"{_located(label, i, shape)} = {o_i:.8g}, reference {r_i:.8g} "
                          f"(|diff| {abs(o_i - r_i):.3g} > {bar}; {off} of {flat_ref.numel()} elements off; "
                          f"normwise rel err {norm_rel:.3g}{torch_own})")
    elif norm_rel > tol_norm:
        result.ok = False
        limit = f"rtol {rtol:g}" if tol_norm == rtol else f"{tol_norm:.3g}"
        result.message = (f"{label}: normwise relative error ‖out − ref‖/‖ref‖ = {norm_rel:.3g} > {limit} "
                          f"(max |diff| {max_abs:.3g}{torch_own})")
    return result
