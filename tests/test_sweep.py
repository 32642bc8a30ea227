"""benchmarks/sweep.py, the starter authors' tunable sweep: on this CPU box it runs the small size under
Triton's interpreter (its GPU timing cannot run here), and its verdicts must come from a real comparison
with the float64 reference."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# a Triton softmax whose SCALE tunable breaks it: SCALE = 1 is right, SCALE = 2 doubles every output
SCALED_SOFTMAX = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

SCALE = 1
BLOCK = 64
KGEN_TUNABLE = {"SCALE": [1, 2], "BLOCK": [64, 128]}


@triton.jit
def _softmax(x_ptr, y_ptr, n_cols, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf")))
    mx = tl.max(m, 0)
    s = tl.zeros([BLOCK], tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
        s += tl.exp(x - mx)
    total = tl.sum(s, 0)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
        tl.store(y_ptr + row * n_cols + cols, SCALE * tl.exp(x - mx) / total, mask=cols < n_cols)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax[(x.shape[0],)](x, y, x.shape[1], SCALE=SCALE, BLOCK=BLOCK)
        return y
'''


def run_sweep(*args, cwd):
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "sweep.py"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_sweep_checks_every_combination_against_float64(tmp_path):
    starter = tmp_path / "scaled_softmax.py"
    starter.write_text(SCALED_SOFTMAX)
    out = tmp_path / "rows.json"
    proc = run_sweep("softmax", str(starter), "--grid", "SCALE=1,2", "--grid", "BLOCK=64,128", "--json", str(out),
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["setting"] for r in rows] == [{"SCALE": 1, "BLOCK": 64}, {"SCALE": 1, "BLOCK": 128},
                                            {"SCALE": 2, "BLOCK": 64}, {"SCALE": 2, "BLOCK": 128}]
    for row in rows:
        if row["setting"]["SCALE"] == 1:
            assert row["ok"] and row["err"] < 1e-6
        else:
            assert not row["ok"] and abs(row["err"] - 1.0) < 1e-6  # twice the answer: normwise error 1
    assert "best: {'SCALE': 1" in proc.stdout


def test_sweep_names_a_tunable_the_starter_does_not_have(tmp_path):
    proc = run_sweep("matmul", "triton_3xtf32_presplit.py", "--grid", "NOT_A_TUNABLE=1", cwd=tmp_path)
    assert proc.returncode != 0
    assert "NOT_A_TUNABLE is not a tunable" in proc.stderr and "Traceback" not in proc.stderr
