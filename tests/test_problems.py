"""Problems load by name or path, at both sizes, and their rooflines match hand counts. The files
in problem_files/ are written in KernelBench's styles (sizes as expressions, chained and tuple
assignments, convolution and pooling parameters, norms, reductions, integer inputs, two outputs)."""

import re

import pytest
import torch

from kgen.core.errors import KgenError
from kgen.problems.problem import (
    SEMANTIC_NAME,
    auto_small_overrides,
    load_problem,
    problem_names,
    rewrite_constants,
    top_level_constants,
)
from kgen.problems.roofline import Ceilings, Roofline, compute_roofline, count_flops

from conftest import PROBLEM_FILES, run_kgen

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
    # default fp32 tolerance: plain TF32 fails it;
    # at fp32's tolerance: error-compensated splits, 3xTF32 or (faster here) 3xFP16 with power-of-two scales
    assert mm.floor_ms(h100) == pytest.approx(2 * 4096**3 / (700e9 / 3))
    assert mm.floor_ms(h100, rtol=1e-5) == pytest.approx(2 * 4096**3 / (700e9 / 3))
    no_half = Ceilings("x", 3e12, 52e12, "x", 0, tf32_flops_per_s=390e12)
    assert mm.floor_ms(no_half) == pytest.approx(2 * 4096**3 / (390e9 / 3))
    # a looser tolerance admits 16-bit tensor cores: the floor drops to their rate
    assert mm.floor_ms(h100, rtol=1e-2) == pytest.approx(2 * 4096**3 / 700e9)
    # a memory-bound problem keeps its bandwidth floor whatever the arithmetic
    assert compute_roofline(load_problem("softmax")).floor_ms(h100, rtol=1e-2) == pytest.approx(2 * 4096 * 65536 * 4 / 3e9)
    # a 16-bit problem: the 16-bit tensor-core rate
    half = Roofline(bytes_moved=1, flops=10**12, dtype="float16")
    assert half.floor_ms(h100) == pytest.approx(1e3 * 1e12 / 700e12)
    # when TF32 / 3 and 16-bit / 3 are below the FMA rate (a slow tensor-core part), the FMA rate stands
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


# ---- constants: how a file's sizes are found and rewritten ----

CONSTANTS_SOURCE = """\
import torch
N = 2048 * 2
M: int = 1024 + 3
dim = N // 4
height = width = 128
kernel_size = (3, 5)
depth, length = 8, 2 ** 5
a, b = divmod(N, 3)
bias_shape = (dim, 1)
flag = True
scale = 0.5
width = 96  # the last assignment is the one that counts
def get_inputs():
    local = 5
    return []
"""


def _constants(source):
    ns: dict = {}
    exec(source, ns)
    return top_level_constants(source, ns)


def test_constants_are_every_top_level_int_or_int_tuple_however_written():
    constants = _constants(CONSTANTS_SOURCE)
    assert {n: c.value for n, c in constants.items()} == {
        "N": 4096, "M": 1027, "dim": 1024, "height": 128, "width": 96, "kernel_size": (3, 5), "depth": 8,
        "length": 32, "a": 1365, "b": 1, "bias_shape": (1024, 1)}
    derived = {n for n, c in constants.items() if c.derived}
    # dim and bias_shape name other constants; a and b come from a call that is no literal tuple
    assert derived == {"dim", "bias_shape", "a", "b"}


def test_rewrite_sets_expressions_chained_and_unpacked_constants_and_derived_ones_follow():
    source = rewrite_constants(CONSTANTS_SOURCE, {"N": 64, "height": 16, "length": 4, "width": 24,
                                                  "kernel_size": (7, 7)})
    assert source.count("\n") == CONSTANTS_SOURCE.count("\n")  # line numbers never move
    assert "N = 64\n" in source  # a single target: its expression is replaced in place
    assert "height = width = 128; height = 16\n" in source  # chained: set after the statement
    constants = _constants(source)
    assert {n: constants[n].value for n in ("N", "dim", "height", "width", "length", "depth", "kernel_size",
                                            "bias_shape")} == {
        "N": 64, "dim": 16, "height": 16, "width": 24, "length": 4, "depth": 8, "kernel_size": (7, 7),
        "bias_shape": (16, 1)}


