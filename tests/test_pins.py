"""What kgen's runner relies on after the candidate's import cannot be replaced unseen (kgen.harness.pins),
and the static check rejects the spellings it can read. The pins are exercised here in this process, with
the real runner, protocol and trace modules loaded (the runner builds its Pins the same way, before the
candidate's import); each replacement is undone before the next. One real evaluation on the CPU shows the
runner's check end in `static_reject` naming what was replaced."""

import contextlib
import ctypes
import gc
import json
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
import torch

import kgen.harness.protocol as protocol
import kgen.harness.runner as runner
import kgen.harness.trace  # noqa: F401 - pinned: loaded as in the runner
from kgen.harness.pins import Pins

ATTACKS = Path(__file__).resolve().parent / "attacks"
CANDIDATES = Path(__file__).resolve().parent / "candidates"


@pytest.fixture
def pins():
    """Taken per test: pytest-timeout sets its own SIGALRM handler around each one."""
    return Pins()


@contextlib.contextmanager
def class_attribute(cls, name, value, how):
    """Set `cls.name` by one spelling; put the original back afterwards."""
    had = name in cls.__dict__
    original = cls.__dict__.get(name)
    if how == "setattr":
        setattr(cls, name, value)
    elif how == "type.__setattr__":
        type.__setattr__(cls, name, value)
    elif how == "real dict":  # past the mappingproxy: no setattr runs at all
        gc.get_referents(cls.__dict__)[0][name] = value
        ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))
    try:
        yield
    finally:
        if how == "real dict":
            gc.get_referents(cls.__dict__)[0][name] = original
            ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))
        elif had:
            type.__setattr__(cls, name, original)
        else:
            type.__delattr__(cls, name)


@contextlib.contextmanager
def module_attribute(module, name, value):
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


def fake(*args, **kwargs):
    return 0.0


def test_an_untouched_world_is_unchanged(pins):
    assert pins.changed() == []


@pytest.mark.parametrize("how", ["setattr", "type.__setattr__", "real dict"])
@pytest.mark.parametrize("name", ["record", "elapsed_time", "synchronize"])
def test_replacing_an_event_method_is_named_however_it_is_spelled(pins, how, name):
    with class_attribute(torch.cuda.Event, name, fake, how):
        assert f"torch.cuda.streams.Event.{name} replaced" in pins.changed()
    assert pins.changed() == []


def test_a_tensor_method_shadowed_on_torch_tensor_is_named(pins):
    """torch.Tensor.copy_ comes from torch._C.TensorBase; the runner delivers outputs with it. A copy_ put
    on torch.Tensor itself shadows it: a new name, caught because a base class has it."""
    with class_attribute(torch.Tensor, "copy_", fake, "setattr"):
        assert "torch.Tensor.copy_ added" in pins.changed()
    assert pins.changed() == []


def test_a_method_written_into_torchs_c_tensor_type_is_named(pins):
    """torch._C.TensorBase refuses setattr; its real dict, reached through gc, does not."""
    with class_attribute(torch._C.TensorBase, "copy_", fake, "real dict"):
        assert "torch._C.TensorBase.copy_ replaced" in pins.changed()
    assert pins.changed() == []


@pytest.mark.parametrize(("module", "name", "label"), [
    (time, "perf_counter", "time.perf_counter replaced"),
    (json, "dumps", "json.dumps replaced"),
    (torch.cuda, "synchronize", "torch.cuda.synchronize replaced"),
    (torch.cuda, "Event", "torch.cuda.Event replaced"),
    (protocol, "send_fds", "kgen.harness.protocol.send_fds replaced"),
])
def test_replacing_what_the_channel_and_the_clock_use_is_named(pins, module, name, label):
    with module_attribute(module, name, fake):
        assert label in pins.changed()
    assert pins.changed() == []


def test_a_socket_method_shadowed_on_the_class_is_named(pins):
    with class_attribute(socket.socket, "sendall", fake, "setattr"):
        assert "socket.socket.sendall added" in pins.changed()


def test_a_builtin_shadowed_in_the_runners_module_is_named(pins):
    """`isinstance` put into kgen.harness.runner's globals would change what describe() sees."""
    vars(runner)["isinstance"] = fake
    try:
        assert "kgen.harness.runner.isinstance added" in pins.changed()
    finally:
        del vars(runner)["isinstance"]
    assert pins.changed() == []


def test_a_function_whose_code_is_swapped_in_place_is_named(pins):
    """The function object stays the same; only its __code__ changes (tests/attacks/c8_channel_code_swap)."""
    send = protocol.Channel.send
    original = send.__code__
    send.__code__ = (lambda self, message, fds=(): None).__code__
    try:
        assert "kgen.harness.protocol.Channel.send rewritten (its code, defaults or closure)" in pins.changed()
    finally:
        send.__code__ = original
    assert pins.changed() == []


