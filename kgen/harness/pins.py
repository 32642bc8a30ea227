"""What the runner relies on after the candidate is imported, pinned before it and checked after.

The runner runs in the candidate's process, so everything it calls once the candidate is imported is
the candidate's to replace: `torch.cuda.Event.record = fake` (or `setattr`, `type.__setattr__`, a write
into the class's real `__dict__`, a function's `__code__` swapped) would make every timed run report
what the candidate wants. Two defences, in this order:

1. Bound before the import, at the C level where torch offers it (kgen.harness.runner): the CUDA
   events' `record` and `elapsed_time` (`torch._C._CudaEventBase`'s own method descriptors, on events
   and a default-stream object made before the import), the device-wide synchronize
   (`torch._C._cuda_synchronize`), the memory statistics (`torch._C._cuda_memoryStats`), the clock
   (`time.perf_counter`), the op trace's class. Replacing the Python names changes nothing the
   runner does.
2. `Pins`: everything else the runner calls after the import is snapshot by identity before it (the
   namespaces below: each module's dict, the dicts of the classes it defines, each Python function's
   code, defaults and closure cells) and compared after the import and after every call, before the
   runner's report is sent. A difference is named ("torch.Tensor.copy_ replaced") and the candidate
   gets `static_reject`. Identity, not equality: a stand-in with an `__eq__` that says yes is still
   another object. A name a module or class gains is allowed unless it shadows one the runner's
   lookups would otherwise find (a builtin in a module, a base class's attribute in a class): torch
   adds submodules to its namespace as they are imported.
3. The C level (`_CLevel`): a C function keeps its Python object when ctypes rewrites the function
   pointer in its definition (tests/attacks/c8_ctypes_elapsed, c8_ctypes_clock), so the C functions in
   the pinned namespaces (and in their modules' C types), and those the runner bound before the import
   (the events' record and elapsed_time, synchronize, the GPU-side wait, the memory statistics,
   torch.Tensor's copy_/view/shape/dtype/device/layout, the socket's sendall/sendmsg/recvmsg), are pinned
   by the words that decide what a call runs: the definition's address, its function pointers and flags,
   the object's own call slot.

The calls the runner makes after the candidate's import (kgen.harness.runner), and what covers each:
- `load`: `importlib`'s loader (the import itself), `getattr`, `isinstance`, `issubclass` (builtins),
  `torch.nn.Module`, `torch.manual_seed` (bound), `torch.device` as a context, `copy_weights`
  (`Module.state_dict`, `load_state_dict`, `to`, `eval`, `torch.no_grad`), `Channel.send`: pinned
  namespaces (builtins, torch, torch.nn.modules.module, torch.autograd.grad_mode, the runner's and the
  protocol's modules).
- `forward`: `poison_allocator` (`torch.empty`, `Tensor.fill_`, the bound synchronize), `args` (the
  arena's `tensor`: `torch.frombuffer` / `Tensor.view` / slicing), `OpTrace` (bound; its base
  `TorchDispatchMode` in torch.utils._python_dispatch pinned), `LaunchCounter.reset`,
  `time.perf_counter` (bound), the bound synchronize, `deliver` (`describe`: `isinstance`, `type`,
  `torch.Tensor`, `.shape/.dtype/.device/.layout`; `Tensor.copy_`), the bound memory statistics,
  `Channel.send` (`json.dumps` and json.encoder, `struct.pack`, `socket.send_fds`,
  `socket.socket.sendall`).
- `timed`: `args`, the bound events and synchronize, `deliver`, `Channel.send`.
- `profile`: `device_profile` (`torch.autograd.profiler.profile`) and `key_averages` (torch.profiler.profiler,
  torch.autograd.profiler, torch.autograd.profiler_util pinned), `_kernel_launches` (`json.load`, `open`,
  `os.remove`), `_triton_stats`.
- `window`: `torch.cuda.cudart()` (torch.cuda pinned); `ping`: `Tensor.add_`, the bound synchronize.
- between calls, `Channel.receive`: `select.select`, `socket.recv_fds`, `json.loads`, `struct.unpack`,
  `time.monotonic` (pinned modules).
- `fail` (the candidate raised): `classify` and `traceback`'s formatting; what it sends is an error
  outcome, and the exception's text is the candidate's to shape anyway.
- always: the launch counter and the forbidden-use guards that kgen.harness.trace installs on
  triton.runtime.jit / .interpreter, threading, _thread, subprocess, multiprocessing.process, os
  (pinned after they are installed, so undoing a guard is caught too); `sys.modules` entries of every
  pinned module; no trace or profile hook (`sys.settrace`, `sys.setprofile`, `sys.monitoring`) and
  the signal handlers unchanged (each would run the candidate's code inside the runner's own calls).

What this cannot do: it runs in the candidate's process, so a candidate that writes memory with
ctypes where no pin looks (the machine code or the import tables of libcudart and libtorch, the shared
C type slots, the C methods of str, dict and the other builtin types, the snapshot itself, or the code of
this module and its check), or that calls the runner's
own events itself (re-recording the start event mid-forward: tests/attacks/c8_rerecord_start), gets
past it. The judge's clock (kgen.judge.timing, measured slack) and the audit's watched check bound what a
timing lie gains there.
"""

