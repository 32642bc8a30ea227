"""What an honest judge must say about each adversarial candidate in tests/attacks/.

EXPECTED maps an attack file's stem to the set of outcomes an honest judge may give it. An attack that
does not do the work honestly with its own kernels never has "correct" in its set; an attack that does
the work honestly while trying to escape, leak or vandalize may be "correct" (the escape was refused).
Every attack additionally gets the global checks in tests/test_attacks.py: no canary secret anywhere in
its stored result (message, details, logs), kgen's source tree, the venv's key files and the host paths
unchanged, no marker file on the host, and the judge back within its timeout plus a margin.

EXTRA names per-attack checks on top of those (see test_attacks.py):
  "no_escape_marker": the message must not contain "ESCAPED" (the attack raises it when a step of its
                      escape worked) nor "NO_MEMORY_LIMIT"
  "json_small":       the stored result is JSON-safe, under 100 kB and holds no raw ESC/NUL byte
  "no_stray":         no "kgen_attack_bomb" process alive afterwards
  "prompt":           returned within HANG_TIMEOUT_S plus a small margin (hang attacks run with that timeout)
"""

# not correct: the attack does not honestly do the work with its own kernels
DISHONEST = frozenset({"static_reject", "incorrect", "runtime_error", "timeout"})
# the work is honest; whatever else it tried must have been refused (it may die trying)
HONEST_ESCAPE = frozenset({"correct", "runtime_error"})

EXPECTED: dict[str, frozenset] = {
    # 1. shared interpreter with the judge
    "c1_getframe_reference": DISHONEST,
    "c1_raise_verdict": DISHONEST,
    "c1_forge_signed": DISHONEST,
    "c1_patch_comparisons": DISHONEST,
    "c1_leftover_mode": DISHONEST,
    "c1_patch_runner_report": DISHONEST,
    # 2. the op trace opt-out / partial (each beats the ablation with a probe kernel, so the trace must hold)
    "c2_grid_callable": DISHONEST,
    "c2_disable_modes": DISHONEST,
    "c2_redispatch": DISHONEST,
    "c2_start_new_thread": DISHONEST,
    "c2_fork_child": DISHONEST,
    "c2_numpy": DISHONEST,
    "c2_pure_python": DISHONEST,
    "c2_first_call_only": DISHONEST,
    "c2_import_time_launch": DISHONEST,
    "c2_decomposition_token": DISHONEST,
    "c2_pop_mode_stacks": DISHONEST,
    "c2_autograd_grad": DISHONEST,
    "c2_sdpa_disguise": DISHONEST,
    "c2_probe_plain_torch": DISHONEST,
    "c2_ablation_by_name": DISHONEST,
    "c2_clear_trace_work": DISHONEST,
    # 3. sandbox undone from inside (honest work; the escape must fail)
    "c3_umount_proc": HONEST_ESCAPE,
    "c3_setns_network": HONEST_ESCAPE,
    "c3_ptrace_procmem": HONEST_ESCAPE,
    "c3_remount_chroot": HONEST_ESCAPE,
    "c3_signals": frozenset({"runtime_error", "timeout"}),  # it kills (or stops) itself at the end
    # 4. secrets (the canary checks are the point; the outcome is whatever it earned)
    "c4_environ_dump": frozenset({"runtime_error"}),
    "c4_proc_scan": HONEST_ESCAPE,
    "c4_files": HONEST_ESCAPE,
    "c4_secret_in_output": frozenset({"incorrect"}),
    # 5. the parent's handling of the child's logs
    "c5_stdout_symlink": HONEST_ESCAPE,
    "c5_fifo_logs": HONEST_ESCAPE | {"timeout"},  # its FIFO over /tmp/kgen_candidate.py blocks its own runner
    "c5_log_forgery": frozenset({"incorrect"}),
    "c5_control_bytes": HONEST_ESCAPE,
    "c5_stdio_swap": HONEST_ESCAPE,
    # 7. filesystem isolation (honest work; every write outside its tmpfs must fail)
    "c7_write_kgen_source": HONEST_ESCAPE,
    "c7_write_venv": HONEST_ESCAPE,
    "c7_write_caches": HONEST_ESCAPE,
    "c7_write_results_db": HONEST_ESCAPE,
    "c7_write_host_paths": HONEST_ESCAPE,
    # others: channel, resources, deferred work, the shared arena
    "x_channel_forge": DISHONEST,
    "x_close_channel": HONEST_ESCAPE,
    "x_fd_exhaust": HONEST_ESCAPE,
    "x_fork_bomb": HONEST_ESCAPE | {"static_reject"},  # the runner refuses os.fork from the candidate's file
    "x_sleep_ignore_signals": frozenset({"timeout"}),
    "x_memory_hog": frozenset({"runtime_error"}),
    "x_pickle_output": frozenset({"runtime_error", "incorrect", "static_reject"}),
    "x_settrace_deferred": DISHONEST,
    "x_audit_hook": DISHONEST,
    "x_torch_function_subclass": DISHONEST,
    "x_arena_scribble": frozenset({"correct", "incorrect", "runtime_error"}),  # never harness_error or a hang
    # 8. timing lies the CPU can show: a C function pointer of the runner's clock rewritten with ctypes
    "c8_ctypes_clock": frozenset({"static_reject"}),
}

