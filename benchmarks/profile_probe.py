"""What CUPTI (through torch.profiler's Kineto trace) says about one kernel launch on this GPU: the
fields kgen's kernel profile reads (registers, shared memory, occupancy, grid, block). Prints JSON.

    python benchmarks/profile_probe.py [OUT.json]
"""
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_rows(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


x = torch.randn(4096, 4096, device="cuda")
y = torch.empty_like(x)
compiled = _softmax_rows[(4096,)](x, y, 4096, BLOCK=4096)
torch.cuda.synchronize()
started = time.perf_counter()
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    _softmax_rows[(4096,)](x, y, 4096, BLOCK=4096)
    torch.cuda.synchronize()
with tempfile.NamedTemporaryFile(suffix=".json") as f:
    prof.export_chrome_trace(f.name)
    trace = json.loads(Path(f.name).read_text())
kernels = [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]
out = {"profile_s": time.perf_counter() - started, "kernels": kernels,
       "triton": {k: getattr(compiled, k, None) for k in ("n_regs", "n_spills", "n_max_threads")},
       "triton_metadata": {k: v for k, v in vars(getattr(compiled, "metadata", object())).items()
                           if isinstance(v, (int, float, str, bool))} if hasattr(compiled, "metadata") else None}
text = json.dumps(out, indent=1, default=str)
print(text)
if len(sys.argv) > 1:
    Path(sys.argv[1]).write_text(text)