def test_rewrite_refuses_a_name_the_file_does_not_assign_at_the_top_level():
    with pytest.raises(KgenError, match="not top-level constants of the file: local"):
        rewrite_constants(CONSTANTS_SOURCE, {"local": 1})


@pytest.mark.parametrize("name,semantic", [
    ("kernel_size", True), ("pool_kernel_size", True), ("maxpool_kernel_size", True), ("pool_size", True),
    ("stride", True), ("stride_h", True), ("padding", True), ("output_padding", True), ("dilation", True),
    ("groups", True), ("num_groups", True), ("num_heads", True), ("n_head", True), ("scale_factor", True),
    ("reduce_dim", True), ("sum_dim", True), ("axis", True), ("num_layers", True),
    ("batch_size", False), ("dim", False), ("dim1", False), ("in_channels", False), ("out_features", False),
    ("hidden_size", False), ("head_dim", False), ("input_shape", False), ("seq_len", False), ("N", False),
])
def test_names_that_say_what_is_computed_never_shrink(name, semantic):
    assert bool(SEMANTIC_NAME.search(name)) is semantic


# ---- the small size of any KernelBench-style file ----

OWN_FILES = ["gemm_expression_sizes.py", "conv_chained_pool_groupnorm.py", "conv_transpose3d_asymmetric.py",
             "depthwise_conv_avgpool.py", "max_over_axis_indices.py", "cross_entropy_integer_targets.py",
             "elementwise_chain_tuple_shape.py", "layernorm_softmax_mean.py", "conv_bn_relu_block.py",
             "reduce_sum_dim.py", "elementwise_gelu_scale.py", "hinge_broadcast_targets.py",
             "conv1d_unpacked_short_names.py", "conv_functional_weight.py"]
WITH_SHAPE_ATTRS = {"conv1d_unpacked_short_names.py", "conv_chained_pool_groupnorm.py", "conv_transpose3d_asymmetric.py", "depthwise_conv_avgpool.py",
                    "max_over_axis_indices.py", "conv_bn_relu_block.py", "reduce_sum_dim.py"}
SHAPE_ATTRS = ("kernel_size", "stride", "padding", "dilation", "output_padding", "groups", "num_groups", "dim")


def _shape_attrs(problem):
    """What each submodule computes, as its constructor was told: kernel, stride, padding ... (the
    groups of a depthwise convolution as 'depthwise')."""
    with torch.device("meta"):
        model = problem.module.Model(*problem.init_inputs())
    found = {}
    for name, module in model.named_modules():
        for attr in SHAPE_ATTRS:
            if isinstance(getattr(module, attr, None), (int, tuple)):
                value = getattr(module, attr)
                depthwise = attr == "groups" and value > 1 and value == getattr(module, "in_channels", None)
                found[name, attr] = "depthwise" if depthwise else value
    return found


def _elements(problem, specs):
    return sum(torch.Size(s.shape).numel() for s in specs)


@pytest.mark.parametrize("fname", OWN_FILES)
def test_any_kernelbench_style_file_shrinks_without_changing_what_it_computes(fname):
    full = load_problem(str(PROBLEM_FILES / fname), "full")
    small = load_problem(str(PROBLEM_FILES / fname), "small")
    assert small.sized_by == "automatic" and small.overrides
    assert _shape_attrs(small) == _shape_attrs(full)  # kernels, strides, padding, groups, axes: kept
    assert bool(_shape_attrs(full)) == (fname in WITH_SHAPE_ATTRS)
    named = {n: c.value for n, c in full.constants.items() if c.semantic_by_name and not c.derived}
    assert {n: small.constants[n].value for n in named} == named  # kernel_size, stride ... by name: kept
    assert _elements(small, small.input_specs()) * 16 < _elements(full, full.input_specs())
    outs = small.make_model(0)(*small.make_inputs(3))
    outs = list(outs) if isinstance(outs, tuple) else [outs]
    assert [tuple(o.shape) for o in outs] == [s.shape for s in small.output_specs()]
    assert all(torch.isfinite(o.float()).all() for o in outs)