from __future__ import annotations

import builtins
import ctypes
import signal
import sys
import types
from collections.abc import Iterable
from typing import Any, Optional

# Modules whose namespace, and whose classes' namespaces, the runner relies on after the import. TIMED: what
# a timed run uses outside the candidate's forward (the runner and the protocol bind torch.Tensor and the
# socket functions before the import), checked after every timed run (~0.3 ms on a busy CPU); the rest is
# checked after the import and every verification and profiled call (~5 ms).
TIMED_MODULES = (
    "builtins", "time", "json", "json.encoder", "json.decoder", "json.scanner", "struct", "select",
    "torch.autograd.grad_mode", "kgen.harness.runner", "kgen.harness.protocol", "kgen.harness.gpu_share",
    "kgen.harness.pins",
)
OTHER_MODULES = (
    "torch", "socket", "_socket", "os", "posix", "pickle", "threading", "_thread", "subprocess",
    "multiprocessing.process",
    "torch.cuda", "torch.cuda.streams", "torch.cuda.memory", "torch.nn.modules.module",
    "torch.utils._python_dispatch", "torch.utils.flop_counter",
    "torch.profiler", "torch.profiler.profiler", "torch.autograd.profiler", "torch.autograd.profiler_util",
    "triton", "triton.runtime.jit", "triton.runtime.interpreter", "kgen.harness.trace", "kgen.harness.cuda_build",
)
# Classes defined elsewhere than where the runner reaches them (torch.Tensor is torch._tensor's); torch's own
# classes are pinned only by name here (it defines hundreds, the legacy tensor types among them).
TIMED_CLASSES = ("torch.Tensor", "socket.socket")
OTHER_CLASSES = ("torch.nn.Module", "torch.device", "torch.dtype",
                 "torch._C.TensorBase")  # a C type: only a write into its real dict (gc, ctypes) changes it
# Names the runner does not call after the import (it bound them before), and that torch itself replaces
# when torch._dynamo is first imported (it wraps manual_seed).
NOT_RELIED_ON = frozenset({"torch.manual_seed"})
HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement, whose attributes can be set


def _resolve(dotted: str) -> Any:
    module, _, attr = dotted.rpartition(".")
    return getattr(sys.modules.get(module), attr, None)


def _functions(value: Any) -> list[types.FunctionType]:
    """The Python functions behind a namespace entry (a function, a static/class method, a property)."""
    if isinstance(value, types.FunctionType):
        return [value]
    if isinstance(value, (staticmethod, classmethod)):
        return _functions(value.__func__)
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if isinstance(f, types.FunctionType)]
    return []


class _Function:
    """A Python function as it was: besides its identity, its code, defaults and closure cells' contents
    (all writable from Python), compared by identity, never by an `__eq__` a stand-in may define."""

    __slots__ = ("cells", "code", "defaults", "fn", "kwdefaults", "label")

    def __init__(self, label: str, fn: types.FunctionType):
        self.label, self.fn = label, fn
        self.code, self.defaults, self.kwdefaults = fn.__code__, fn.__defaults__, fn.__kwdefaults__
        self.cells = tuple((cell, _cell(cell)) for cell in fn.__closure__ or ())

    def unchanged(self) -> bool:
        fn = self.fn
        if fn.__code__ is not self.code or fn.__defaults__ is not self.defaults \
                or fn.__kwdefaults__ is not self.kwdefaults:
            return False
        return all(_cell(cell) is contents for cell, contents in self.cells)


_EMPTY = object()


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _EMPTY


_BUILTIN = type(len)  # builtin_function_or_method (PyCFunctionObject): m_ml at 16, m_self at 24, vectorcall at 48
_METHOD_DESCRIPTOR = type(str.join)  # PyMethodDescrObject: d_method at 40, vectorcall at 48
_GETSET_DESCRIPTOR = type(int.__dict__["real"])  # PyGetSetDescrObject: d_getset at 40
_WORD = ctypes.c_uint64.from_address


