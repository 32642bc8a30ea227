"""A KernelBench-format BatchNorm problem whose batch statistics are far from its running ones (mean 0, var 1):
its output in eval mode (running statistics) and in training mode (batch statistics) differ everywhere, so a
candidate written for the wrong mode fails; and a dropout layer, which the judge switches off (a mask drawn
in float32 and in float64 differs) (tests/test_prompt_facts.py)."""
import torch
import torch.nn as nn

batch_size = 64
features = 16


class Model(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.bn = nn.BatchNorm1d(num_features)
        self.dropout = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.bn(x))


def get_inputs():
    return [torch.randn(batch_size, features) * 3.0 + 2.0]


def get_init_inputs():
    return [features]
