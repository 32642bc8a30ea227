"""The judge's clock against a timing lie no check in the runner's process can see (tests/attacks/
c8_rerecord_start: the runner's own start event recorded again mid-forward), at several shaves, on a short
kernel and a long one. Their share-0
variants are honest and must come out `correct`: the measured slack never flags them. Skipped without a GPU
(on the H100: `pytest -m gpu tests/test_judge_clock_gpu.py`, about 3 minutes)."""

from pathlib import Path

import pytest
import torch
from attack_expectations import CLOCK_MATRIX, CLOCK_SIZES, shave_must_be_caught, shave_variant

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ATTACKS = Path(__file__).resolve().parent / "attacks"


@pytest.fixture(scope="module")
def clock_results():
    """(attack, share, ms, size) -> the evaluation, all through one set of spare runners."""
    from kgen.core.records import EvalSettings
    from kgen.judge.evaluate import evaluate_candidate
    from kgen.judge.sandbox import SandboxMode
    from kgen.judge.spares import SpareRunners

    spares = SpareRunners(SandboxMode.BWRAP)
    results = {}
    try:
        for size in CLOCK_SIZES:
            for attack, share, ms in CLOCK_MATRIX:
                source = shave_variant((ATTACKS / f"{attack}.py").read_text(), share, ms)
                results[attack, share, ms, size] = evaluate_candidate(
                    "softmax", source, EvalSettings(device="cuda", size=size, timeout_s=300), spares)
    finally:
        spares.close()
    return results


@pytest.mark.parametrize("size", CLOCK_SIZES)
@pytest.mark.parametrize(("attack", "share", "ms"), CLOCK_MATRIX)
def test_a_shave_beyond_the_floor_is_caught_and_none_is_invented(clock_results, attack, share, ms, size):
    from kgen.judge.timing import CLOCK_FLOOR_MS

    honest = clock_results[attack, 0.0, 0.0, size]
    assert honest.outcome == "correct", f"honest {attack} ({size}): {honest.outcome}: {honest.message}"
    timing = honest.details["timing"]
    assert timing["clock_gap_ms"] < timing["clock_threshold_ms"], timing
    result = clock_results[attack, share, ms, size]
    watched_ms = sum(k["us"] for k in honest.details.get("gpu_kernels") or []) / 1e3
    if shave_must_be_caught(attack, share, ms, size, honest.runtime_ms, CLOCK_FLOOR_MS, watched_ms):
        assert result.outcome == "suspicious", (f"{attack} shaving {share:.0%} + {ms} ms of {honest.runtime_ms:.4g} "
                                                f"ms ({size}): {result.outcome}, {result.details.get('timing')}")
        assert "beyond" in result.message or "not watched" in result.message
    else:  # below the floor: not claimed caught, but never anything worse than a timing that is a little short
        assert result.outcome in ("correct", "suspicious"), result.message
