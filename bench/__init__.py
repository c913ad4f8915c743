"""Benchmarks, not tests: speed and footprint goals measured here, written to docs/benchmarks.md."""
