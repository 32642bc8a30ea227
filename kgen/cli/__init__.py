"""The `kgen` command line: a thin shell over the library, the top layer (tests/test_layers.py)."""
