import torch
import torch.nn as nn

class Model(nn.Module):
    """
    Max over one axis, returning the values and their indices (two outputs, one of them integer).
    """
    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor):
        values, indices = torch.max(x, dim=self.dim)
        return values, indices

batch_size = 32
channels = 64
dim1 = 257
dim2 = 256
dim = 3  # the axis reduced: the last one

def get_inputs():
    x = torch.rand(batch_size, channels, dim1, dim2)
    return [x]

def get_init_inputs():
    return [dim]
