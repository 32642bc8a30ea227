"""Problems load by name or path, at both sizes, and their rooflines match hand counts."""

import pytest
import torch

from kgen.errors import KgenError
from kgen.problems import load_problem, problem_names, rewrite_constants
from kgen.roofline import Ceilings, Roofline, compute_roofline

from conftest import PROBLEM_FILES

FIVE = ["conv2d", "conv_relu_maxpool", "layernorm", "matmul", "softmax"]


def test_the_five_problems_are_bundled():
    assert problem_names() == FIVE


@pytest.mark.parametrize("name", FIVE)
def test_reference_runs_at_small_size(name):
    problem = load_problem(name, "small")
    model = problem.make_model(seed=0)
    out = model(*problem.make_inputs(seed=1))
    assert torch.isfinite(out).all()
    assert [tuple(out.shape)] == [s.shape for s in problem.output_specs()]
    assert out.numel() * 4 < 4 << 20  # small really is small


def test_full_sizes_are_the_published_ones():
    assert [s.shape for s in load_problem("softmax").input_specs()] == [(4096, 65536)]
    assert [s.shape for s in load_problem("layernorm").input_specs()] == [(16, 64, 256, 256)]
    assert [s.shape for s in load_problem("matmul").input_specs()] == [(4096, 4096), (4096, 4096)]
    assert [s.shape for s in load_problem("conv2d").input_specs()] == [(100, 3, 224, 224)]
    assert [s.shape for s in load_problem("conv2d").output_specs()] == [(100, 96, 55, 55)]
    assert [s.shape for s in load_problem("conv_relu_maxpool").output_specs()] == [(100, 96, 27, 27)]


def test_roofline_bytes_and_flops_match_hand_counts():
    assert compute_roofline(load_problem("softmax")).bytes_moved == 2 * 4096 * 65536 * 4
    ln = 16 * 64 * 256 * 256
    assert compute_roofline(load_problem("layernorm")).bytes_moved == (2 * ln + 2 * 64 * 256 * 256) * 4
    mm = compute_roofline(load_problem("matmul"))
    assert (mm.bytes_moved, mm.flops) == (3 * 4096 * 4096 * 4, 2 * 4096**3)
    conv = compute_roofline(load_problem("conv2d"))
    conv_in, conv_w, conv_out = 100 * 3 * 224 * 224, 96 * 3 * 11 * 11 + 96, 100 * 96 * 55 * 55
    assert conv.bytes_moved == (conv_in + conv_w + conv_out) * 4
    assert conv.flops == 2 * (100 * 55 * 55) * 96 * (3 * 11 * 11)
    crm = compute_roofline(load_problem("conv_relu_maxpool"))
    assert crm.bytes_moved == (conv_in + conv_w + 100 * 96 * 27 * 27) * 4  # the conv output never travels


def test_floor_time_takes_the_larger_of_memory_and_compute():
    h100 = Ceilings(device="H100", bandwidth_bytes_per_s=3.0e12, fp32_flops_per_s=52e12, torch_version="x",
                    measured_at=0)
    assert compute_roofline(load_problem("softmax")).floor_ms(h100) == pytest.approx(2 * 4096 * 65536 * 4 / 3e9)
    assert compute_roofline(load_problem("matmul")).floor_ms(h100) == pytest.approx(2 * 4096**3 / 52e9)
    assert compute_roofline(load_problem("softmax")).floor_ms(None) is None


def test_compute_floor_is_the_fastest_arithmetic_that_can_pass_the_check():
    h100 = Ceilings(device="H100", bandwidth_bytes_per_s=3.0e12, fp32_flops_per_s=52e12, torch_version="x",
                    measured_at=0, tf32_flops_per_s=390e12, half_flops_per_s=700e12)
    mm = compute_roofline(load_problem("matmul"))
    assert mm.dtype == "float32"
    # default fp32 tolerance: plain TF32 fails it, 3xTF32 passes, so a kernel may reach TF32 / 3
    assert mm.floor_ms(h100) == pytest.approx(2 * 4096**3 / (390e9 / 3))
    assert mm.floor_ms(h100, rtol=1e-5) == pytest.approx(2 * 4096**3 / (390e9 / 3))
    # a looser tolerance admits 16-bit tensor cores: the floor drops to their rate
    assert mm.floor_ms(h100, rtol=1e-2) == pytest.approx(2 * 4096**3 / 700e9)
    # a memory-bound problem keeps its bandwidth floor whatever the arithmetic
    assert compute_roofline(load_problem("softmax")).floor_ms(h100, rtol=1e-2) == pytest.approx(2 * 4096 * 65536 * 4 / 3e9)
    # a 16-bit problem: the 16-bit tensor-core rate
    half = Roofline(bytes_moved=1, flops=10**12, dtype="float16")
    assert half.floor_ms(h100) == pytest.approx(1e3 * 1e12 / 700e12)
    # when TF32 / 3 is below the FMA rate (a slow tensor-core part), the FMA rate stands
    slow = Ceilings("x", 3e12, 52e12, "x", 0, tf32_flops_per_s=60e12, half_flops_per_s=120e12)
    assert mm.floor_ms(slow) == pytest.approx(2 * 4096**3 / 52e9)


@pytest.mark.parametrize("fname", ["elementwise_gelu_scale.py", "reduce_sum_dim.py", "conv_bn_relu_block.py"])
def test_kernelbench_file_from_a_path_is_shrunk_and_runs(fname):
    full = load_problem(str(PROBLEM_FILES / fname), "full")
    small = load_problem(str(PROBLEM_FILES / fname), "small")
    assert small.overrides, "a file without KGEN_SMALL is shrunk automatically"
    full_elems = sum(torch.Size(s.shape).numel() for s in full.input_specs())
    small_elems = sum(torch.Size(s.shape).numel() for s in small.input_specs())
    assert small_elems * 16 < full_elems
    out = small.make_model(0)(*small.make_inputs(3))
    assert tuple(out.shape) == small.output_specs()[0].shape
    assert torch.isfinite(out).all()


def test_rewritten_constants_flow_into_derived_ones():
    src = "a = 100\nb = a * 2  # derived\n"
    ns: dict = {}
    exec(rewrite_constants(src, {"a": 3}), ns)
    assert (ns["a"], ns["b"]) == (3, 6)


def test_inputs_are_fresh_per_seed_and_never_zeros(tmp_path):
    zeros = tmp_path / "zeros.py"
    zeros.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n"
                     "        return x * 2\nn = 64\ndef get_inputs():\n    return [torch.zeros(n, n)]\n"
                     "def get_init_inputs():\n    return []\n")
    p = load_problem(str(zeros), "small")
    a, b = p.make_inputs(1)[0], p.make_inputs(2)[0]
    assert a.abs().sum() > 0 and not torch.equal(a, b)
    sm = load_problem("softmax", "small")
    assert not torch.equal(sm.make_inputs(1)[0], sm.make_inputs(2)[0])
    assert torch.equal(sm.make_inputs(5)[0], sm.make_inputs(5)[0])


def test_constant_parameters_are_randomized():
    model = load_problem("layernorm", "small").make_model(0)
    assert model.ln.weight.std() > 0.01 and model.ln.bias.abs().max() > 0.01


@pytest.mark.parametrize("problem,needle", [
    ("no_such_problem", "unknown problem"),
    ("/nonexistent/file.py", "not found"),
    (str(PROBLEM_FILES / "no_model.py"), "defines no 'Model'"),
])
def test_bad_problems_raise_one_line_errors(problem, needle):
    with pytest.raises(KgenError, match=needle) as info:
        load_problem(problem)
    assert "\n" not in str(info.value)
