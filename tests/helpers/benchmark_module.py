"""Load a script of benchmarks/ as a module, for the tests of its plumbing (tests/helpers/
is on sys.path through pyproject's pytest `pythonpath`). The scripts sit in folders by purpose (speed/, conformance/,
learning/, experiments/; benchmarks/README.md), so a script is found by its name alone."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def path_of(name: str) -> Path:
    """benchmarks/<name>.py or benchmarks/<purpose>/<name>.py; exactly one must exist."""
    found = sorted(p for p in [BENCHMARKS / f"{name}.py", *BENCHMARKS.glob(f"*/{name}.py")] if p.is_file())
    if len(found) != 1:
        raise FileNotFoundError(f"expected one benchmarks script named {name}.py, found {found or 'none'}")
    return found[0]


def load(name: str) -> ModuleType:
    """The script `name` (see path_of), executed as the module `name` with its folder on
    sys.path, as `python benchmarks/<purpose>/<name>.py` has it (scripts import their
    folder's helpers by name, e.g. speed/timing.py)."""
    path = path_of(name)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    folder = str(path.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    finally:
        if added:
            sys.path.remove(folder)
    return module
