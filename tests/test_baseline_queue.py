"""kgen.search.baseline_queue: how many baselines a collection has in flight per evaluator (by the GPU memory
they hold and the CPUs), on which evaluator, and in which order."""

from kgen.problems.problem import load_problem
from kgen.search.baseline_queue import (
    BASELINE_PROCESS_BYTES,
    TENSOR_FACTOR,
    BaselineQueue,
    baselines_per_evaluator,
    footprint_bytes,
)

GIB = 1 << 30


def test_the_cpus_set_how_many_baselines_one_evaluator_compiles_at_once():
    assert baselines_per_evaluator(16, 1) == 8  # the H100 box: 16 cores for one GPU
    assert baselines_per_evaluator(128, 8) == 8
    assert baselines_per_evaluator(2, 1) == 2  # never fewer than two (the old constant)


def test_a_problems_footprint_is_a_process_plus_its_tensors_as_the_meta_device_gives_them():
    softmax = load_problem("softmax", "full")  # 4096 x 65536 fp32 in, the same out: 2 GiB moved
    assert footprint_bytes(softmax) == BASELINE_PROCESS_BYTES + TENSOR_FACTOR * 2 * 4096 * 65536 * 4


def test_memory_limits_what_is_in_flight_before_the_cpus_do():
    # 20 GiB free: 10 GiB for baselines; 3 GiB each: 3 at once although the CPUs allow 8
    queue = BaselineQueue(list("abcde"), dict.fromkeys("abcde", 3 * GIB), [20 * GIB], cap=8)
    assert queue.next_starts() == [("a", 0), ("b", 0), ("c", 0)]
    assert queue.next_starts() == []
    queue.finished("b")
    assert queue.next_starts() == [("d", 0)]


def test_the_cpus_limit_small_problems():
    queue = BaselineQueue(list("abcdef"), dict.fromkeys("abcdef", GIB), [80 * GIB], cap=4)
    assert [k for k, _ in queue.next_starts()] == list("abcd")


def test_a_problem_too_big_for_the_budget_runs_alone_and_smaller_ones_go_past_it_meanwhile():
    sizes = {"small": GIB, "huge": 30 * GIB, "other": GIB}
    queue = BaselineQueue(["small", "huge", "other"], sizes, [20 * GIB], cap=8)
    assert queue.next_starts() == [("small", 0), ("other", 0)]  # huge does not fit beside them
    queue.finished("small")
    queue.finished("other")
    assert queue.next_starts() == [("huge", 0)]  # alone, over the budget: its baselines must be timed anyway


def test_a_problem_whose_size_is_unknown_runs_alone():
    queue = BaselineQueue(["a", "unknown", "b"], {"a": GIB, "unknown": None, "b": GIB}, [80 * GIB], cap=8)
    assert queue.next_starts() == [("a", 0), ("b", 0)]
    queue.finished("a")
    queue.finished("b")
    assert queue.next_starts() == [("unknown", 0)]
    assert queue.next_starts() == []  # nothing beside it


def test_problems_with_candidates_waiting_for_the_gpu_go_first():
    queue = BaselineQueue(list("abcd"), dict.fromkeys("abcd", GIB), [80 * GIB], cap=2)
    assert queue.next_starts(queued_first=["d", "c", "d"]) == [("d", 0), ("c", 0)]
    queue.finished("c")
    assert queue.next_starts(queued_first=["x"]) == [("a", 0)]  # a key not waiting (in flight, done) is skipped


def test_baselines_spread_over_the_evaluators_by_their_room():
    queue = BaselineQueue(list("abcd"), dict.fromkeys("abcd", 2 * GIB), [16 * GIB, 8 * GIB], cap=8)
    # budgets 8 and 4 GiB: a to the roomier, then whichever has more left
    assert queue.next_starts() == [("a", 0), ("b", 0), ("c", 1), ("d", 0)]
    assert queue.in_flight == 4 and queue and not queue.waiting
    for key in "abcd":
        queue.finished(key)
    assert not queue


def test_without_memory_figures_only_the_count_limits_and_evaluators_take_turns():
    queue = BaselineQueue(list("abcde"), dict.fromkeys("abcde", 100 * GIB), [None, None], cap=2)
    assert queue.next_starts() == [("a", 0), ("b", 1), ("c", 0), ("d", 1)]