class _CLevel:
    """A C function (or a C attribute's getter and setter) as it was at the C level: the definition its
    object points to, that definition's function pointers and flags, the object's own call slot. ctypes can
    rewrite any of these in place (tests/attacks/c8_ctypes_elapsed rewrites the function pointer behind
    elapsed_time) and replace no Python object, so identity pins cannot see it; these words can.

    The offsets are CPython's 64-bit layouts (3.8-3.13, with the GIL); where the word at the definition's
    offset does not lead to the object's own name, the layout is another and the object is not pinned (`of`
    returns None) rather than misread."""

    __slots__ = ("addresses", "label", "obj", "values")

    def __init__(self, label: str, obj: Any, addresses: tuple[int, ...]):
        self.label, self.obj, self.addresses = label, obj, addresses  # obj held: its address stays its own
        self.values = self.read()

    @classmethod
    def of(cls, label: str, obj: Any) -> Optional[_CLevel]:
        kind = type(obj)
        if sys.maxsize < 2**32 or kind not in (_BUILTIN, _METHOD_DESCRIPTOR, _GETSET_DESCRIPTOR):
            return None
        base = id(obj)
        definition = _WORD(base + (16 if kind is _BUILTIN else 40)).value
        if not definition or ctypes.string_at(_WORD(definition).value) != str(obj.__name__).encode():
            return None
        if kind is _GETSET_DESCRIPTOR:  # PyGetSetDef: name, get, set, doc, closure
            fields = (base + 40, definition + 8, definition + 16, definition + 32)
        else:  # PyMethodDef: name, ml_meth, ml_flags; the object's vectorcall (and a builtin's bound self)
            fields = (base + 40 if kind is _METHOD_DESCRIPTOR else base + 16, definition + 8, definition + 16,
                      base + 48) + ((base + 24,) if kind is _BUILTIN else ())
        return cls(label, obj, fields)

    def read(self) -> tuple[int, ...]:
        return tuple(_WORD(address).value for address in self.addresses)

    def unchanged(self) -> bool:
        return self.read() == self.values


class _Namespace:
    """One dict (a module's or a class's), as it was: its entries by identity."""

    def __init__(self, label: str, owner: Any, is_class: bool):
        self.label, self.owner, self.is_class = label, owner, is_class
        self.take()

    def take(self) -> None:
        d = self.owner.__dict__
        self.entries = dict(d)  # holds the objects, so their ids stay theirs
        self.key_ids = tuple(map(id, d))
        self.value_ids = tuple(map(id, d.values()))

    def unchanged(self) -> bool:
        d = self.owner.__dict__
        return tuple(map(id, d)) == self.key_ids and tuple(map(id, d.values())) == self.value_ids

    def differences(self) -> list[str]:
        """What changed, named; an empty list when only harmless names were added (then re-taken)."""
        d = self.owner.__dict__
        changed = []
        for key, value in self.entries.items():
            if f"{self.label}.{key}" in NOT_RELIED_ON:
                continue
            if key not in d:
                changed.append(f"{self.label}.{key} deleted")
            elif d[key] is not value:
                changed.append(f"{self.label}.{key} replaced")
        for key in d.keys() - self.entries.keys():
            if self._shadows(key):
                changed.append(f"{self.label}.{key} added")
        if not changed:
            self.take()
        return changed

    def _shadows(self, key: Any) -> bool:
        if not isinstance(key, str) or type(key) is not str:
            return True
        if self.is_class:
            return key.startswith("__") or any(key in vars(base) for base in self.owner.__mro__[1:])
        return hasattr(builtins, key)


class _Instance:
    """An object the runner holds, as it was: its class and its fixed attributes, by identity."""

    def __init__(self, label: str, obj: Any, fixed: tuple[str, ...]):
        self.label, self.obj, self.cls = label, obj, type(obj)
        self.fixed = {name: obj.__dict__[name] for name in fixed if name in obj.__dict__}

    def differences(self) -> list[str]:
        if type(self.obj) is not self.cls:
            return [f"the class of {self.label} replaced"]
        d = self.obj.__dict__
        changed = [f"{self.label}.{name} replaced" for name, value in self.fixed.items() if d.get(name) is not value]
        changed += [f"{self.label}.{name} added" for name in d if not isinstance(name, str) or type(name) is not str
                    or any(name in vars(base) for base in self.cls.__mro__)]
        return changed


