"""The judge: trusted code that decides an evaluation's outcome, above the untrusted harness it drives
(kgen.harness, started under kgen.judge.sandbox). It never runs candidate code.

    evaluate.py       one candidate: static checks, then the judge; speedups and roofline % (the entry point)
    static_checks.py  what is rejected before anything runs
    judge.py          the Judge: the reference, the trials, the runners, the order of an evaluation
    verdict.py        how an evaluation ends (Verdict, HarnessFault), the trials and the evidence
    compile_step.py   the compile step (the one process that may start compilers); builds.py: where builds live
    spares.py         the sandboxed processes, and the spares started ahead of the candidates that take them
    audit.py          who did the work: the ablation (ablation.py), torch's share, the GPU kernels' share
    timing.py         the timing protocol: the judge's Stopwatch and its clock check
    gate_clock.py     the default judge clock (KGEN_JUDGE_CLOCK=events: the old one): the gate only the judge
                      opens, and its host-side clock of each run
    verify.py         outputs against float64 references, at the tolerance torch itself can meet
    sandbox.py        bubblewrap, seccomp, uid, limits: how every process that runs candidate code starts
    kernel_profile.py, ncu_profile.py, telemetry.py   what the kernels did on the GPU, and the GPU's state
    baselines.py      eager and torch.compile timed in a child process of kgen's own (baseline_worker.py,
                      baseline_timing.py)

Imports kgen.core, kgen.problems and kgen.harness, never the DB, the proposers, the search, Ray or the CLI
(tests/test_layers.py).
"""
