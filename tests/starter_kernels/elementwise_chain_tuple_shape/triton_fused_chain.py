"""GELU, scale, clamp and tanh fused in one Triton pass (a starter kept apart from its problem file,
for `kgen search --starters DIR`)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_SIZE = 1024
NUM_WARPS = 4


@triton.jit
def _gelu_scale_clamp_tanh_kernel(x_ptr, y_ptr, n_elements, scale, BLOCK_SIZE: tl.constexpr):
    # read n elements; write n
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    gelu = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    z = tl.minimum(tl.maximum(gelu * scale, -2.0), 2.0)
    y = 1.0 - 2.0 / (tl.exp(2.0 * z) + 1.0)  # tanh(z), no overflow for |z| <= 2
    tl.store(y_ptr + offsets, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n_elements = x.numel()
        grid = (triton.cdiv(n_elements, BLOCK_SIZE),)
        _gelu_scale_clamp_tanh_kernel[grid](x, y, n_elements, self.scale, BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS)
        return y
