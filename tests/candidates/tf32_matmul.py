"""Shortcut: a Triton matmul whose tiles are rounded to TF32 (10-bit mantissa, as TF32 tensor cores
round fp32 inputs) and accumulated in fp32: normwise error near 3e-4 where torch's own fp32 product
is near 1e-7, so it must stay `incorrect` at the default rtol, torch's own error notwithstanding."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def to_tf32(x):
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0xFFF + ((bits >> 13) & 1)) & -8192  # round to nearest even at bit 13
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def matmul_tf32(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK, BLOCK], tl.float32)
    for start in range(0, n, BLOCK):
        ks = start + tl.arange(0, BLOCK)
        a = tl.load(a_ptr + rows[:, None] * n + ks[None, :], mask=(rows[:, None] < n) & (ks[None, :] < n), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * n + cols[None, :], mask=(ks[:, None] < n) & (cols[None, :] < n), other=0.0)
        acc += tl.dot(to_tf32(a), to_tf32(b), input_precision="ieee")
    tl.store(c_ptr + rows[:, None] * n + cols[None, :], acc, mask=(rows[:, None] < n) & (cols[None, :] < n))


class ModelNew(nn.Module):
    def forward(self, A, B):
        A, B = A.contiguous(), B.contiguous()
        n = A.shape[0]
        C = torch.empty_like(A)
        matmul_tf32[(triton.cdiv(n, 32), triton.cdiv(n, 32))](A, B, C, n, BLOCK=32)
        return C
