"""An honest Triton RMSNorm for KernelBench level 1 36_RMSNorm_ (x: batch x features x H x W, normalized over
the features at each position): benchmarks/watchdog_gpu.sh judges it at the full size (7.5 GB in, 7.5 GB out)
through kgen's real evaluation stages, to see the watchdog leave a working judge alone."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_kernel(x_ptr, out_ptr, n_features, n_positions, eps, BLOCK_F: tl.constexpr, BLOCK_P: tl.constexpr):
    # read features x BLOCK_P elements once; write as many
    batch = tl.program_id(1).to(tl.int64)
    positions = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    features = tl.arange(0, BLOCK_F)
    mask = (features[:, None] < n_features) & (positions[None, :] < n_positions)
    offsets = batch * n_features * n_positions + features[:, None].to(tl.int64) * n_positions + positions[None, :]
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    rms = tl.sqrt(tl.sum(x * x, axis=0) / n_features + eps)
    tl.store(out_ptr + offsets, x / rms[None, :], mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n_positions = x[0, 0].numel()
        block_p = 64
        grid = (triton.cdiv(n_positions, block_p), x.shape[0])
        rmsnorm_kernel[grid](x, out, self.num_features, n_positions, self.eps,
                             BLOCK_F=triton.next_power_of_2(self.num_features), BLOCK_P=block_p)
        return out
