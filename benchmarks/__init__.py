"""mrtpo's benchmarks: scripts that measure and print figures, by purpose (speed/, conformance/,
learning/, experiments/), the library they share (lib/), and the results page (results_page.py).

A package, so that the scripts import what they share by name: run them from the repository
root as modules, e.g. `python -m benchmarks.speed.step` (benchmarks/README.md)."""
