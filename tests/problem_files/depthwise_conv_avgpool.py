import torch
import torch.nn as nn

class Model(nn.Module):
    """
    A depthwise 2D convolution (groups = channels, stride 2) followed by a 3x3 average pool.
    """
    def __init__(self, channels: int, kernel_size: int, stride: int, groups: int):
        super(Model, self).__init__()
        self.conv2d = nn.Conv2d(channels, channels, kernel_size, stride=stride, groups=groups, bias=False)
        self.pool = nn.AvgPool2d(3, stride=1, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.conv2d(x))

# Test code
batch_size = 32
channels = 96
kernel_size = 5
stride = 2
groups = channels
height = 512
width = 384

def get_inputs():
    x = torch.rand(batch_size, channels, height, width)
    return [x]

def get_init_inputs():
    return [channels, kernel_size, stride, groups]