class Pins:
    """The snapshot: `take()` before the candidate exists, `changed()` after each of its calls."""

    def __init__(self, modules: Iterable[str] = TIMED_MODULES + OTHER_MODULES,
                 classes: Iterable[str] = TIMED_CLASSES + OTHER_CLASSES):
        self.namespaces: list[_Namespace] = []
        self.functions: list[_Function] = []
        self.c_level: list[_CLevel] = []
        self._c_seen: set[int] = set()
        self.modules: dict[str, Any] = {}
        seen: set[int] = set()
        for name in modules:
            module = sys.modules.get(name)
            if module is None:
                continue
            self.modules[name] = module
            self._add(name, module, False, seen)
            if name == "torch":
                continue
            for attr, value in list(vars(module).items()):
                if not (isinstance(value, type) and value.__module__ == name):
                    continue
                if value.__flags__ & HEAP_TYPE:
                    self._add(f"{name}.{attr}", value, True, seen)
                elif name != "builtins":  # a C type (_socket.socket) refuses setattr, but its C functions can be
                    # rewritten in place (the builtins' own types, str, dict..., hold ~1500: left out, for speed)
                    for key, entry in list(vars(value).items()):
                        self.c_function(f"{name}.{value.__qualname__}.{key}", entry)
        for dotted in classes:
            cls = _resolve(dotted)
            if isinstance(cls, type):
                self._add(dotted, cls, True, seen)
        self.instances: list[_Instance] = []
        self.handlers = self._handlers()

    def instance(self, label: str, obj: Any, fixed: Iterable[str]) -> None:
        """Pin an object the runner holds: its class, the attributes in `fixed`, and no attribute of its
        own that shadows one of its class (`runner.deliver = fake`)."""
        self.instances.append(_Instance(label, obj, tuple(fixed)))

    def _add(self, label: str, owner: Any, is_class: bool, seen: set[int]) -> None:
        if id(owner) in seen:
            return
        seen.add(id(owner))
        namespace = _Namespace(label, owner, is_class)
        self.namespaces.append(namespace)
        # the Python functions' code, defaults and closures too (not of torch's top level: C functions mostly)
        if label not in ("torch", "builtins"):
            for key, value in namespace.entries.items():
                for fn in _functions(value):
                    self.functions.append(_Function(f"{label}.{key}", fn))
        for key, value in namespace.entries.items():  # and the C functions' definitions
            self.c_function(f"{label}.{key}", value)

    def c_function(self, label: str, obj: Any) -> None:
        """Pin a C function (or C attribute) at the C level (_CLevel): kgen's own bindings (the runner's
        events, synchronize, memory statistics) and every one in a pinned namespace. Other objects: ignored."""
        if id(obj) in self._c_seen:
            return
        if type(obj) in (_METHOD_DESCRIPTOR, _GETSET_DESCRIPTOR):  # named by its class, not by an alias of it
            label = f"{obj.__objclass__.__module__}.{obj.__objclass__.__qualname__}.{obj.__name__}"
        pinned = _CLevel.of(label, obj)
        if pinned is not None:
            self._c_seen.add(id(obj))
            self.c_level.append(pinned)

    @staticmethod
    def _handlers() -> dict[int, Any]:
        handlers = {}
        for sig in signal.valid_signals():
            try:
                handlers[sig] = signal.getsignal(sig)
            except (ValueError, OSError):
                continue
        return handlers

    def changed(self) -> list[str]:
        """What differs from the snapshot, named; empty when nothing the runner relies on changed."""
        found: list[str] = []
        for namespace in self.namespaces:
            if not namespace.unchanged():
                found += namespace.differences()
        found += [f"{f.label} rewritten (its code, defaults or closure)" for f in self.functions if not f.unchanged()]
        found += [f"{c.label} rewritten at the C level (its function pointer, flags or definition)"
                  for c in self.c_level if not c.unchanged()]
        for instance in self.instances:
            found += instance.differences()
        for name, module in self.modules.items():
            if sys.modules.get(name) is not module:
                found.append(f"sys.modules[{name!r}] replaced")
        found += hooks_set()
        for sig, handler in self.handlers.items():
            try:
                if signal.getsignal(sig) is not handler:
                    found.append(f"the handler of signal {signal.Signals(sig).name} replaced")
            except (ValueError, OSError):
                continue
        return found


def hooks_set() -> list[str]:
    """Trace, profile and monitoring hooks: each runs the candidate's code inside the runner's calls."""
    found = []
    if sys.gettrace() is not None:
        found.append("a trace hook set (sys.settrace)")
    if sys.getprofile() is not None:
        found.append("a profile hook set (sys.setprofile)")
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:
        for tool in range(6):
            if monitoring.get_tool(tool) is not None:
                found.append(f"a sys.monitoring tool registered ({monitoring.get_tool(tool)!s:.40})")
    return found


def message(changed: list[str], limit: int = 12) -> Optional[str]:
    """The candidate's rejection, naming what it replaced; None when nothing was."""
    if not changed:
        return None
    shown = "; ".join(changed[:limit]) + (f"; and {len(changed) - limit} more" if len(changed) > limit else "")
    return (f"it replaced what kgen's runner uses after the candidate is imported ({shown}): candidates may not "
            "change torch, the timing functions or the runner's own code")
