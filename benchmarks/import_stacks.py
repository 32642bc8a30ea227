"""Which code first imports the heavy parts of torch (torch._dynamo, torch._inductor, sympy, torch._decomp, ...)
during a `kgen eval` (issue 26: seconds of imports on the H100 box that none of the judge's work needs).

    [KGEN_CPROFILE=FILE] python3 benchmarks/import_stacks.py PROBLEM CANDIDATE [kgen eval options...]

Prints, on stderr, each watched module's first import with the time since start, the thread, and the stack;
with KGEN_CPROFILE, the main thread's functions by cumulative seconds into FILE (the 60 first).
"""
import atexit
import cProfile
import os
import pstats
import runpy
import sys
import threading
import time
import traceback

WATCHED = ("torch._dynamo", "torch._inductor", "sympy", "torch._decomp", "torch.fx.experimental.symbolic_shapes",
           "torch._subclasses.fake_tensor", "torch._prims", "torch._functorch", "torch.export", "torch.onnx")
STARTED = time.perf_counter()


SEEN: set = set()


class Watch:

    def find_spec(self, name, path=None, target=None):
        if name in WATCHED and name not in SEEN and name not in sys.modules and "importlib.util" not in \
                "".join(f.filename for f in traceback.extract_stack()[-4:]):
            SEEN.add(name)
            print(f"=== {time.perf_counter() - STARTED:.2f} s: import {name} in {threading.current_thread().name}",
                  file=sys.stderr)
            stack = [f for f in traceback.extract_stack()[:-1] if "importlib" not in f.filename]
            for frame in stack[-14:]:
                print(f"    {frame.filename}:{frame.lineno} {frame.name}", file=sys.stderr)
        return None


sys.meta_path.insert(0, Watch())
sys.argv = ["kgen", "eval", *sys.argv[1:]]
profile_to = os.environ.get("KGEN_CPROFILE")
if profile_to:
    profiler = cProfile.Profile()

    def write_profile() -> None:  # at exit: `kgen eval` ends with os._exit after the atexit handlers
        profiler.disable()
        with open(profile_to, "w") as f:
            pstats.Stats(profiler, stream=f).sort_stats("cumulative").print_stats(60)

    atexit.register(write_profile)
    profiler.enable()
runpy.run_module("kgen", run_name="__main__")
