"""Benchmarks of orlr-ppl, each run as ``python -m benchmarks.<name>`` (BENCHMARKS.md)."""
