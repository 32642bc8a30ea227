import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Conv2d (square kernel, padded), a per-channel bias, GroupNorm, ReLU and MaxPool2d.
    """
    def __init__(self, in_channels, out_channels, kernel_size, padding, num_groups, bias_shape, pool_kernel_size):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=padding)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.02)
        self.norm = nn.GroupNorm(num_groups, out_channels)
        self.pool = nn.MaxPool2d(kernel_size=pool_kernel_size)

    def forward(self, x):
        x = self.conv(x) + self.bias
        x = self.norm(x)
        return self.pool(torch.relu(x))

batch_size = 128
in_channels  = 16
out_channels = 64
height = width = 256
kernel_size = 3
padding = 1
num_groups = 8
bias_shape = (out_channels, 1, 1)
pool_kernel_size = 2
height, width = 96, 160

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, padding, num_groups, bias_shape, pool_kernel_size]
