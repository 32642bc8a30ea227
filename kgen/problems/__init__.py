"""The problems: KernelBench-format reference modules at their full and small sizes (problem.py), and
their roofline, the fewest bytes and FLOPs they need against the device's measured ceilings
(roofline.py). Imports only kgen.core (tests/test_layers.py)."""
