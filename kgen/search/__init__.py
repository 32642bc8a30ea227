"""The search: rounds of propose, compile, verify, time and store (loop.py), run by Ray workers
(workers.py) on a cluster kgen starts or joins (cluster.py), with its progress display (progress.py);
and `kgen eval COLLECTION`, a collection of generated kernels evaluated the same way (collection.py,
collection_summary.py). Imports the layers below it, never the outputs or the CLI (tests/test_layers.py)."""
