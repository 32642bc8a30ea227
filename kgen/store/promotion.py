"""When a candidate is a new best: only when it beats the current best by more than the timing noise.

The judge keeps every timed run of a candidate (`Evaluation.details["samples_ms"]`, up to 2,000) and
reports their median as its runtime. From those samples each candidate gets a distribution-free 95%
confidence interval of its median (order statistics: the interval between the j-th smallest and the
j-th largest run, j from the Binomial(n, 1/2) distribution, no assumption about the shape of the times).

A candidate beats the best only if its interval lies wholly below the best's (upper bound under the
best's lower bound) AND its median is at least MIN_GAIN faster. Anything less is a tie, and the
incumbent, the candidate found first (the lower candidate id), stays best: a search that keeps
proposing near-copies of its best kernel otherwise "improves" on every lucky draw of the clock.
Without samples (rows stored before the judge kept them; a machine without a GPU times nothing) the
medians alone decide, still by at least MIN_GAIN. A timed candidate always beats an untimed one.

Timed runs on a GPU drift together (clocks, temperature), so the runs are not independent draws and
the interval is narrower than the truth; MIN_GAIN is the floor that covers what the interval cannot.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Optional, TypeVar

CONFIDENCE = 0.95
# a new best's median is at least 3% below the best's: on the H100 one kernel's evaluations in separate
# processes landed up to 2.13% apart (benchmarks/RESULTS.md, 2026-11-25), so 2% promoted a copy of itself
MIN_GAIN = 0.03

T = TypeVar("T")


@dataclass(frozen=True)
class RuntimeSpread:
    """A candidate's runtime: the median and, where its timed runs are stored, the confidence
    interval of that median. Everything None for an untimed candidate."""

    median_ms: Optional[float]
    low_ms: Optional[float] = None
    high_ms: Optional[float] = None
    runs: int = 0

    @property
    def timed(self) -> bool:
        return self.median_ms is not None

    @property
    def has_interval(self) -> bool:
        return self.low_ms is not None and self.high_ms is not None

    @property
    def half_width_ms(self) -> Optional[float]:
        """Half the interval's width: the `±` the leaderboard prints."""
        return (self.high_ms - self.low_ms) / 2 if self.has_interval else None


@lru_cache(maxsize=4096)
def median_interval_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int]:
    """0-based indexes (low, high) into n sorted samples of a `confidence` interval of their median:
    the largest j with P(Binomial(n, 1/2) <= j - 1) <= (1 - confidence) / 2 gives [x_j, x_(n-j+1)]
    (1-based). Below 6 samples no j reaches 95%: the interval is then the whole range (n = 5: 93.75%)."""
    if n < 1:
        raise ValueError("no samples")
    alpha_half = Fraction(1 - confidence).limit_denominator(10**6) / 2
    bound = alpha_half * 2**n  # compare counts of the 2**n equally likely sign patterns, exactly
    j, below, term = 1, 0, 1  # below: sum of C(n, i) for i < j; term: C(n, j - 1)
    while j <= n // 2 and below + term <= bound:
        below += term
        term = term * (n - j + 1) // j
        j += 1
    j = max(1, j - 1)
    return j - 1, n - j


def median_interval(samples: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """A distribution-free `confidence` interval of the median of `samples` (see median_interval_ranks)."""
    ordered = sorted(samples)
    low, high = median_interval_ranks(len(ordered), confidence)
    return ordered[low], ordered[high]


def samples_of(details: Optional[dict]) -> list[float]:
    """The timed runs an evaluation stored (details["samples_ms"]); [] where there are none."""
    samples = (details or {}).get("samples_ms")
    if not isinstance(samples, list):
        return []
    return [float(x) for x in samples if isinstance(x, (int, float)) and math.isfinite(x)]


def spread_of(runtime_ms: Optional[float], samples: Sequence[float] = ()) -> RuntimeSpread:
    """The spread of a stored runtime (the judge's median) given the timed runs behind it."""
    if runtime_ms is None:
        return RuntimeSpread(None)
    if not samples:
        return RuntimeSpread(runtime_ms)
    low, high = median_interval(samples)
    return RuntimeSpread(runtime_ms, low, high, len(samples))


def clearly_faster(a: RuntimeSpread, b: RuntimeSpread) -> bool:
    """`a` is faster than `b` beyond the noise: timed against untimed, or MIN_GAIN faster with (where
    both have intervals) a's interval wholly below b's."""
    if not a.timed:
        return False
    if not b.timed:
        return True
    if a.median_ms > b.median_ms * (1 - MIN_GAIN):
        return False
    return not (a.has_interval and b.has_interval) or a.high_ms < b.low_ms


def beats(new: RuntimeSpread, best: RuntimeSpread) -> bool:
    """Whether `new` takes the place of the current `best` (found before it)."""
    return clearly_faster(new, best)


def within_noise(a: RuntimeSpread, b: RuntimeSpread) -> bool:
    """Two timed runtimes neither of which is clearly faster than the other: a tie."""
    return a.timed and b.timed and not clearly_faster(a, b) and not clearly_faster(b, a)


def promoted_best(in_time_order: Iterable[T], spread: Callable[[T], RuntimeSpread]) -> Optional[T]:
    """The best of candidates given in the order they were found: the first, replaced by each later
    one that beats the best so far."""
    best, best_spread = None, None
    for item in in_time_order:
        s = spread(item)
        if best is None or beats(s, best_spread):
            best, best_spread = item, s
    return best


def promotion_order(in_time_order: Sequence[T], spread: Callable[[T], RuntimeSpread]) -> list[T]:
    """Candidates best first: the promoted best, then the others by median, fastest first (untimed
    ones last, in the order found). A later one may have a faster median than the best: a tie."""
    best = promoted_best(in_time_order, spread)
    if best is None:
        return []
    medians = [spread(item).median_ms for item in in_time_order]
    rest = sorted((i for i, item in enumerate(in_time_order) if item is not best),
                  key=lambda i: (medians[i] is None, medians[i] or 0.0, i))
    return [best] + [in_time_order[i] for i in rest]


def candidate_spread(candidate) -> RuntimeSpread:
    """The spread of a store.ScoredCandidate (anything with runtime_ms and samples_ms)."""
    return spread_of(candidate.runtime_ms, candidate.samples_ms)
