"""What kgen writes for people from the results DB: standalone modules of the winners (export.py, with
their compiled kernels: aot.py), the HTML report (report.py) and the GPU benchmark's tables (bench.py).
Imports every layer below it, never the CLI (tests/test_layers.py)."""
