"""LayerNorm over the last three dims of a 16x64x256x256 fp32 tensor (the published LayerNorm size)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 16
features = 64
dim1 = 256
dim2 = 256

KGEN_SMALL = {"batch_size": 4, "features": 8, "dim1": 16, "dim2": 24}
# kgen: mean, variance, normalize, scale and shift: about 8 FLOPs per element.
KGEN_FLOPS = 8 * batch_size * features * dim1 * dim2


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [(features, dim1, dim2)]
