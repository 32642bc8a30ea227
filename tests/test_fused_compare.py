"""kgen.judge.fused_compare against verify's torch path (the definition of the measures): the same verdicts,
messages, max |diff|, counts and first offending element; sums (and the ratios floored at their rms) to float64
rounding. The fused kernels run in
Triton's interpreter on the CPU (a subprocess with TRITON_INTERPRET=1, fused_compare.ON_CPU set); on a GPU
machine the last test runs them compiled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

CASES = textwrap.dedent('''
    import json, math, os, sys
    import torch
    from kgen.judge import fused_compare, verify

    fused_compare.ON_CPU = sys.argv[1] == "cpu"
    device = "cuda" if sys.argv[1] == "cuda" else "cpu"
    g = torch.Generator().manual_seed(7)

    def case(name, out, ref, dtype=torch.float32, rtol=1e-5, own=None):
        out, ref = out.to(device), ref.to(device)
        both = {}
        for switch in ("0", "1"):
            os.environ["KGEN_FUSED_COMPARE"] = switch
            used = fused_compare.usable(out.reshape(-1), ref.reshape(-1))
            c = verify.compare(out, ref, dtype, rtol, own=own)
            o = verify.own_error(out, ref) if out.dtype == dtype else None
            both[switch] = {"used": used, "ok": c.ok, "message": c.message,
                            "measures": [c.max_abs_err, c.max_rel_err, c.norm_rel_err, c.atol, c.elem_err],
                            "own": None if o is None else [o.norm_rel_err, o.elem_err, o.overflow]}
        return name, both

    n = 3 * 2048 + 5  # not a multiple of the block
    ref = torch.randn(n, dtype=torch.float64, generator=g) * 3
    close = (ref * (1 + 1e-7 * torch.randn(n, dtype=torch.float64, generator=g))).float()
    off = close.clone()
    off[[17, 4000, 6000]] += 0.05
    tiny = torch.zeros(n, dtype=torch.float64)
    tiny_out = torch.zeros(n, dtype=torch.float32)
    tiny_out[9] = 1e-30
    nan = close.clone()
    nan[11] = float("nan")
    big = torch.randn(2, 2049, 3, dtype=torch.float64, generator=g) * 1e30
    half_ref = torch.randn(n, dtype=torch.float64, generator=g)
    half = (half_ref * (1 + 1e-3 * torch.randn(n, dtype=torch.float64, generator=g))).half()
    own = verify.own_error(close, ref)
    results = dict([
        case("close", close, ref),
        case("off", off, ref),
        case("off with own", off, ref, own=verify.OwnError(1e-3, 1e-2)),
        case("zeros", tiny_out, tiny),
        # every element within its bar (0.9 of it), the whole beyond rtol normwise (~1.7 rtol)
        case("normwise", ref + 0.9e-5 * (ref.square().mean().sqrt() + ref.abs()), ref, dtype=torch.float64),
        case("nan", nan, ref),
        case("big 3-d", (big * (1 + 1e-6)).float(), big),
        case("fp16", half, half_ref, dtype=torch.float16, rtol=1e-2),
        case("float64 out", ref * (1 + 1e-9), ref, dtype=torch.float64, rtol=1e-7),
    ])
    print(json.dumps(results))
''')


def _run(tmp_path, where: str, env_extra: dict) -> dict:
    script = tmp_path / "cases.py"
    script.write_text(CASES)
    env = dict(os.environ, **env_extra)
    done = subprocess.run([sys.executable, str(script), where], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _check(results: dict) -> None:
    for name, both in results.items():
        torch_path, fused = both["0"], both["1"]
        assert not torch_path["used"], name
        assert fused["used"], name  # every case's tensors are eligible; "nan" then falls back inside
        assert fused["ok"] == torch_path["ok"], name
        assert fused["message"] == torch_path["message"], name
        max_abs, max_rel, norm_rel, atol, elem = fused["measures"]
        t_abs, t_rel, t_norm, t_atol, t_elem = torch_path["measures"]
        if t_norm is None:  # failed before any measure (NaN where the reference has none): nothing measured
            assert fused["measures"] == torch_path["measures"], name
            continue
        assert max_abs == t_abs, name  # exactly verify's; the ratios' floor is the rms, a sum's root:
        assert max_rel == pytest.approx(t_rel, rel=1e-12), name
        assert elem == pytest.approx(t_elem, rel=1e-12), name
        assert norm_rel == pytest.approx(t_norm, rel=1e-12, abs=1e-300), name  # sums: another order
        assert atol == pytest.approx(t_atol, rel=1e-12, abs=1e-300), name
        if torch_path["own"] is not None:
            assert fused["own"][1] == pytest.approx(torch_path["own"][1], rel=1e-12), name
            assert fused["own"][0] == pytest.approx(torch_path["own"][0], rel=1e-12, abs=1e-300), name
            assert fused["own"][2] == torch_path["own"][2], name
    assert not results["close"]["1"]["message"] and results["close"]["1"]["ok"]
    assert "3 of 6149 elements off" in results["off"]["1"]["message"]  # counted, first one located
    assert "output[17]" in results["off"]["1"]["message"]
    assert results["off with own"]["1"]["ok"] is True  # torch's own error loosens the bar (4 x 1e-2)
    assert "normwise relative error" in results["normwise"]["1"]["message"]
    assert "NaN/Inf where the reference has none" in results["nan"]["1"]["message"]


def test_fused_measures_match_the_torch_path_in_the_interpreter(tmp_path):
    _check(_run(tmp_path, "cpu", {"TRITON_INTERPRET": "1"}))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the fused kernels compiled)")
def test_fused_measures_match_the_torch_path_on_the_gpu(tmp_path):
    _check(_run(tmp_path, "cuda", {}))


@pytest.mark.skipif(torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1",
                    reason="needs Triton unable to launch here: no GPU and no interpreter")
def test_a_fused_pass_that_cannot_run_falls_back_to_the_torch_path(monkeypatch):
    """Triton that cannot launch (here: CPU tensors, no GPU driver, no interpreter) costs the fused passes for the
    process, never a verdict: the same comparison comes from verify's torch path, and the reason is kept."""
    from kgen.judge import fused_compare, verify

    monkeypatch.setattr(fused_compare, "broken", None)
    ref = torch.randn(5000, dtype=torch.float64)
    out = ref.float()
    out[10] += 1.0
    monkeypatch.setenv("KGEN_FUSED_COMPARE", "0")
    expected = verify.compare(out, ref, torch.float32, 1e-5)
    monkeypatch.delenv("KGEN_FUSED_COMPARE")
    monkeypatch.setattr(fused_compare, "ON_CPU", True)
    assert fused_compare.usable(out, ref)
    got = verify.compare(out, ref, torch.float32, 1e-5)
    assert fused_compare.broken is not None  # the launch failed and turned the passes off
    assert (got.ok, got.message) == (expected.ok, expected.message) and "output[10]" in got.message
    assert not fused_compare.usable(out, ref)
    own = verify.own_error(out, ref)  # the torch path from now on
    assert own.norm_rel_err > 0
