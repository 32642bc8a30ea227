"""The judge's clock against a timing lie no check in the runner's process can see (tests/attacks/
c8_rerecord_start: the runner's own start event recorded again mid-forward), at several shaves, on a short
kernel and a long one. Their share-0
variants are honest and must come out `correct`: the measured slack never flags them. The same under the
judge's gate clock (KGEN_JUDGE_CLOCK=gate: every shave caught, honest starters never flagged). Skipped
without a GPU (on the H100: `pytest -m gpu tests/test_judge_clock_gpu.py`, about 5 minutes; `-k gate` for the
gate clock's part alone)."""

from pathlib import Path

import pytest
import torch
from attack_expectations import (
    CLOCK_MATRIX,
    CLOCK_SIZES,
    GATE_CLOCK_MATRIX,
    GATE_HONEST_STARTERS,
    shave_must_be_caught,
    shave_variant,
)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ATTACKS = Path(__file__).resolve().parent / "attacks"
STARTERS = Path(__file__).resolve().parents[1] / "problems" / "starters"


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


def _gate_settings(size: str):
    from kgen.core.records import EvalSettings

    return EvalSettings(device="cuda", size=size, timeout_s=300, judge_clock="gate")


@pytest.fixture(scope="module")
def gate_results():
    """The gate clock's matrix and honest starters: (attack, share, ms, size) / (problem, starter) -> the
    evaluation, through one set of spare runners."""
    from kgen.judge.evaluate import evaluate_candidate
    from kgen.judge.sandbox import SandboxMode
    from kgen.judge.spares import SpareRunners

    spares = SpareRunners(SandboxMode.BWRAP)
    results = {}
    try:
        for size in CLOCK_SIZES:
            for attack, share, ms in GATE_CLOCK_MATRIX:
                source = shave_variant((ATTACKS / f"{attack}.py").read_text(), share, ms)
                results[attack, share, ms, size] = evaluate_candidate("softmax", source, _gate_settings(size), spares)
        for problem, starter in GATE_HONEST_STARTERS:
            results[problem, starter] = evaluate_candidate(problem, (STARTERS / problem / starter).read_text(),
                                                           _gate_settings("full"), spares)
    finally:
        spares.close()
    return results


def _gate_report(result) -> dict:
    report = result.details.get("judge_clock")
    assert report is not None, f"no gate clock in the details: {result.outcome}: {result.message}"
    assert "unavailable" not in report, f"the gate clock could not be set up: {report['unavailable']}"
    return report


@pytest.mark.parametrize("size", CLOCK_SIZES)
@pytest.mark.parametrize(("attack", "share", "ms"), [m for m in GATE_CLOCK_MATRIX if m[1] > 0])
def test_gate_clock_catches_every_shave_of_a_launch(gate_results, attack, share, ms, size):
    honest = gate_results[attack, 0.0, 0.0, size]
    assert honest.outcome == "correct", f"honest {attack} ({size}, gate clock): {honest.outcome}: {honest.message}"
    report = _gate_report(honest)
    assert report["check"] == "made" and not report["flagged"], report
    result = gate_results[attack, share, ms, size]
    assert result.outcome == "suspicious", (f"{attack} shaving {share:.0%} of {honest.runtime_ms:.4g} ms ({size}): "
                                            f"{result.outcome}, {result.details.get('judge_clock')}")
    assert "gate clock" in result.message, result.message


@pytest.mark.parametrize(("problem", "starter"), GATE_HONEST_STARTERS)
def test_gate_clock_never_flags_an_honest_starter(gate_results, problem, starter):
    result = gate_results[problem, starter]
    assert result.outcome == "correct", f"{problem}/{starter}: {result.outcome}: {result.message}"
    report = _gate_report(result)
    assert report["check"] == "made" and not report["flagged"], report
    assert report["not_held_runs"] == 0 and report["gap_ms"] < report["threshold_ms"]