@pytest.mark.parametrize("fname", OWN_FILES)
def test_shrunk_as_far_as_it_goes_a_file_still_computes_the_same_thing(fname, tmp_path):
    """With no budget to stop it, every size-like constant is tried down to 2: kernels, strides,
    padding, groups and axes must still be untouched, whether their names or their effect say so."""
    full = load_problem(str(PROBLEM_FILES / fname), "full")
    tiny_file = tmp_path / fname
    tiny_file.write_text(rewrite_constants(full.source, auto_small_overrides(full, budget=0)))
    tiny = load_problem(str(tiny_file), "full")
    assert _shape_attrs(tiny) == _shape_attrs(full)
    named = {n: c.value for n, c in full.constants.items() if c.semantic_by_name and not c.derived}
    assert {n: tiny.constants[n].value for n in named} == named


def test_small_size_of_chained_and_reassigned_sizes():
    small = load_problem(str(PROBLEM_FILES / "conv_chained_pool_groupnorm.py"), "small")
    # `height = width = 256` then `height, width = 96, 160`: the last assignment is the size
    full_h, full_w = 96, 160
    (_, _, h, w), = [s.shape for s in small.input_specs()]
    assert (h, w) == (small.overrides["height"], small.overrides["width"]) and h < full_h and w < full_w
    assert small.module.bias_shape == (small.module.out_channels, 1, 1)  # derived: follows


def test_an_axis_named_like_a_size_keeps_its_value_because_it_reaches_a_reduction():
    full = load_problem(str(PROBLEM_FILES / "max_over_axis_indices.py"), "full")
    small = load_problem(str(PROBLEM_FILES / "max_over_axis_indices.py"), "small")
    assert "dim" not in small.overrides and small.module.dim == full.module.dim == 3
    assert [s.dtype for s in small.output_specs()] == ["float32", "int64"]


def test_a_kernel_seen_only_in_a_weight_shape_is_kept_by_its_name():
    """F.conv2d on a weight of its own: no operator argument holds the kernel size, only the name does."""
    small = load_problem(str(PROBLEM_FILES / "conv_functional_weight.py"), "small")
    assert small.module.kernel_size == 3 and small.make_model(0).weight.shape[2:] == (3, 3)


def test_sizes_unpacked_from_one_tuple_shrink_and_the_kernel_among_them_does_not():
    small = load_problem(str(PROBLEM_FILES / "conv1d_unpacked_short_names.py"), "small")
    assert small.module.k == 63 and "k" not in small.overrides and small.overrides["l"] < 65536


def test_an_axis_is_never_halved_even_where_that_would_shrink_the_output(tmp_path):
    path = tmp_path / "sum_axis.py"
    path.write_text("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n"
                    "    def __init__(self, dim):\n        super().__init__()\n        self.dim = dim\n\n"
                    "    def forward(self, x):\n        return torch.sum(x, dim=self.dim)\n\n"
                    "dim = 3\n\ndef get_inputs():\n    return [torch.rand(4, 4, 8, 2)]\n\n"
                    "def get_init_inputs():\n    return [dim]\n")
    # summing axis 2 (8 long) instead of 3 (2 long) would give a smaller output: still refused
    assert auto_small_overrides(load_problem(str(path)), budget=0) == {}


def test_a_size_written_as_a_tuple_shrinks_element_by_element():
    small = load_problem(str(PROBLEM_FILES / "elementwise_chain_tuple_shape.py"), "small")
    assert isinstance(small.overrides["input_shape"], tuple) and small.overrides["input_shape"][0] < 16384


def test_sizes_that_must_stay_equal_are_halved_together():
    small = load_problem(str(PROBLEM_FILES / "hinge_broadcast_targets.py"), "small")
    assert small.overrides["batch_size"] == small.overrides["input_shape"][0] < 16384
    assert torch.isfinite(small.make_model(0)(*small.make_inputs(1)))


def test_kgen_small_may_name_constants_written_as_expressions_or_chained():
    small = load_problem(str(PROBLEM_FILES / "small_declared_chained.py"), "small")
    assert small.sized_by == "KGEN_SMALL"
    assert [s.shape for s in small.input_specs()] == [(8, 2, 16, 24)]  # N // 64, N // 256, height, width
    assert small.module.kernel_size == 2


