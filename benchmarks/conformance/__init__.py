"""Conformance checks (benchmarks/README.md lists them)."""
