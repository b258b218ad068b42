"""benchmarks/lib/processes.py: a benchmark's child process finds the `benchmarks` package from
any working directory, with the caller's PYTHONPATH kept after the repository root."""
from __future__ import annotations

import os
import subprocess
import sys

from benchmarks.lib.processes import ROOT, module_env


def test_a_child_finds_the_benchmarks_package_from_elsewhere(tmp_path, monkeypatch):
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "caller_module.py").write_text("VALUE = 7\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "extra"))
    env = module_env()
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), str(tmp_path / "extra")]
    code = "import benchmarks.lib.stats, caller_module; print(benchmarks.lib.stats.__file__, caller_module.VALUE)"
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [str(ROOT / "benchmarks" / "lib" / "stats.py"), "7"]
    monkeypatch.delenv("PYTHONPATH")
    assert module_env()["PYTHONPATH"] == str(ROOT)
