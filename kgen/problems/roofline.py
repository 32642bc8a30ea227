"""Roofline: the fewest bytes a kernel must move and the FLOPs it must do, and the device's ceilings.

Bytes: every input and parameter read once, every output written once. FLOPs: the problem's own
`KGEN_FLOPS` where it declares one, else counted as the reference runs on the meta device, operator by
operator at the aten level (after PyTorch has broken modules into operators), by this rule:
  * matmul, convolution, attention: torch.utils.flop_counter's formulas (2 per multiply-add);
  * pointwise operators (aten's `pointwise` tag, every activation included): 1 per output element;
  * reductions (sum, mean, max, min, argmax, prod, cumulative sums ...): 1 per input element;
    logsumexp 4 (max, subtract, exp, sum), variance and std 4 (mean, subtract, square, sum), vector
    norms 2 (power, sum);
  * softmax and log-softmax: 5 per input element (max, subtract, exp, sum, divide or subtract);
  * layer, group, instance and training batch norm: 6 per input element (mean 1, variance 3,
    normalize 2), plus 1 each for a weight and a bias; batch norm on running statistics: 2 plus those;
  * max and average pooling: the window's size per output element; adaptive pooling: 1 per input
    element;
  * losses: MSE 3 per input element (subtract, square, sum), smooth L1 and Huber 4;
  * data movement (views, copies, concatenation, gathers, padding, upsampling) and anything else: 0.
A transcendental counts as one FLOP, as in every roofline that counts per element.
The compute ceiling is the fastest arithmetic that can still pass the accuracy check, because the floor
is used to call a time physically impossible (`suspicious`), and a legitimate kernel must never be:
  * fp32 problems at the default tolerance (1e-5): plain TF32 fails it, but error-compensated splits pass:
    3xTF32 (three TF32 products per fp32 product) and 3xFP16 (fp16 has TF32's 11-bit significand, so hi + lo
    keep 22 bits; its narrow exponent range is handled with exact power-of-two scales: the matmul and conv
    starters `triton_3xfp16_*`), so the ceiling is max(fp32 FMA, TF32 / 3, 16-bit / 3);
  * fp32 problems under a looser --rtol (TF32 lands near 3e-4, fp16/bf16 near 5e-4 to 4e-3): any
    tensor-core rate, so max(fp32, TF32, fp16/bf16);
  * fp16/bf16 problems: the 16-bit tensor-core rate.
That floor counts the work the reference does, and a correct kernel may do less: diag(a) @ b is a row
scaling, not a matmul (KernelBench level 1 12_), a global average of a convolution is a dot product of sums,
and a kernel need not read an input the output does not depend on. So the floor a time must not beat to be
believed (`impossible_ms`) is only what no correct kernel can skip: writing every output once at the
measured bandwidth. A correct time between the two is real and marked as less work than the reference.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.utils.flop_counter import flop_registry

from kgen.problems.problem import Problem, RecordingMode, TensorSpec, meta_doing, on_device, problem_code

FP32_DEFAULT_RTOL = 1e-5  # kgen.judge.verify's default for fp32; anything looser admits plain TF32 / 16-bit math


@dataclass(frozen=True)
class Roofline:
    bytes_moved: int
    flops: int
    dtype: str = "float32"  # the problem's floating dtype: it decides which arithmetic may pass the check
    output_bytes: int = 0   # the outputs alone: every correct kernel writes them

    def compute_rate(self, ceilings: Ceilings, rtol: float | None = None) -> float:
        """FLOP/s of the fastest arithmetic that can pass the accuracy check (module docstring)."""
        rate = ceilings.fp32_flops_per_s
        if self.dtype in ("float16", "bfloat16"):
            return max(rate, ceilings.half_flops_per_s)
        if self.dtype == "float32" and (rtol is None or rtol <= FP32_DEFAULT_RTOL):
            return max(rate, ceilings.tf32_flops_per_s / 3, ceilings.half_flops_per_s / 3)
        return max(rate, ceilings.tf32_flops_per_s, ceilings.half_flops_per_s)

    def floor_ms(self, ceilings: Ceilings | None, rtol: float | None = None) -> float | None:
        if ceilings is None:
            return None
        return 1e3 * max(self.bytes_moved / ceilings.bandwidth_bytes_per_s,
                         self.flops / self.compute_rate(ceilings, rtol))

    def impossible_ms(self, ceilings: Ceilings | None) -> float | None:
        """The least time any correct kernel needs: writing its outputs once (module docstring)."""
        if ceilings is None:
            return None
        return 1e3 * self.output_bytes / ceilings.bandwidth_bytes_per_s

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


aten = torch.ops.aten


def _numel(x) -> int:
    return x.numel() if isinstance(x, torch.Tensor) else 0


def _first_tensor(value) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        return next((v for v in value if isinstance(v, torch.Tensor)), None)
    return None


def _per_input(per_element: int):
    return lambda args, out: per_element * _numel(args[0])


def _per_output(per_element: int):
    return lambda args, out: per_element * _numel(_first_tensor(out))


def _window(args, out) -> int:
    kernel = args[1]
    return math.prod(kernel if isinstance(kernel, (list, tuple)) else [kernel]) * _numel(_first_tensor(out))


def _norm(statistics: bool, weight_at: int = 1, bias_at: int = 2):
    def flops(args, out) -> int:
        affine = sum(1 for i in (weight_at, bias_at) if len(args) > i and args[i] is not None)
        return ((6 if statistics else 2) + affine) * _numel(args[0])
    return flops


def _batch_norm(args, out) -> int:
    """native_batch_norm and _native_batch_norm_legit: statistics when `training` (argument 5)."""
    return _norm(bool(args[5]) if len(args) > 5 else True)(args, out)


# aten operator -> FLOPs from its (meta) arguments and outputs; the rule is in the module docstring.
ELEMENT_FLOPS = {
    aten._softmax: _per_input(5), aten._log_softmax: _per_input(5), aten._safe_softmax: _per_input(5),
    aten.native_layer_norm: _norm(True, 2, 3), aten.native_group_norm: _norm(True),
    aten.native_batch_norm: _batch_norm, aten._native_batch_norm_legit: _batch_norm,
    aten._native_batch_norm_legit_no_training: _norm(False),
    aten.logsumexp: _per_input(4), aten.var: _per_input(4), aten.std: _per_input(4),
    aten.var_mean: _per_input(4), aten.std_mean: _per_input(4),
    aten.linalg_vector_norm: _per_input(2), aten.norm: _per_input(2),
    aten.cumsum: _per_input(1), aten.cumprod: _per_input(1), aten.cummax: _per_input(1), aten.cummin: _per_input(1),
    aten.logcumsumexp: _per_input(3),
    aten.max_pool1d: _window, aten.max_pool2d_with_indices: _window, aten.max_pool3d_with_indices: _window,
    aten.avg_pool1d: _window, aten.avg_pool2d: _window, aten.avg_pool3d: _window,
    aten._adaptive_avg_pool2d: _per_input(1), aten._adaptive_avg_pool3d: _per_input(1),
    aten.adaptive_max_pool2d: _per_input(1), aten.adaptive_max_pool3d: _per_input(1),
    aten.mse_loss: _per_input(3), aten.smooth_l1_loss: _per_input(4), aten.huber_loss: _per_input(4),
    # pointwise, though aten does not tag them so
    aten.hardswish: _per_output(1), aten.log_sigmoid_forward: _per_output(1), aten.glu: _per_output(1),
    aten._prelu_kernel: _per_output(1), aten.rrelu_with_noise: _per_output(1),
    aten.leaky_relu: _per_output(1),  # torch 2.11 does not tag it pointwise (2.13 does)
}
# tagged pointwise, but only moves data
NOT_ARITHMETIC = {aten.clone}


def _operator_flops(func, args: tuple, kwargs: dict, out) -> int:
    packet = func._overloadpacket
    if packet in flop_registry:
        return int(flop_registry[packet](*args, **kwargs, out_val=out))
    if packet in ELEMENT_FLOPS:
        return int(ELEMENT_FLOPS[packet](args, out))
    if packet in NOT_ARITHMETIC:
        return 0
    if torch.Tag.pointwise in func.tags:
        return _numel(_first_tensor(out))
    if torch.Tag.reduction in func.tags:
        return _numel(args[0])
    return 0


class _FlopCounter(RecordingMode):
    """Adds up _operator_flops over the operators run inside it; an operator no rule knows is broken
    into the ones it is made of, where PyTorch can (as torch's FlopCounterMode does)."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func._overloadpacket
        known = (packet in flop_registry or packet in ELEMENT_FLOPS or torch.Tag.pointwise in func.tags
                 or torch.Tag.reduction in func.tags)
        if not known:
            with self:
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        out = func(*args, **kwargs)
        self.flops += _operator_flops(func, args, kwargs, out)
        return out


def _meta_run(problem: Problem) -> tuple[torch.nn.Module, list, list, int]:
    """The reference run once on the meta device: its model, inputs, outputs and counted FLOPs."""
    with problem_code(problem, meta_doing(problem)), on_device("meta"):
        model = problem.module.Model(*problem.init_inputs())
        inputs = list(problem.module.get_inputs())
        counter = _FlopCounter()
        with counter, torch.no_grad():
            out = model(*inputs)
    return model, inputs, list(out) if isinstance(out, (tuple, list)) else [out], counter.flops


def count_flops(problem: Problem) -> int:
    """The reference's FLOPs by the rule in the module docstring (KGEN_FLOPS aside)."""
    return _meta_run(problem)[3]


def compute_roofline(problem: Problem) -> Roofline:
    model, inputs, outs, counted = _meta_run(problem)
    state = list(model.parameters()) + list(model.buffers())
    written = sum(_nbytes(o) for o in outs if isinstance(o, torch.Tensor))
    moved = sum(_nbytes(x) for x in inputs if isinstance(x, torch.Tensor)) + sum(_nbytes(t) for t in state) + written
    declared = getattr(problem.module, "KGEN_FLOPS", None)
    return Roofline(bytes_moved=int(moved), flops=int(declared) if declared is not None else counted,
                    dtype=problem.dtype, output_bytes=int(written))


def floors(problem: Problem, rtol: float | None = None) -> tuple[float | None, float | None]:
    """(the roofline floor, the impossible floor) in ms on this process's GPU (module docstring)."""
    roof, ceilings = compute_roofline(problem), device_ceilings()
    return roof.floor_ms(ceilings, rtol), roof.impossible_ms(ceilings)


@dataclass(frozen=True)
class ProblemFigures:
    """What `kgen problems` shows of one problem at one size."""

    name: str
    path: str
    size: str
    inputs: list[str]  # shapes ("4096×65536"), with the dtype where it is not the problem's ("32768 int64")
    outputs: list[str]
    dtype: str
    flops: int
    bytes_moved: int
    floor_ms: float | None  # None without a GPU
    bound: str | None  # "memory" | "compute"; None without a GPU
    sized_by: str  # "KGEN_SMALL" | "automatic" | "" (the full size)
    changes: list[str]  # "batch_size 100→2" for each constant the size sets


def problem_figures(problem: Problem, ceilings: Ceilings | None) -> ProblemFigures:
    roof = compute_roofline(problem)
    floor = roof.floor_ms(ceilings)

    def shape(spec) -> str:
        if not isinstance(spec, TensorSpec):
            return repr(spec)
        text = "×".join(map(str, spec.shape)) or "scalar"
        return text if spec.dtype == roof.dtype else f"{text} {spec.dtype}"

    return ProblemFigures(
        name=problem.name, path=str(problem.path), size=problem.size,
        inputs=[shape(s) for s in problem.input_specs()], outputs=[shape(s) for s in problem.output_specs()],
        dtype=roof.dtype, flops=roof.flops, bytes_moved=roof.bytes_moved, floor_ms=floor,
        bound=roof.bound(ceilings) if ceilings is not None else None, sized_by=problem.sized_by,
        changes=[f"{name} {full}→{small}" for name, full, small in problem.size_changes()])


def _cache_path() -> Path:
    from kgen.core.resources import cache_dir

    return cache_dir() / "ceilings.json"


QUEUE_AHEAD_CYCLES = 200_000_000  # ~0.1 s at ~2 GHz: the GPU sleeps while the reps are queued
CEILINGS_METHOD = 2  # cache entries measured another way (1: the median of reps not queued ahead) are re-measured


def _fastest_ms(fn, reps: int) -> float:
    """The fastest of `reps` event-timed calls of `fn`, queued behind a GPU sleep.

    A ceiling is the best the GPU does, so the fastest rep, not the median: any host delay can only make a
    rep slower. And every rep is queued before the GPU reaches it: with the GPU idle, a host stall between
    `start.record()` and `fn()` (this runs in a thread beside Ray's start, and a thread waits up to Python's
    5 ms switch interval for the GIL) lands inside the event pair. On the H100 box that measured 1.3 TB/s
    for HBM (3.0 TB/s) and put a search's candidates at 175% of their roofline (twelfth session); the sleep
    (~0.1 s, far longer than the reps' launches) keeps the queue ahead of the GPU."""
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(QUEUE_AHEAD_CYCLES)
    for i in range(reps):
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    return min(s.elapsed_time(e) for s, e in zip(start, end))


def measure_ceilings(device_index: int = 0) -> Ceilings:
    """Measure HBM bandwidth (1 GiB copy, bytes read + written) and FLOP/s of 8192³ matmuls: fp32 with
    TF32 off, TF32, and the faster of fp16 and bf16."""
    with torch.cuda.device(device_index):
        src = torch.randn(1 << 28, device="cuda")  # 1 GiB fp32
        dst = torch.empty_like(src)
        copy_ms = _fastest_ms(lambda: dst.copy_(src), 20)
        bandwidth = 2 * _nbytes(src) / (copy_ms / 1e3)
        del src, dst
        prev = torch.backends.cuda.matmul.allow_tf32
        n = 8192
        a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
        rate = lambda ms: 2 * n**3 / (ms / 1e3)
        try:
            torch.backends.cuda.matmul.allow_tf32 = False
            fp32 = rate(_fastest_ms(lambda: a @ b, 10))
            torch.backends.cuda.matmul.allow_tf32 = True
            tf32 = rate(_fastest_ms(lambda: a @ b, 10))  # a GPU without TF32 runs fp32 here: same rate
        finally:
            torch.backends.cuda.matmul.allow_tf32 = prev
        half = 0.0  # the faster of fp16 and bf16 (a V100 has fp16 tensor cores and no bf16 ones)
        for dtype in (torch.float16, torch.bfloat16):
            try:
                a16, b16 = a.to(dtype), b.to(dtype)
                half = max(half, rate(_fastest_ms(lambda: a16 @ b16, 10)))
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
    if isinstance(cached, dict) and cached.get("method") == CEILINGS_METHOD:
        # entries from before the tensor-core rates, or measured by the median of reps not queued ahead, are not
        return Ceilings(**{k: v for k, v in cached.items() if k != "method"})
    if not measure:
        return None
    ceilings = measure_ceilings(0)
    cache[key] = {**asdict(ceilings), "method": CEILINGS_METHOD}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cache, indent=1))
    except OSError:
        pass  # an unwritable cache costs a re-measure next time, nothing else
    return ceilings
