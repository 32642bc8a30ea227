"""The judge's clock against a timing lie no check in the runner's process can see (tests/attacks/
c8_rerecord_start: the runner's own start event recorded again mid-forward), at several shaves, on a short
kernel and a long one. Their share-0 variants are honest and must come out `correct`: the measured slack
never flags them. The same under the judge's gate clock (KGEN_JUDGE_CLOCK=gate: every shave caught by the gate
clock itself, honest starters never flagged, the gate's check deciding). Skipped without a GPU (on the H100:
`pytest -m gpu tests/test_judge_clock_gpu.py`, about 6 minutes; `-k gate` for the gate clock's part alone,
about 3; benchmarks/judge_gate_gpu.sh runs it)."""

import json
import os
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


def _evaluate_all(jobs: dict) -> dict:
    """key -> (problem, source, settings) evaluated, all through one set of spare runners."""
    from kgen.judge.evaluate import evaluate_candidate
    from kgen.judge.sandbox import SandboxMode
    from kgen.judge.spares import SpareRunners

    spares = SpareRunners(SandboxMode.BWRAP)
    try:
        return {key: evaluate_candidate(problem, source, settings, spares)
                for key, (problem, source, settings) in jobs.items()}
    finally:
        spares.close()


def _settings(size: str, judge_clock=None):
    from kgen.core.records import EvalSettings

    return EvalSettings(device="cuda", size=size, timeout_s=300, judge_clock=judge_clock)


def _shaves(matrix, judge_clock=None) -> dict:
    """(attack, share, ms, size) -> (problem, source, settings) for a clock matrix."""
    return {(attack, share, ms, size): ("softmax", shave_variant((ATTACKS / f"{attack}.py").read_text(), share, ms),
                                        _settings(size, judge_clock))
            for size in CLOCK_SIZES for attack, share, ms in matrix}


@pytest.fixture(scope="module")
def clock_results():
    """(attack, share, ms, size) -> the evaluation under today's clock."""
    return _evaluate_all(_shaves(CLOCK_MATRIX))


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


@pytest.fixture(scope="module")
def gate_results():
    """Under the gate clock: the shave matrix, (attack, share, ms, size), and the honest starters, (problem,
    starter, size) -> the evaluation."""
    jobs = _shaves(GATE_CLOCK_MATRIX, "gate")
    for problem, starter, size in GATE_HONEST_STARTERS:
        jobs[problem, starter, size] = (problem, (STARTERS / problem / starter).read_text(), _settings(size, "gate"))
    results = _evaluate_all(jobs)
    if os.environ.get("KGEN_GATE_RESULTS"):  # benchmarks/judge_gate_gpu.sh: every evaluation's clocks, for the record
        Path(os.environ["KGEN_GATE_RESULTS"]).write_text(json.dumps(
            [{"key": list(key), "outcome": r.outcome, "message": r.message, "runtime_ms": r.runtime_ms,
              "timing": r.details.get("timing"), "judge_clock": r.details.get("judge_clock")}
             for key, r in results.items()], default=str))
    return results


def _gate_report(result) -> dict:
    """The gate clock's report, set up as on the H100: both runners timed to their end words (legacy CUDA IPC
    does not cross the sandbox's PID namespace: the interprocess event failed to open,
    cudaErrorMapBufferObjectFailed) and writing their started words."""
    report = result.details.get("judge_clock")
    assert report is not None, f"no gate clock in the details: {result.outcome}: {result.message}"
    assert "unavailable" not in report, f"the gate clock could not be set up: {report['unavailable']}"
    assert sorted(report["end"]) == ["candidate's runner", "reference runner"], report["end"]
    assert all(end.startswith("end word") for end in report["end"].values()), report["end"]
    assert report["unknown_runs"] == 0, report  # every run's holding known from its started word
    return report


def _summary(report: dict) -> str:
    return ", ".join(f"{k} {report.get(k)}" for k in ("check", "runs", "held_runs", "shadow_runs", "not_held_runs",
                                                      "gap_ms", "threshold_ms", "noise_ms", "reply_lag_median_ms",
                                                      "null_reply_lag_median_ms"))


@pytest.mark.parametrize("size", CLOCK_SIZES)
@pytest.mark.parametrize(("attack", "share", "ms"), [m for m in GATE_CLOCK_MATRIX if m[1] > 0])
def test_gate_clock_catches_every_shave_of_a_launch(gate_results, attack, share, ms, size):
    honest = gate_results[attack, 0.0, 0.0, size]
    assert honest.outcome == "correct", f"honest {attack} ({size}, gate clock): {honest.outcome}: {honest.message}"
    report = _gate_report(honest)
    assert report["check"] == "made" and not report["flagged"], _summary(report)
    assert honest.details["timing"]["clock_decides"] == "gate"
    result = gate_results[attack, share, ms, size]
    shaved = _gate_report(result)
    assert result.outcome == "suspicious", (f"{attack} shaving {share:.0%} of {honest.runtime_ms:.4g} ms ({size}): "
                                            f"{result.outcome}, {_summary(shaved)}")
    assert shaved["check"] == "made" and shaved["flagged"] and shaved["gap_ms"] > 0, _summary(shaved)
    assert "shorter than the judge's gate clock" in result.message, result.message


@pytest.mark.parametrize(("problem", "starter", "size"), GATE_HONEST_STARTERS)
def test_gate_clock_never_flags_an_honest_starter(gate_results, problem, starter, size):
    result = gate_results[problem, starter, size]
    report = _gate_report(result)
    assert result.outcome == "correct", f"{problem}/{starter} ({size}): {result.outcome}: {result.message}; " \
                                        f"{_summary(report)}"
    assert report["check"] == "made" and not report["flagged"], _summary(report)
    assert report["not_held_runs"] == 0 and abs(report["gap_ms"]) < report["threshold_ms"]
    timing = result.details["timing"]
    assert timing["clock_decides"] == "gate" and "clock_gap_ms" in timing  # today's gap: recorded, not deciding
