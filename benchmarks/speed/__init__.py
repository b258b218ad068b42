"""Speed benchmarks (benchmarks/README.md lists them)."""
