"""Running a benchmark script in a process of its own (speed/gpu.py runs the others under a time
budget; speed/peer.py runs its workers apart): `[sys.executable, "-m", "benchmarks.PURPOSE.NAME",
...]` with `module_env()`, the repository root on the child's PYTHONPATH, so that the child finds
the `benchmarks` package from any working directory."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: benchmarks/lib/processes.py


def module_env() -> dict[str, str]:
    """This process's environment with the repository root first on PYTHONPATH."""
    rest = os.environ.get("PYTHONPATH", "")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), rest]) if rest else str(ROOT))
