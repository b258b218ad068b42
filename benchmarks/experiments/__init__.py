"""One-off research experiments (benchmarks/README.md lists them)."""