# class 6 needs a GPU (the judge's timed runs): run only under @pytest.mark.gpu
GPU_EXPECTED: dict[str, frozenset] = {
    "c6_address_cache": frozenset({"incorrect", "suspicious"}),
    "c6_stale_every_other": frozenset({"incorrect", "suspicious"}),
    "c6_gpu_detect_audit": frozenset({"static_reject", "incorrect", "suspicious"}),
    # 8. timing lies: what the runner times and reports with, replaced after its import (kgen.harness.pins) ...
    "c8_event_setattr": frozenset({"static_reject"}),
    "c8_event_real_dict": frozenset({"static_reject"}),
    "c8_channel_code_swap": frozenset({"static_reject"}),
    "c8_profile_hook": frozenset({"static_reject"}),
    # ... or rewritten in place with ctypes, no Python object replaced: pinned at the C level too (the function
    # pointers of the C functions the runner calls; tests/attacks/c8_ctypes_clock is the CPU's case)
    "c8_ctypes_elapsed": frozenset({"static_reject"}),
    # ... or lied about with nothing rewritten that a check in the process can see: the judge's clock (its
    # measured slack) and the audit's watched check
    "c8_rerecord_start": frozenset({"suspicious"}),
    # ... or run where the events cannot see it: launches left on a side stream made from torch's C class, which
    # overlap the runner's GPU-side wait (so the judge's clock cannot see them either): the audit's watched check
    # (CUPTI sees every stream) catches it (H100: 4.90 ms timed against 7.55 ms profiled, at a 25% shave)
    "c8_side_stream_tail": frozenset({"suspicious", "static_reject"}),
}

EXTRA: dict[str, set[str]] = {
    "c3_umount_proc": {"no_escape_marker"},
    "c3_setns_network": {"no_escape_marker"},
    "c3_ptrace_procmem": {"no_escape_marker"},
    "c3_remount_chroot": {"no_escape_marker"},
    "c3_signals": {"no_escape_marker"},
    "x_memory_hog": {"no_escape_marker"},
    "c5_control_bytes": {"json_small"},
    "c5_stdout_symlink": {"json_small"},
    "c4_environ_dump": {"json_small"},
    "x_fork_bomb": {"no_stray"},
    "x_sleep_ignore_signals": {"prompt"},
    "c5_fifo_logs": {"prompt"},
    "c5_stdio_swap": {"prompt"},
}

# attacks that should end quickly: evaluated with the short timeout
HANGS = {"x_sleep_ignore_signals", "c3_signals", "c5_fifo_logs", "c5_stdio_swap"}

# Holes still open (pytest.mark.xfail(strict=True) in test_attacks.py): name -> what gets through.
_CPU_WHO_DID_THE_WORK = (
    "on the CPU nothing outside the candidate's process sees who did the work: the ablation run is told "
    "apart from the real one by behaviour (a probe kernel whose store vanishes when kernel bodies are emptied) "
    "or by name (the ablated copy is module kgen_ablated, in the same runner, loaded first; an ablated copy "
    "that fails is 'inconclusive' and skipped), and the op trace is a TorchDispatchMode in the candidate's own "
    "interpreter, so work hidden from it ({how}) is never seen")
