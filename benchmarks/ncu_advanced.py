"""Run one forward of a starter at full size (for ncu):  python benchmarks/ncu_advanced.py <file> [NAME=VAL ...]"""
import importlib.util
import re
import sys

import torch

path = sys.argv[1]
spec = importlib.util.spec_from_file_location("m", path)
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
for kv in sys.argv[2:]:
    k, v = kv.split("=")
    m.CUDA_SRC = re.sub(rf"(#define\s+{k}\s+)-?\d+", rf"\g<1>{v}", m.CUDA_SRC)
if "layernorm" in path:
    model = m.ModelNew((64, 256, 256)).cuda()
    x = torch.randn(16, 64, 256, 256, device="cuda")
else:
    model = m.ModelNew().cuda()
    x = torch.randn(4096, 65536, device="cuda")
with torch.no_grad():
    for _ in range(3):
        y = model(x)
torch.cuda.synchronize()
print("done", y.shape)
