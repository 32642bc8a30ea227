"""What a runner's start and the judge's first trace import (issue 26): torch._dynamo (and torch._inductor) are
seconds of imports that neither the op trace nor the kernel audit's profiler needs. Each check runs in a fresh
interpreter, since this test process may have imported them already."""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

PROBLEM_FILES = Path(__file__).resolve().parent / "problem_files"


def _fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_the_op_trace_records_without_importing_dynamo():
    out = _fresh("""
import sys, torch
from kgen.harness.trace import OpTrace
with OpTrace() as trace:
    torch.randn(8, 8).matmul(torch.randn(8, 8)).softmax(1)
print(sorted(trace.work), 'torch._dynamo' in sys.modules)
""")
    assert out == "['_softmax', 'mm'] False"


def test_the_runners_start_up_imports_no_compiler():
    """kgen.harness.runner._start_up, as a spare runs it before its job: torch, triton, kgen's harness,
    cpp_extension and the op trace's first use, without torch._dynamo or torch._inductor."""
    out = _fresh("""
import os, sys
os.environ["KGEN_RUNNER_KIND"] = "run"
from kgen.harness.runner import _start_up
seconds = _start_up()
print(seconds["import_s"] > 0, 'torch._dynamo' in sys.modules, 'torch._inductor' in sys.modules)
""")
    assert out == "True False False"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_audits_profiler_sees_device_kernels_without_importing_inductor():
    out = _fresh("""
import sys, torch
from kgen.harness.runner import _warm_profiler, device_profile
x = torch.randn(1 << 16, device="cuda")
_warm_profiler(x)
with device_profile() as prof:
    x.mul_(2)
    torch.cuda.synchronize()
kernels = [e.key for e in prof.key_averages() if (getattr(e, "self_device_time_total", 0) or 0) > 0]
print(bool(kernels), 'torch._inductor' in sys.modules, 'torch._dynamo' in sys.modules)
""")
    assert out == "True False False"


def test_the_roofline_and_the_automatic_small_size_record_without_importing_dynamo():
    """kgen's own dispatch modes over a reference on the meta device (the FLOP counter, the semantic recorder
    of the automatic small size): `kgen eval` works out the roofline after its judge."""
    out = _fresh(f"""
import sys
from kgen.problems.problem import load_problem
from kgen.problems.roofline import compute_roofline
small = load_problem("{PROBLEM_FILES / 'depthwise_conv_avgpool.py'}", "small")
roof = compute_roofline(load_problem("softmax", "full"))
print(small.sized_by, roof.flops > 0, 'torch._dynamo' in sys.modules)
""")
    assert out == "automatic True False"
