import torch
import torch.nn as nn

class Model(nn.Module):
    """
    A standard 1D convolution, its sizes unpacked from one tuple under short names.
    """
    def __init__(self, c_in: int, c_out: int, k: int):
        super(Model, self).__init__()
        self.conv1d = nn.Conv1d(c_in, c_out, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv1d(x)

# Test code
b, c_in, c_out, k, l = 16, 32, 64, 63, 65536  # a long filter

def get_inputs():
    x = torch.rand(b, c_in, l)
    return [x]

def get_init_inputs():
    return [c_in, c_out, k]
