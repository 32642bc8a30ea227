"""A kgen problem whose KGEN_SMALL names constants written as an expression and in a chained assignment."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size)

    def forward(self, x):
        return self.pool(torch.relu(x))


N = 2048 * 2
height = width = 512
kernel_size = 2
channels = N // 256

KGEN_SMALL = {"N": 512, "height": 16, "width": 24}


def get_inputs():
    return [torch.randn(N // 64, channels, height, width)]


def get_init_inputs():
    return [kernel_size]
