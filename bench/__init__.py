"""Benchmarks for pygrpc-native (run from the repository root: ``python -m bench.compare``)."""
