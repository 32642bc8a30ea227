import torch
import torch.nn as nn

class Model(nn.Module):
    """
    Simple model that performs a Softmax activation (the bundled softmax's Model, written the way
    KernelBench writes it: docstrings, super(Model, self), another size).
    """
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Applies Softmax activation to the input tensor.
        """
        return torch.softmax(x, dim=1)

batch_size = 4096
dim = 8192 * 48

def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]

def get_init_inputs():
    return []  # No special initialization inputs needed