def test_a_closure_cell_rewritten_is_named(pins):
    """The launch counter's wrapper of Triton's run keeps the original in a closure cell."""
    from triton.runtime.jit import JITFunction

    from kgen.harness.trace import LaunchCounter

    saved = JITFunction.run
    LaunchCounter().install()
    fresh = Pins()
    cell = JITFunction.run.__closure__[JITFunction.run.__code__.co_freevars.index("original")]
    kept = cell.cell_contents
    cell.cell_contents = fake
    try:
        assert any(c.startswith("triton.runtime.jit.JITFunction.run rewritten") for c in fresh.changed())
    finally:
        cell.cell_contents = kept
        JITFunction.run = saved


def test_a_module_replaced_in_sys_modules_is_named(pins):
    original = sys.modules["json"]
    sys.modules["json"] = type(sys)("json")
    try:
        assert "sys.modules['json'] replaced" in pins.changed()
    finally:
        sys.modules["json"] = original


def test_a_profile_hook_and_a_signal_handler_are_named(pins):
    """Either would run the candidate's code inside the runner's own calls (tests/attacks/c8_profile_hook)."""
    sys.setprofile(lambda frame, event, arg: None)
    try:
        assert "a profile hook set (sys.setprofile)" in pins.changed()
    finally:
        sys.setprofile(None)
    previous = signal.signal(signal.SIGUSR2, lambda *a: None)
    try:
        assert "the handler of signal SIGUSR2 replaced" in pins.changed()
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert pins.changed() == []


def test_an_instance_attribute_shadowing_a_method_is_named():
    class Holder:
        def deliver(self):
            return "real"

    holder = Holder()
    holder.channel = object()
    pins = Pins(modules=(), classes=())
    pins.instance("the runner", holder, ("channel",))
    holder.deliver = fake
    holder.channel = object()
    assert set(pins.changed()) == {"the runner.deliver added", "the runner.channel replaced"}


@contextlib.contextmanager
def c_word(address, value):
    """Write one 64-bit word in this process's memory (as a candidate with ctypes would); put it back after."""
    word = ctypes.c_uint64.from_address(address)
    original = word.value
    word.value = value
    try:
        yield
    finally:
        word.value = original


def definition(obj):
    """The C definition (PyMethodDef, PyGetSetDef) a builtin (at 16) or a descriptor (at 40) points to."""
    return ctypes.c_uint64.from_address(id(obj) + (16 if isinstance(obj, type(len)) else 40)).value


def word_at(address):
    return ctypes.c_uint64.from_address(address).value


def test_a_builtins_function_pointer_rewritten_is_named(pins):
    """tests/attacks/c8_ctypes_clock's rewrite, undone at once: time.perf_counter's definition pointed at
    time.monotonic's C function (same calling convention: harmless while it lasts)."""
    with c_word(definition(time.perf_counter) + 8, word_at(definition(time.monotonic) + 8)):
        assert "time.perf_counter rewritten at the C level (its function pointer, flags or definition)" \
            in pins.changed()
    assert pins.changed() == []


def test_a_builtins_own_call_slot_rewritten_is_named(pins):
    """The object's vectorcall slot (what a call goes through first), pointed at another builtin's."""
    with c_word(id(time.perf_counter) + 48, word_at(id(time.monotonic) + 48) + 16):
        assert any(c.startswith("time.perf_counter rewritten at the C level") for c in pins.changed())
    assert pins.changed() == []


def test_a_c_method_of_a_class_rewritten_is_named(pins):
    """A method descriptor (what the runner's event methods are): _socket.socket.sendall's C function
    pointed at send's. The runner's channel sends its replies with it."""
    c_socket = socket.socket.__mro__[1]
    sendall, send = vars(c_socket)["sendall"], vars(c_socket)["send"]
    with c_word(definition(sendall) + 8, word_at(definition(send) + 8)):
        assert "_socket.socket.sendall rewritten at the C level (its function pointer, flags or definition)" \
            in pins.changed()
    assert pins.changed() == []


def test_a_c_attributes_getter_rewritten_is_named(pins):
    """A getset descriptor: torch._C.TensorBase.shape's getter pointed at dtype's (describe() reads .shape)."""
    shape, dtype = vars(torch._C.TensorBase)["shape"], vars(torch._C.TensorBase)["dtype"]
    with c_word(definition(shape) + 8, word_at(definition(dtype) + 8)):
        assert "torch._C.TensorBase.shape rewritten at the C level (its function pointer, flags or definition)" \
            in pins.changed()
    assert pins.changed() == []


