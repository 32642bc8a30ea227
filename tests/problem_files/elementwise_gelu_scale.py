import torch
import torch.nn as nn


class Model(nn.Module):
    """GELU then scale: an elementwise op."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.nn.functional.gelu(x) * self.scale


batch_size = 4096
dim = 16384
scale = 2.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [scale]
