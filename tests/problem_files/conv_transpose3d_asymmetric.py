import torch
import torch.nn as nn

class Model(nn.Module):
    """
    A grouped 3D transposed convolution with an asymmetric kernel, stride, padding, output padding
    and dilation, then a scale and a clamp.
    """
    def __init__(self, in_channels: int, out_channels: int, kernel_size: tuple, stride: tuple, padding: tuple,
                 output_padding: tuple, dilation: tuple, groups: int, scale: float):
        super(Model, self).__init__()
        self.conv_transpose3d = nn.ConvTranspose3d(in_channels, out_channels, kernel_size, stride=stride,
                                                   padding=padding, output_padding=output_padding,
                                                   dilation=dilation, groups=groups)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(self.conv_transpose3d(x) * self.scale, min=-1.0, max=1.0)

# Test code
batch_size = 16
in_channels = 32
out_channels = 64
kernel_size = (3, 5, 7)  # asymmetric kernel
stride = (2, 1, 1)
padding = (1, 2, 3)
output_padding = (1, 0, 0)
dilation = (1, 1, 2)
groups = 4
scale = 0.5
depth = 16
height = 32
width = 64

def get_inputs():
    x = torch.rand(batch_size, in_channels, depth, height, width)
    return [x]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, padding, output_padding, dilation, groups, scale]
