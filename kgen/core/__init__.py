"""What every layer uses: kgen's error type, the records that cross stages (settings, results,
proposals, outcomes), where kgen's files are, parsing of Python sources, and how numbers and tables
are written for people. Imports nothing of kgen above it (tests/test_layers.py)."""
