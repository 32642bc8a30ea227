"""KernelBench files beyond the sizes: files written for a GPU (inputs placed on `cuda` by the file
itself) load and run on a CPU, a reference that cannot run on the meta device is one line and exit 2,
and benchmarks/kernelbench_sweep.py reports per file what the hidden corpus checks look at. The files in
problem_files/ are written in KernelBench's styles, not copied from it."""

import json
import subprocess
import sys

import pytest
import torch

from kgen.core.errors import KgenError
from kgen.problems.problem import load_problem
from kgen.problems.roofline import compute_roofline

from conftest import PROBLEM_FILES, REPO, run_kgen

CUDA_PLACED = PROBLEM_FILES / "attention_cuda_half_inputs.py"
DATA_DEPENDENT = PROBLEM_FILES / "data_dependent_scale.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a machine without CUDA makes of a GPU-placed file")
def test_a_file_that_places_its_tensors_on_cuda_loads_and_runs_on_the_cpu():
    """device='cuda', .cuda() and .to('cuda', half) in get_inputs, .cuda() in the constructor: without
    the device pin, torch raises 'Torch not compiled with CUDA enabled' (an internal error in kgen)."""
    full = load_problem(str(CUDA_PLACED), "full")
    assert [(s.shape, s.dtype) for s in full.input_specs()] == [((16, 16, 512, 512), "float16")] * 3
    assert compute_roofline(full).bytes_moved == (4 * 16 * 16 * 512 * 512 + 512) * 2
    small = load_problem(str(CUDA_PLACED), "small")
    model, inputs = small.make_model(seed=0), small.make_inputs(seed=1)
    assert all(x.device.type == "cpu" and x.dtype == torch.float16 for x in inputs)
    assert model.bias.device.type == "cpu"
    out = model(*inputs)
    assert out.device.type == "cpu" and bool(torch.isfinite(out).all())
    assert [tuple(out.shape)] == [s.shape for s in small.output_specs()]
    assert sum(x.numel() for x in inputs) < 1 << 17  # the small size shrank the attention's sizes


def test_the_cli_shows_a_cuda_placed_file_at_both_sizes():
    result = run_kgen("problems", str(CUDA_PLACED))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()[1:]  # under the table's header
    assert [line.split()[:3] for line in lines] == [["attention_cuda_half_inputs", size, "float16"]
                                                    for size in ("full", "small")]


@pytest.mark.parametrize("args", [("problems", "{file}", "--size", "full"), ("problems", "{file}"),
                                  ("search", "--problem", "{file}", "--rounds", "1", "--db", "r.db")])
def test_a_reference_that_cannot_run_on_the_meta_device_is_one_line_and_exit_2(tmp_path, args):
    """`.item()` in forward: fine on a CPU, impossible on the meta device kgen takes shapes and FLOPs
    from. At either size, and from a search: one line naming the file and the cause, never a traceback
    or an 'internal error'."""
    result = run_kgen(*(a.format(file=DATA_DEPENDENT) for a in args))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        f"kgen: error: {DATA_DEPENDENT}: its reference does not run on the meta device (at the full size), which kgen "
        "needs for shapes: RuntimeError: Tensor.item() cannot be called on meta tensors"]


def test_the_api_raises_a_kgen_error_for_a_reference_that_cannot_run_on_the_meta_device():
    with pytest.raises(KgenError, match="does not run on the meta device"):
        compute_roofline(load_problem(str(DATA_DEPENDENT), "full"))
    with pytest.raises(KgenError, match="does not run on the meta device"):
        load_problem(str(DATA_DEPENDENT), "full").output_specs()


def test_the_sweep_reports_each_file(tmp_path):
    """benchmarks/kernelbench_sweep.py over three files: two that work, one that cannot."""
    out = tmp_path / "rows.json"
    files = [PROBLEM_FILES / "gemm_expression_sizes.py", PROBLEM_FILES / "conv_chained_pool_groupnorm.py",
             DATA_DEPENDENT]
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "kernelbench_sweep.py"), *map(str, files),
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr  # one file fails
    rows = {r["file"].rsplit("/", 1)[-1]: r for r in json.loads(out.read_text())}
    for name in ("gemm_expression_sizes.py", "conv_chained_pool_groupnorm.py"):
        row = rows[name]
        assert row["loaded"] and row["forward_ok"] and row["semantics_kept"] and row["error"] == "", row
        assert row["flops_full"] > row["flops_small"] > 0 and row["bytes_full"] > row["bytes_small"] > 0
        assert 0 < row["small_elements"] <= 8 << 17
    bad = rows["data_dependent_scale.py"]
    assert not bad["loaded"] and bad["clear"] and "does not run on the meta device" in bad["error"]
    assert "problem_files: 3 files, loaded 2, forward ok at small 2, shrink kept semantics 2" in done.stdout


def test_the_shrink_never_leaves_an_empty_result():
    """Halving the width below the crop's start leaves a 64×0 output with no error on any device (and a
    dilated convolution narrower than its kernel does the same on torch 2.11's meta device, found on the
    H100): a size whose operators give empty results is refused, so the batch shrinks instead."""
    small = load_problem(str(PROBLEM_FILES / "crop_past_the_end.py"), "small")
    assert [s.shape for s in small.output_specs()] == [(16, 1096)]
    assert small.overrides == {"batch_size": 16}


class _UntaggedOp:
    """An aten operator as torch 2.11 describes leaky_relu: no `pointwise` tag (torch 2.13 tags it)."""

    def __init__(self, op):
        self._overloadpacket, self.tags = op, []


def test_leaky_relu_counts_one_flop_per_element_without_the_pointwise_tag():
    """On the H100's torch 2.11, KernelBench's LeakyReLU counted 0 FLOPs: its operator is not tagged
    pointwise there."""
    from kgen.problems.roofline import _operator_flops

    x = torch.empty(8, 16, device="meta")
    assert _operator_flops(_UntaggedOp(torch.ops.aten.leaky_relu), (x, 0.01), {}, x) == 8 * 16
