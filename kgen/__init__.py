"""kgen: search for GPU kernels faster than PyTorch."""

__version__ = "0.1.0"
