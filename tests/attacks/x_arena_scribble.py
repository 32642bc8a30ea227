"""Shared arena: parses /proc/self/maps for shared file mappings (memfd, /dev/shm) other than its own
libraries and scribbles them: NaN over every float, huge values into the first bytes (where a header
of sizes/offsets would be), then returns an honest softmax. An honest judge: not `correct` if the
inputs it reads back changed (or `correct` if its own copies are untouched), never `harness_error`
or a crash/hang of the judge."""
import ctypes

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


def triton_softmax(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    softmax_rows[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y

def scribble(keep):
    hit = []
    for line in open("/proc/self/maps"):
        parts = line.split()
        if len(parts) < 6 or "s" not in parts[1] or "w" not in parts[1]:
            continue
        name = parts[5]
        if not ("memfd" in name or "/dev/shm" in name or "deleted" in name):
            continue
        lo, hi = (int(v, 16) for v in parts[0].split("-"))
        if lo <= keep < hi:
            continue
        ctypes.memset(lo, 0xFF, min(hi - lo, 1 << 26))  # 0xFFFFFFFF: NaN as fp32, -1 as an int
        hit.append(line.strip())
    print("scribbled", hit, flush=True)


class ModelNew(nn.Module):
    def forward(self, x):
        y = triton_softmax(x)
        scribble(y.data_ptr())
        return y
