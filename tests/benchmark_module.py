"""Load a script of benchmarks/ as a module, for the tests of its plumbing (tests/ is on
sys.path through its conftest). The scripts sit in folders by purpose (speed/, conformance/,
learning/, experiments/; benchmarks/README.md), so a script is found by its name alone."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def path_of(name: str) -> Path:
    """benchmarks/<name>.py or benchmarks/<purpose>/<name>.py; exactly one must exist."""
    found = sorted(p for p in [BENCHMARKS / f"{name}.py", *BENCHMARKS.glob(f"*/{name}.py")] if p.is_file())
    if len(found) != 1:
        raise FileNotFoundError(f"expected one benchmarks script named {name}.py, found {found or 'none'}")
    return found[0]


def load(name: str) -> ModuleType:
    """The script `name` (see path_of), executed as the module `name`."""
    spec = importlib.util.spec_from_file_location(name, path_of(name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
