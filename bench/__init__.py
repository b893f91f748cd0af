"""Benchmarks: `python -m bench.run` (all) or `python -m bench.collector` (the collector)."""
