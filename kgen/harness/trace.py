"""What a forward really does, seen from inside the runner: the aten operators it calls and the work
they do, the kernels of its own it launches, and the forbidden things it starts.

All of this runs in the candidate's process, so a candidate written to fool it can; it is the
precise, readable evidence for honest mistakes (an LLM that called F.softmax), not the safeguard.
The judge's safeguards do not depend on it: the ablation run (the candidate with its own kernels'
bodies removed must fail), the GPU kernel audit, and its own clock.

- `OpTrace`: a TorchDispatchMode over one forward (every trial's, not only the first), recording every
  aten operator that reaches the dispatcher, C++ calls from a load_inline extension included, with
  the work it did: its FLOPs where torch.utils.flop_counter has a formula (matmul, convolution,
  attention), else the elements it wrote. The judge measures the reference the same way and compares
  work, not operator names, so torch's decomposition of a softmax beside a one-element kernel counts
  as torch doing the softmax. Allocation, views, copies, reshapes and fills are not compute.
- `LaunchCounter`: wraps Triton's launch entry points (compiled and interpreted) and counts the
  launches of kernels defined in the candidate's own file; CUDA extension calls are counted by
  kgen.harness.cuda_build's module proxy into the same counter.
- `ForbiddenUseRecorder`: patches the Python entry points of torch.compile, CUDA streams, threads
  and processes so an honest mistake gets a clear message (the sandbox's seccomp filter is what
  actually stops processes).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Operators that allocate, view, copy, reshape or fill: layout and memory, not the problem's work.
NON_COMPUTE_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill", "fill_", "zero", "zero_", "scalar_tensor",
    "arange", "linspace", "copy", "copy_", "clone", "_to_copy", "to", "contiguous", "detach", "detach_", "lift",
    "lift_fresh", "lift_fresh_copy", "alias", "resize_", "resize_as_", "set_", "as_strided", "as_strided_",
    "view", "_unsafe_view", "view_as", "reshape", "_reshape_alias", "flatten", "unflatten", "expand", "expand_as",
    "permute", "transpose", "transpose_", "t", "t_", "unsqueeze", "unsqueeze_", "squeeze", "squeeze_", "select",
    "slice", "narrow", "split", "split_with_sizes", "chunk", "unbind", "cat", "stack", "constant_pad_nd",
    "_local_scalar_dense", "item", "is_nonzero", "is_same_size", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "record_stream", "_has_compatible_shallow_copy_type", "_copy_from", "_copy_from_and_resize",
    "_pin_memory", "pin_memory", "_make_dep_token", "_resize_output_", "resize", "unfold_copy", "_to_dense",
    "_nested_tensor_from_tensor_list", "set_source_Storage_storage_offset_size_stride",
    # random fills: what a scratch buffer holds, not the problem's work
    "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm", "normal", "normal_",
    "uniform", "uniform_", "random", "random_", "bernoulli", "bernoulli_", "exponential_", "geometric_",
    "log_normal_", "cauchy_",
}
# Operators that do the same work under different names: a candidate covers the family with any.
OP_FAMILIES = {
    "matmul": {"mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul", "dot", "vdot", "mv", "addmv", "linear",
               "_addmm_activation", "einsum", "tensordot", "_int_mm", "_scaled_mm", "mkldnn_linear"},
    "convolution": {"convolution", "_convolution", "conv1d", "conv2d", "conv3d", "cudnn_convolution",
                    "mkldnn_convolution", "_conv_depthwise2d", "conv_depthwise3d", "_slow_conv2d_forward",
                    "slow_conv3d_forward", "thnn_conv2d", "_nnpack_spatial_convolution", "convolution_overrideable",
                    "miopen_convolution", "unfold", "im2col"},
    "softmax": {"_softmax", "softmax", "_safe_softmax", "_log_softmax", "log_softmax", "_masked_softmax"},
    "layer_norm": {"native_layer_norm", "layer_norm", "rms_norm", "_fused_rms_norm", "native_group_norm",
                   "group_norm", "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                   "batch_norm", "instance_norm"},
    "max_pool": {"max_pool2d", "max_pool2d_with_indices", "max_pool1d", "max_pool3d", "max_pool3d_with_indices",
                 "max_pool1d_with_indices", "adaptive_max_pool2d", "mkldnn_max_pool2d", "quantized_max_pool2d"},
    "relu": {"relu", "relu_", "clamp", "clamp_", "clamp_min", "clamp_min_", "threshold", "threshold_", "hardtanh",
             "hardtanh_", "relu6", "maximum"},
}
_FAMILY_OF = {op: family for family, ops in OP_FAMILIES.items() for op in ops}


def op_name(func) -> str:
    """'aten::_softmax' -> '_softmax' (overload dropped)."""
    name = func._schema.name if hasattr(func, "_schema") else str(func)
    return name.split("::", 1)[-1]


def compute_family(name: str) -> Optional[str]:
    """The family a compute operator belongs to, or None for non-compute operators."""
    if name in NON_COMPUTE_OPS or name.rstrip("_") in NON_COMPUTE_OPS:
        return None
    return _FAMILY_OF.get(name, _FAMILY_OF.get(name.rstrip("_"), name.rstrip("_")))


def _numel_out(out: Any) -> int:
    if isinstance(out, torch.Tensor):
        return out.numel()
    if isinstance(out, (tuple, list)):
        return sum(_numel_out(o) for o in out)
    return 0


def op_work(func, args: tuple, kwargs: dict, out: Any) -> int:
    """The work an operator call did: FLOPs where torch's flop counter has a formula, else the
    number of elements it produced."""
    try:
        from torch.utils.flop_counter import flop_registry

        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            return int(formula(*args, **kwargs, out_val=out))
    except Exception:  # noqa: BLE001 - an operator the formula does not understand: count elements
        pass
    return _numel_out(out)


class OpTrace(TorchDispatchMode):
    """Records the compute operators called while active and the work each did."""

    def __init__(self):
        super().__init__()
        self.work: dict[str, int] = {}

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """No torch._dynamo.disable around __torch_dispatch__: torch wraps it lazily, and the wrapper's first call
        imports torch._dynamo (5.2-6.3 s on the H100 box, 2 s on the 2-core one: in each runner's start and in the
        judge's first reference, issue 26). The guard only matters inside torch.compile'd code, which neither a
        reference's forward nor a candidate's (the static checks reject torch.compile) runs under a trace; torch's
        own default before it."""
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = op_name(func)
        if compute_family(name) is not None:
            self.work[name] = self.work.get(name, 0) + op_work(func, args, kwargs, out)
        return out

    def compute_ops(self) -> list[str]:
        return sorted(self.work)

    def total_work(self) -> int:
        return sum(self.work.values())


def _kernel_function(fn):
    """The Python function behind a JITFunction / InterpretedFunction / Autotuner chain."""
    inner = getattr(fn, "fn", fn)
    while hasattr(inner, "fn") and not hasattr(inner, "__code__"):
        inner = inner.fn
    return inner


# Code objects of kgen's own wrappers that run compilers (Triton's ptxas, nvcc, ninja) on the
# candidate's behalf: a process started below one of them is kgen's, not the candidate's.
TRUSTED_CODE: set = set()


def trust(fn: Callable) -> Callable:
    TRUSTED_CODE.add(fn.__code__)
    return fn


def _from_file(filename: str) -> bool:
    """Whether the nearest frame up the stack that is the candidate's or one of kgen's trusted
    wrappers is the candidate's."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code in TRUSTED_CODE:
            return False
        if frame.f_code.co_filename == filename:
            return True
        frame = frame.f_back
    return False


@dataclass
class LaunchCounter:
    """Counts launches of kernels defined in the files of loaded modules (Triton), and calls into the
    candidate's CUDA extensions, per module: the real candidate and its ablated copy are separate files."""

    files: dict[str, str] = field(default_factory=dict)  # module -> its source file
    launches: dict[str, int] = field(default_factory=dict)
    names: dict[str, list[str]] = field(default_factory=dict)

    def count(self, module: str, name: str) -> None:
        self.launches[module] = self.launches.get(module, 0) + 1
        names = self.names.setdefault(module, [])
        if name not in names:
            names.append(name)

    def count_extension(self, name: str) -> None:
        self.count("candidate", name)

    def reset(self) -> None:
        self.launches = {}

    def install(self) -> None:
        """Wrap the `run` of Triton's JITFunction and InterpretedFunction (what `kernel[grid](...)`
        and the autotuner call); import triton first, so the candidate gets the wrapped classes."""
        try:
            from triton.runtime import jit as triton_jit
        except ImportError:
            return
        classes = [triton_jit.JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction
            classes.append(InterpretedFunction)
        except ImportError:
            pass
        for cls in classes:
            cls.run = self._wrap_run(cls.run)

    def _wrap_run(self, original: Callable) -> Callable:
        counter = self

        def run(fn_self, *args, **kwargs):
            if not kwargs.get("warmup", False):
                inner = _kernel_function(fn_self)
                filename = getattr(getattr(inner, "__code__", None), "co_filename", None)
                for module, path in counter.files.items():
                    if filename == path:
                        counter.count(module, getattr(inner, "__name__", "triton kernel"))
            return original(fn_self, *args, **kwargs)

        run.__wrapped__ = original
        return trust(run)


class ForbiddenUse(PermissionError):
    """Raised into a candidate that tries something candidates may not do."""


@dataclass
class ForbiddenUseRecorder:
    """Records (and refuses) torch.compile, CUDA streams, threads and processes started from the
    candidate's file. Uses from torch's or triton's own code (no candidate frame on the stack) pass."""

    candidate_file: str
    uses: list[str] = field(default_factory=list)

    def _guard(self, what: str, original: Callable, applies: Callable[..., bool] = lambda *a, **k: True) -> Callable:
        recorder = self

        def guarded(*args, **kwargs):
            if applies(*args, **kwargs) and _from_file(recorder.candidate_file):
                if what not in recorder.uses:
                    recorder.uses.append(what)
                raise ForbiddenUse(f"kgen: candidates may not {what}")
            return original(*args, **kwargs)

        guarded.__wrapped__ = original
        return guarded

    def install(self) -> None:
        import multiprocessing.process
        import os
        import subprocess
        import threading

        torch.compile = self._guard("call torch.compile", torch.compile)
        dynamo = sys.modules.get("torch._dynamo")  # imported lazily; importing it here costs seconds
        if dynamo is not None:
            dynamo.optimize = self._guard("call torch._dynamo.optimize", dynamo.optimize)
        streams = torch.cuda.streams if hasattr(torch.cuda, "streams") else None
        for owner in filter(None, (torch.cuda, streams)):
            for name, what in (("Stream", "create a CUDA stream"), ("ExternalStream", "use an external CUDA stream")):
                cls = getattr(owner, name, None)
                if isinstance(cls, type) and "__new__" in cls.__dict__:
                    new = cls.__dict__["__new__"]
                    new = getattr(new, "__func__", new)
                    # current_stream() wraps the existing stream in a Stream(stream_id=...): not a new one
                    cls.__new__ = staticmethod(self._guard(what, new, lambda *a, **k: "stream_id" not in k))
        for name in ("set_stream", "stream"):
            if hasattr(torch.cuda, name):
                setattr(torch.cuda, name, self._guard("switch CUDA streams", getattr(torch.cuda, name)))
        threading.Thread.start = self._guard("start a thread", threading.Thread.start)
        multiprocessing.process.BaseProcess.start = self._guard("start a process",
                                                                multiprocessing.process.BaseProcess.start)
        subprocess.Popen.__init__ = self._guard("start a process", subprocess.Popen.__init__)
        for name in ("fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "execv", "execve",
                     "execvp", "execvpe", "execl", "execle", "execlp", "execlpe", "spawnv", "spawnve", "spawnvp",
                     "spawnvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe"):
            if hasattr(os, name):
                setattr(os, name, self._guard("start a process", getattr(os, name)))
        try:
            import _thread
            _thread.start_new_thread = self._guard("start a thread", _thread.start_new_thread)
            _thread.start_new = self._guard("start a thread", getattr(_thread, "start_new", _thread.start_new_thread))
        except (ImportError, AttributeError):
            pass
