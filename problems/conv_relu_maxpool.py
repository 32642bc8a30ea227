"""Conv2d(3, 96, 11, stride 4, padding 2), ReLU, MaxPool2d(3, stride 2) on a 100x3x224x224 fp32 batch."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int, padding: int,
                 pool_kernel: int, pool_stride: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=kernel_size, stride=stride, padding=padding)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=pool_kernel, stride=pool_stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.relu(self.conv(x)))


batch_size = 100
in_channels = 3
out_channels = 96
kernel_size = 11
stride = 4
padding = 2
pool_kernel = 3
pool_stride = 2
height = 224
width = 224

KGEN_SMALL = {"batch_size": 2, "out_channels": 16, "height": 43, "width": 47}


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, pool_kernel, pool_stride]