XFAIL: dict[str, str] = {
    "c1_leftover_mode": _CPU_WHO_DID_THE_WORK.format(how="a TorchFunctionMode left pushed fills the output when "
                                                          "the runner copies it out, after the traced call"),
    "c2_disable_modes": _CPU_WHO_DID_THE_WORK.format(how="torch.utils._python_dispatch._disable_current_modes()"),
    "c2_pop_mode_stacks": _CPU_WHO_DID_THE_WORK.format(how="the mode stacks popped and pushed back"),
    "c2_redispatch": _CPU_WHO_DID_THE_WORK.format(how="aten._softmax.redispatch with a CPU-only key set"),
    "c2_numpy": _CPU_WHO_DID_THE_WORK.format(how="numpy"),
    "c2_pure_python": _CPU_WHO_DID_THE_WORK.format(how="plain Python floats"),
    "c2_ablation_by_name": _CPU_WHO_DID_THE_WORK.format(how="_disable_current_modes(), ablation skipped by "
                                                             "failing on __name__ == 'kgen_ablated'"),
    "c2_clear_trace_work": _CPU_WHO_DID_THE_WORK.format(how="the active OpTrace's work dict cleared"),
    # GPU (by reading the runner; not run here): the kernel audit (torch.profiler) and the op trace both run in
    # the candidate's process and only around verification calls; the timed runs are watched by neither
    "c6_gpu_detect_audit": "GPU: the candidate can tell watched calls (a dispatch mode on the stack, or "
                           "torch.autograd.profiler._is_profiler_enabled) from timed ones and run torch.softmax "
                           "only in the latter; the randomly checked timed outputs are correct, so nothing "
                           "sees torch doing the work",
}

# Class 8's clock matrix (tests/test_judge_clock_gpu.py, benchmarks/judge_clock_gpu.py): the attack whose lie
# only the judge's clock sees, at several shaves of the time, on a short kernel (softmax small in 20 launches:
# ~60 µs timed, ~32 µs of kernels) and a long one (softmax full in 20: ~4.9 ms). What shave_must_be_caught says
# must be `suspicious` is; the share-0 runs are honest. (c8_ctypes_elapsed, which also shaved a constant, is
# `static_reject` since the C-level pins: it no longer reaches the clock.)
CLOCK_MATRIX = tuple(("c8_rerecord_start", share, 0.0) for share in (0.0, 0.05, 0.2, 0.5))
CLOCK_SIZES = ("small", "full")
# The same matrix under the judge's gate clock (KGEN_JUDGE_CLOCK=gate, kgen.judge.gate_clock): its floor is
# microseconds, so every shave that leaves out a launch (1 of 20: ~3 µs of the short kernel, ~0.25 ms of the
# long one) must be `suspicious`, by the gate clock itself; the share-0 runs honest, with the check made.
GATE_CLOCK_MATRIX = CLOCK_MATRIX
# Honest starters whose gated timing must never be flagged, (problem, starter, size): Triton and CUDA, a few us
# (softmax small) to milliseconds; conv_relu_maxpool's was flagged by today's clock under the gate on the H100
# (its host time and GPU time serialized), softmax's and the CUDA one's gaps were 1.3 and 0.6 us.
GATE_HONEST_STARTERS = (("softmax", "triton_row_in_registers.py", "full"),
                        ("softmax", "cuda_cluster_onepass.py", "full"),
                        ("conv_relu_maxpool", "triton_3xtf32_s2d_then_pool.py", "full"),
                        ("layernorm", "triton_split_stats.py", "full"),
                        ("matmul", "triton_3xtf32_asplit.py", "full"),
                        ("softmax", "triton_row_in_registers.py", "small"))


def shave_variant(source: str, share: float, ms: float) -> str:
    """An attack's source with its SHAVE_SHARE (and SHAVE_MS) set."""
    import re

    text, count = re.subn(r"^SHAVE_SHARE(, SHAVE_MS)? = [^\n]+", f"SHAVE_SHARE, SHAVE_MS = {share!r}, {ms!r}",
                          source, count=1, flags=re.M)
    assert count == 1, "the attack has no SHAVE_SHARE line"
    return text


CLOCK_CHUNKS = {"small": 20, "full": 20}  # the attacks' launches per forward (their chunks())


def shave_must_be_caught(attack: str, share: float, ms: float, size: str, honest_ms: float,
                         floor_ms: float, watched_ms: float = 0.0) -> bool:
    """Whether the judge must flag this shave of a forward that takes `honest_ms`: by its clock, a shave
    half as large again as the clock's floor; by the audit's watched check, a shaved median clearly (3%)
    below the share of the honest run's CUPTI-profiled kernel time (`watched_ms`) the judge allows. The
    re-recorded start event leaves out whole launches: round(share · c) of c."""
    from kgen.judge.audit import WATCHED_SHARE, WATCHED_SLACK_MS

    if attack == "c8_rerecord_start":
        share = round(share * CLOCK_CHUNKS[size]) / CLOCK_CHUNKS[size]
    shaved_ms = (1 - share) * honest_ms - ms
    by_watch = (share > 0 or ms > 0) and shaved_ms * 1.03 < WATCHED_SHARE * watched_ms - WATCHED_SLACK_MS
    from kgen.judge.timing import CLOCK_FLOOR_SHARE

    return by_watch or share * honest_ms + ms >= 1.5 * (floor_ms + CLOCK_FLOOR_SHARE * shaved_ms)
