import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    """
    A convolution written with F.conv2d on a weight of its own (no padding), then Mish.
    """
    def __init__(self, in_channels, out_channels, kernel_size):
        super(Model, self).__init__()
        self.weight = nn.Parameter(torch.randn(out_channels, in_channels, kernel_size, kernel_size) * 0.05)

    def forward(self, x):
        return F.mish(F.conv2d(x, self.weight))

batch_size = 64
in_channels = 64
out_channels = 128
height = width = 128
kernel_size = 3

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
