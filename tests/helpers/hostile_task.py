"""A hostile task plugin, as a careless plugin author would write it, and its installation.

`HostileTask` is the harness WordTask with one more reward, 'hostile', whose code misbehaves
in the way `-o mode=...` says: its verifier sleeps, calls `os._exit(7)`, prints megabytes,
returns a string score or a dict as feedback or megabytes of feedback; its block builder or
the task's `reference` sleep; `reference` returns 42. `hanging_factory` is an entry-point
factory that never returns.

`install(dest, entries)` writes a `*.dist-info` with an `entry_points.txt` into `dest`: entry
points are discovered from any such directory on sys.path, so a subprocess started with
`env(dest)` (dest, this folder and the repository on PYTHONPATH) finds the plugin. Nothing is
installed for the user.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from harness_task import WordTask
from mrtpo.formats import TextFormat
from mrtpo.tasks.base import Reward, Verdict

HELPERS = Path(__file__).resolve().parent
ROOT = HELPERS.parents[1]
SLEEP = 3600.0  # "for ever", as far as any test is concerned


class HostileTask(WordTask):
    name = "hostile"
    format = TextFormat()
    reward_names = WordTask.reward_names + ["hostile"]

    def __init__(self, mode: str = "ok", n: int = 8, size: int = 2_000_000):
        super().__init__(n)
        self.mode = mode
        self.size = size

    def rewards(self, example):
        mode, size = self.mode, self.size

        def verify(ex, response):
            if mode == "sleep":
                time.sleep(SLEEP)
            if mode == "exit":
                os._exit(7)
            if mode == "print":
                print("x" * size)
            if mode == "string":
                return Verdict("1.0", "a score written as text")
            if mode == "dictfeedback":
                return Verdict(1.0, {"why": "a dict as feedback"})
            if mode == "hugefeedback":
                return Verdict(0.0, "f" * size)
            return Verdict(1.0, "fine")

        def block(ex, verdict):
            if mode == "blocksleep":
                time.sleep(SLEEP)
            if mode in ("hugefeedback", "dictfeedback"):
                return verdict.feedback if isinstance(verdict.feedback, str) else ""
            if mode == "string":  # a reference block: the lint scores it with this reward
                return WordTask.reference(self, ex)
            return "Say the word."

        kind = "reference" if mode == "string" else ""
        return super().rewards(example) + [Reward("hostile", verify, block, kind=kind)]

    def load(self, path=None, split=None):
        if self.mode == "printload":  # a careless "loading..." in this process, not a worker
            print("loading the hostile data " * 1000)
        return super().load(path, split)

    def reference(self, example):
        if self.mode == "refsleep":
            time.sleep(SLEEP)
        if self.mode == "ref42":
            return 42
        return super().reference(example)


def hanging_factory(**options):
    """An entry point's factory that never returns (`mrtpo tasks ls` must not wait for it)."""
    time.sleep(SLEEP)


ENTRIES = {"hostile": "hostile_task:HostileTask"}


def install(dest: Path, entries: dict[str, str] = ENTRIES) -> Path:
    """Write the plugin's dist-info (name -> "module:attr" entry points) into `dest`."""
    info = Path(dest) / "hostile_plugin-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hostile-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[mrtpo.tasks]\n" + "".join(f"{name} = {target}\n" for name, target in entries.items()))
    return Path(dest)


def env(dest: Path, **extra: str) -> dict[str, str]:
    """The environment of a `mrtpo` subprocess that finds the plugin installed in `dest`."""
    path = os.pathsep.join([str(dest), str(HELPERS), str(ROOT)])
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "COLUMNS": "200",
            "NO_COLOR": "1", **extra}


def mrtpo(dest: Path, *args, timeout: float = 120.0, stdout=subprocess.PIPE, script: bool = False,
          **popen) -> subprocess.CompletedProcess:
    """`mrtpo ARGS` in a subprocess that finds the plugin, bounded by `timeout` seconds of wall
    clock (subprocess.TimeoutExpired: it hung). `script` runs it as the console script does
    (`sys.exit(app())`), else as `python -m mrtpo`."""
    cmd = ([sys.executable, "-c", "import sys; from mrtpo.cli import app; sys.argv[0] = 'mrtpo'; "
            "sys.exit(app())"] if script else [sys.executable, "-m", "mrtpo"])
    return subprocess.run([*cmd, *map(str, args)], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, env=env(dest), timeout=timeout, **popen)
