import torch
import torch.nn as nn


class Model(nn.Module):
    """A GEMM whose sizes are written as expressions, then a bias and a LeakyReLU."""

    def __init__(self, in_features, out_features, negative_slope):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.negative_slope = negative_slope

    def forward(self, x):
        return torch.nn.functional.leaky_relu(self.linear(x), self.negative_slope)


batch_size = 1024 * 2
in_features = 4096 + 3  # not a power of two
out_features: int = in_features // 2
negative_slope = 0.05


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, negative_slope]
