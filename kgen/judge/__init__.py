"""The judge: trusted code that decides an evaluation's outcome, above the untrusted harness it drives
(kgen.harness, started under kgen.judge.sandbox). It never runs candidate code.

    evaluate.py      one candidate: static checks, then the judge; speedups and roofline % (the entry point)
    judge.py         the Judge: reference, trials, runners, the order of an evaluation
    static_checks.py, ablation.py, verify.py, sandbox.py, kernel_profile.py, ncu_profile.py, telemetry.py
    baselines.py     eager and torch.compile timed in a child process of kgen's own (baseline_worker.py)

Imports kgen.core, kgen.problems and kgen.harness, never the DB, the search, Ray or the CLI
(tests/test_layers.py).
"""
