"""Learning benchmarks (benchmarks/README.md lists them)."""
