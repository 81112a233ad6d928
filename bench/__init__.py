"""Benchmarks for pygrpc-native (run from the repository root, e.g. ``python -m bench.lowlevel``)."""