@pytest.mark.parametrize("declared,needle", [
    ('{"nope": 3}', "KGEN_SMALL names constants the file does not define at the top level: nope"),
    ('{"N": 2.5}', "KGEN_SMALL must be a dict of constant names to ints or tuples of ints"),
])
def test_bad_kgen_small_is_one_line(tmp_path, declared, needle):
    path = tmp_path / "p.py"
    path.write_text((PROBLEM_FILES / "small_declared_chained.py").read_text().replace(
        'KGEN_SMALL = {"N": 512, "height": 16, "width": 24}', f"KGEN_SMALL = {declared}"))
    with pytest.raises(KgenError, match=needle) as info:
        load_problem(str(path), "small")
    assert "\n" not in str(info.value)


# ---- FLOPs beyond matmul and convolution ----

@pytest.mark.parametrize("fname,flops", [
    # gelu, scale, clamp, tanh: 4 per element
    ("elementwise_chain_tuple_shape.py", 4 * 4096 * 16384),
    # layer norm with weight and bias 8, log-softmax 5 per element; the mean 1 per element it reads
    ("layernorm_softmax_mean.py", (8 + 5 + 1) * 64 * 1024 * 768),
    # max over an axis: 1 per element read
    ("max_over_axis_indices.py", 32 * 64 * 256 * 257),
    # log-softmax 5 per score; picking each target's score is data movement
    ("cross_entropy_integer_targets.py", 5 * 16384 * 1000),
    # depthwise 5x5 stride-2 convolution (2 per multiply-add), then a 3x3 average pool: 9 per output
    ("depthwise_conv_avgpool.py", (2 * 25 + 9) * 32 * 96 * 254 * 190),
    # 3x3 convolution over 16 channels; bias add 1, group norm 8, ReLU 1 per element; 2x2 max pool 4 per output
    ("conv_chained_pool_groupnorm.py", (2 * 16 * 9 + 1 + 8 + 1) * 128 * 64 * 96 * 160 + 4 * 128 * 64 * 48 * 80),
])
def test_flops_are_counted_for_elementwise_norm_softmax_pooling_and_reductions(fname, flops):
    problem = load_problem(str(PROBLEM_FILES / fname), "full")
    assert count_flops(problem) == flops == compute_roofline(problem).flops


def test_counted_flops_match_the_bundled_problems_declared_hand_counts():
    for name in ("softmax", "layernorm"):  # they declare KGEN_FLOPS, which still wins when present
        problem = load_problem(name)
        assert count_flops(problem) == problem.module.KGEN_FLOPS
    assert count_flops(load_problem("conv_relu_maxpool")) == (2 * (100 * 55 * 55) * 96 * (3 * 11 * 11)
                                                               + 100 * 96 * 55 * 55 + 9 * 100 * 96 * 27 * 27)


def test_kgen_flops_overrides_the_count(tmp_path):
    path = tmp_path / "declared.py"
    path.write_text((PROBLEM_FILES / "elementwise_gelu_scale.py").read_text() + "\nKGEN_FLOPS = 12345\n")
    problem = load_problem(str(path))
    assert compute_roofline(problem).flops == 12345 and count_flops(problem) == 2 * 4096 * 16384


# ---- kgen problems FILE ...: what a user sees before a search ----

LONG_NAME = "75_conv_transposed_2D_asymmetric_input_asymmetric_kernel_strided__grouped____padded____dilated__"


def _long_named_copy(tmp_path):
    path = tmp_path / f"{LONG_NAME}.py"
    path.write_text((PROBLEM_FILES / "conv_transpose3d_asymmetric.py").read_text())
    return path


def test_problems_shows_a_files_full_and_small_sizes_flops_and_bytes_one_plain_line_each_when_piped(tmp_path):
    path = _long_named_copy(tmp_path)
    result = run_kgen("problems", str(PROBLEM_FILES / "layernorm_softmax_mean.py"), str(path))
    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    assert header.split()[:3] == ["problem", "size", "dtype"] and "FLOPs" in header and "bytes" in header
    assert [line.split()[:2] for line in lines] == [
        ["layernorm_softmax_mean", "full"], ["layernorm_softmax_mean", "small"], [LONG_NAME, "full"], [LONG_NAME, "small"]]
    full, small = lines[0], lines[1]
    assert "64×1024×768 → 64×768" in full and "704.64 M" in full  # FLOPs: norm + log-softmax + mean: not 0
    assert "201.53 MB" in full  # (64×1024×768 in + 2×768 weight and bias + 64×768 out) × 4
    assert "automatic: " in small and "seq_len 1024→" in small and "hidden 768→" in small
    changes = lines[3].split("automatic: ")[1]
    assert "in_channels 32→" in changes and not any(p in changes for p in ("kernel", "stride", "padding", "groups"))