@pytest.mark.skipif("elapsed_time" not in vars(torch._C._CudaEventBase),
                    reason="torch without CUDA: its event class has no methods to rewrite")
def test_the_events_elapsed_time_rewritten_as_c8_ctypes_elapsed_does_is_named():
    """The runner's own binding (taken from _CudaEventBase's dict before the import), rewritten in place: its
    definition's function pointer pointed at record's (never called while it lasts)."""
    elapsed, record = vars(torch._C._CudaEventBase)["elapsed_time"], vars(torch._C._CudaEventBase)["record"]
    pins = Pins(modules=(), classes=())
    pins.c_function("the runner's elapsed_time", elapsed)
    with c_word(definition(elapsed) + 8, word_at(definition(record) + 8)):
        assert pins.changed() == ["torch._C._CudaEventBase.elapsed_time rewritten at the C level (its function "
                                  "pointer, flags or definition)"]
    assert pins.changed() == []


def test_kgens_own_bindings_are_pinned_at_the_c_level_and_nothing_else_is():
    """What the runner bound before the import (its events, synchronize...) is pinned by c_function even
    outside any pinned namespace; a Python function or a class is not pinned at the C level."""
    from kgen.harness.pins import _CLevel

    pins = Pins(modules=(), classes=())
    pins.c_function("a bound clock", time.perf_counter)
    pins.c_function("a Python function", fake)
    assert [c.label for c in pins.c_level] == ["a bound clock"]
    with c_word(definition(time.perf_counter) + 8, word_at(definition(time.monotonic) + 8)):
        assert pins.changed() == ["a bound clock rewritten at the C level (its function pointer, flags or "
                                  "definition)"]
    assert _CLevel.of("a Python function", fake) is None and _CLevel.of("a class", Pins) is None


@pytest.mark.parametrize("line", [
    "torch.cuda.Event.record = lambda *a: None",
    "setattr(torch.cuda.Event, 'elapsed_time', None)",
    "type.__setattr__(torch.cuda.Event, 'elapsed_time', None)",
    "object.__setattr__(torch.Tensor, 'copy_', None)",
    "torch.cuda.Event.__setattr__('record', None)",
    "vars(torch.Tensor)['copy_'] = None",
    "torch.Tensor.__dict__.update(copy_=None)",
    "from torch.cuda import Event\nEvent.record = None",
    "import time\ntime.perf_counter = lambda: 0.0",
    "del torch.cuda.synchronize",
    "torch.cuda.synchronize, y = None, 1",
    "torch.cuda.Event.elapsed_time.__code__ = (lambda s, e: 0.0).__code__",
    "import json as j\nj.dumps = str",
])
def test_the_static_check_rejects_the_spellings_it_can_read(line):
    from kgen.judge.static_checks import check_source

    source = (CANDIDATES / "good_triton_softmax.py").read_text() + "\n" + line + "\n"
    rejection = check_source(source).rejection
    assert rejection is not None and rejection.startswith("replaces '"), rejection


@pytest.mark.parametrize("line", [
    "torch.backends.cuda.matmul.allow_tf32 = True",
    "event_type = torch.cuda.Event",
    "class Box:\n    pass\nBox.value = 1",
])
def test_the_static_check_lets_honest_assignments_pass(line):
    from kgen.judge.static_checks import check_source

    source = (CANDIDATES / "good_triton_softmax.py").read_text() + "\n" + line + "\n"
    assert check_source(source).rejection is None


def test_the_runner_rejects_a_candidate_that_replaces_event_methods_on_the_cpu():
    """tests/attacks/c8_event_setattr through the real judge and sandbox: its setattr is spelled through
    getattr (no static check sees it); the runner's check after the import names both methods."""
    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate

    result = evaluate_candidate("softmax", (ATTACKS / "c8_event_setattr.py").read_text(),
                                EvalSettings(device="cpu", size="small", timeout_s=120))
    assert result.outcome == "static_reject", result.message
    assert "torch.cuda.streams.Event.elapsed_time replaced" in result.message
    assert "torch.cuda.streams.Event.record replaced" in result.message


def test_the_runner_rejects_a_candidate_that_rewrites_a_c_function_pointer_on_the_cpu():
    """tests/attacks/c8_ctypes_clock through the real judge and sandbox: no Python object is replaced (the
    identity pins see nothing); the C-level pins name the clock whose function pointer it rewrote."""
    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate

    result = evaluate_candidate("softmax", (ATTACKS / "c8_ctypes_clock.py").read_text(),
                                EvalSettings(device="cpu", size="small", timeout_s=120))
    assert result.outcome == "static_reject", result.message
    assert "time.perf_counter rewritten at the C level" in result.message
