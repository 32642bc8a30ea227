import torch
import torch.nn as nn

class Model(nn.Module):
    """
    GELU, a scale, a clamp and tanh, elementwise over a tensor whose trailing shape is a tuple.
    """
    def __init__(self, scale: float):
        super(Model, self).__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nn.functional.gelu(x)
        x = x * self.scale
        x = torch.clamp(x, min=-2.0, max=2.0)
        return torch.tanh(x)

batch_size = 4096
input_shape = (16384,)
scale = 1.5

def get_inputs():
    return [torch.rand(batch_size, *input_shape)]

def get_init_inputs():
    return [scale]
