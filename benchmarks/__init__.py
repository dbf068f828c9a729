"""Benchmarks: the same workloads through pld and its peers (see benchmarks/README.md)."""
