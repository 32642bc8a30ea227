"""The untrusted side of an evaluation: code that runs in the same process as a candidate.

Everything here runs inside the sandbox (kgen.judge.sandbox starts it under bubblewrap), in the *runner*
(`python -m kgen.harness.runner`, which imports, verifies-by-proxy and times the candidate) or the
*compile step* (the same runner given a job in compile mode: it builds the candidate's CUDA extensions
and Triton kernels into a cache the runner then loads read-only). The judge (kgen.judge), which never runs
candidate code, talks to the runner over one socket (kgen.harness.protocol) and decides every
verdict itself: nothing a process here sends is trusted, only measured.

This package imports torch, triton and the standard library, and nothing of kgen's DB, Ray, the LLM
client or the CLI.
"""