def test_problems_size_option_and_the_bundled_listing(tmp_path):
    result = run_kgen("problems", "softmax", "--size", "small")
    assert result.returncode == 0, result.stderr
    assert [re.split(r"\s{2,}", line.strip()) for line in result.stdout.splitlines()] == [
        ["problem", "size", "dtype", "inputs → outputs", "FLOPs", "bytes", "floor", "sized by"],
        ["softmax", "small", "float32", "64×1000 → 64×1000", "320.00 k", "512.00 kB", "no GPU",
         "KGEN_SMALL: batch_size 4096→64, dim 65536→1000"]]
    bundled = run_kgen("problems", "--size", "full").stdout.splitlines()[1:]
    assert [line.split()[0] for line in bundled] == ["conv2d", "conv_relu_maxpool", "layernorm", "matmul", "softmax"]


def test_problems_lists_the_good_files_and_one_line_per_bad_one_and_exits_2(tmp_path):
    result = run_kgen("problems", str(PROBLEM_FILES / "reduce_sum_dim.py"), str(tmp_path / "missing.py"),
                      str(PROBLEM_FILES / "no_model.py"))
    assert result.returncode == 2
    assert [line.split()[:2] for line in result.stdout.splitlines()[1:]] == [["reduce_sum_dim", "full"],
                                                                             ["reduce_sum_dim", "small"]]
    assert result.stderr.splitlines() == [f"kgen: error: problem file not found: {tmp_path / 'missing.py'}",
                                          f"kgen: error: {PROBLEM_FILES / 'no_model.py'}: not a KernelBench-format "
                                          "problem: it defines no 'Model'"]


def _run_in_terminal(args: list[str], columns: int) -> str:
    """The real CLI with a pseudo-terminal of `columns` columns as its stdout."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = dict(os.environ, COLUMNS=str(columns), TERM="xterm")
    proc = subprocess.Popen([sys.executable, "-m", "kgen", *args], stdout=follower, stderr=subprocess.PIPE, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the command is done
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=300)
    os.close(leader)
    assert proc.returncode == 0, proc.stderr.read()
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_problems_in_a_100_column_terminal_fits_and_shows_every_name_whole(tmp_path):
    path = _long_named_copy(tmp_path)
    lines = _run_in_terminal(["problems", "matmul", str(path)], columns=100).splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "matmul" in lines and LONG_NAME in lines  # each name on a line of its own, whole
    assert any("4096×4096, 4096×4096 → 4096×4096" in line and "137.44 G" in line for line in lines)
    assert any("KGEN_SMALL: N 4096→96" in line for line in lines)


def test_cached_ceilings_from_the_old_measure_are_measured_again(tmp_path, monkeypatch):
    """Ceilings cached by the median of reps not queued ahead (a host stall inside an event pair: 1.3 TB/s for
    the H100's 3.0, a roofline of 175%) are not read back; those of the current method are. The GPU is stood
    in for (torch.cuda's answers), the cache file is real."""
    import json

    from kgen.problems import roofline

    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Stand-in GPU")
    entry = {"device": "Stand-in GPU", "bandwidth_bytes_per_s": 1.3e12, "fp32_flops_per_s": 5e13,
             "torch_version": torch.__version__, "measured_at": 0.0, "tf32_flops_per_s": 4e14,
             "half_flops_per_s": 8e14}
    key = f"Stand-in GPU|{torch.__version__}"
    (tmp_path / "ceilings.json").write_text(json.dumps({key: entry}))
    assert roofline.device_ceilings(measure=False) is None  # old method: would be measured again
    (tmp_path / "ceilings.json").write_text(json.dumps({key: {**entry, "method": roofline.CEILINGS_METHOD}}))
    read = roofline.device_ceilings(measure=False)
    assert read is not None and read.bandwidth_bytes_per_s == 1.3e12
