"""The judge's clock check (kgen.judge.timing.clock_check) on beside-the-events times drawn the way a timing
draws them: a round trip with jitter and the occasional slow run (a context switch), for the candidate's
runs and the interleaved null runs alike. Honest runs are never flagged; a shave of the event time beyond
the floor is. The GPU figures are benchmarks/judge_clock_gpu.sh's; these pin the arithmetic."""

import random

import pytest

from kgen.judge.timing import CLOCK_FLOOR_MS, CLOCK_FLOOR_SHARE, clock_check


def beside_times(n: int, rng: random.Random, overhead_ms: float = 0.12, jitter_ms: float = 0.01,
                 shave_ms: float = 0.0) -> list[float]:
    """The judge's wall time minus the runner's event time, per run: the overhead, Gaussian jitter, one
    run in twenty a context switch slower, plus what a lying runner left out of its events."""
    return [overhead_ms + rng.gauss(0, jitter_ms) + (rng.uniform(0.05, 0.5) if rng.random() < 0.05 else 0.0)
            + shave_ms for _ in range(n)]


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize(("runs", "median_ms"), [(900, 1.0), (3000, 0.05), (100, 3.0)])
def test_honest_runs_are_never_flagged(seed, runs, median_ms):
    rng = random.Random(seed)
    check = clock_check(beside_times(runs, rng), beside_times(runs // 3, rng), median_ms)
    assert not check.flagged, check


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(("runs", "kernel_ms", "shave_floors"), [
    (900, 1.0, 1.5),  # 0.9 ms of a 1 ms kernel
    (3000, 0.05, 1.5),  # a constant 0.76 ms taken off a 50 us kernel's report
    (100, 3.0, 1.2),  # 0.96 ms of a 3 ms kernel, with few runs
])
def test_a_shave_beyond_the_floor_is_flagged(seed, runs, kernel_ms, shave_floors):
    rng = random.Random(seed)
    shave_ms = shave_floors * (CLOCK_FLOOR_MS + CLOCK_FLOOR_SHARE * kernel_ms)  # left out of the events
    check = clock_check(beside_times(runs, rng, shave_ms=shave_ms), beside_times(runs // 3, rng),
                        max(kernel_ms - shave_ms, 0.001))
    assert check.flagged, check
    assert check.gap_ms == pytest.approx(shave_ms, abs=0.01)


@pytest.mark.parametrize(("offset_ms", "median_ms"), [(-0.41, 0.3), (0.41, 0.3), (0.39, 0.84), (0.48, 6.0)])
def test_an_offset_between_the_two_runners_as_large_as_the_h100s_is_not_a_lie(offset_ms, median_ms):
    """The H100's finding: an honest candidate's runner and the reference runner differ by a per-evaluation
    offset of up to 0.41 ms (either sign; 0.48 ms for a 6 ms kernel), far beyond the within-evaluation
    standard errors."""
    rng = random.Random(4)
    check = clock_check(beside_times(900, rng, overhead_ms=2.0 + offset_ms), beside_times(300, rng, overhead_ms=2.0),
                        median_ms)
    assert not check.flagged, check


def test_the_threshold_is_the_floor_with_enough_runs_and_grows_with_noise():
    rng = random.Random(1)
    quiet = clock_check(beside_times(1000, rng), beside_times(300, rng), 1.0)
    assert quiet.threshold_ms == pytest.approx(CLOCK_FLOOR_MS + CLOCK_FLOOR_SHARE * 1.0)
    assert quiet.noise_ms < CLOCK_FLOOR_MS / 6
    noisy = clock_check(beside_times(30, rng, jitter_ms=0.5), beside_times(10, rng, jitter_ms=0.5), 1.0)
    assert noisy.threshold_ms > CLOCK_FLOOR_MS + CLOCK_FLOOR_SHARE * 1.0


def test_a_null_runner_slower_than_the_candidates_is_not_a_lie():
    """Negative gaps (the null runner woke more slowly) are never flagged."""
    rng = random.Random(3)
    check = clock_check(beside_times(500, rng), beside_times(150, rng, overhead_ms=0.25), 1.0)
    assert check.gap_ms < 0 and not check.flagged
