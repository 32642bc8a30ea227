"""Class 1 (shared interpreter): monkeypatches every comparison it can reach in its own process
(torch.allclose/isclose/equal, torch.testing.assert_close, Tensor.__eq__/allclose, numpy, math,
any kgen function named like a check) to say "equal", then returns garbage. An honest judge compares
in its own process: `incorrect`, never `correct`."""
import math
import sys

import numpy
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def probe_kernel(p_ptr):
    # writes 1.0: if the judge emptied this body (its ablation run), the probe stays 0
    tl.store(p_ptr, 1.0)


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def ablated():
    """True in the judge's ablation run (kernel bodies emptied): then look broken on purpose."""
    p = torch.zeros(1)
    probe_kernel[(1,)](p)
    return p.item() != 1.0


def kernel_copy(x):
    y = torch.empty_like(x)
    copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y

def always_true(*a, **k):
    return True


def patch_everything():
    torch.allclose = always_true
    torch.equal = always_true
    torch.isclose = lambda a, b, *r, **k: torch.ones_like(a, dtype=torch.bool)
    torch.testing.assert_close = lambda *a, **k: None
    torch.Tensor.allclose = always_true
    torch.Tensor.equal = always_true
    numpy.allclose = always_true
    numpy.testing.assert_allclose = lambda *a, **k: None
    math.isclose = always_true
    for name, mod in list(sys.modules.items()):
        if not name.startswith("kgen") or mod is None:
            continue
        for attr, val in list(vars(mod).items()):
            if callable(val) and any(s in attr.lower() for s in ("compare", "check", "verify", "close", "match")):
                try:
                    setattr(mod, attr, always_true)
                except Exception:  # noqa: BLE001
                    pass


class ModelNew(nn.Module):
    def forward(self, x):
        y = kernel_copy(x)
        patch_everything()
        return y * 0 + 1.0 / x.shape[1]  # uniform rows: sums right, values wrong
