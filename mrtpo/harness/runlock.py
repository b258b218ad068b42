"""One process at a time per run directory: an exclusive lock on `<run>/.lock`.

Two runs writing one directory interleave their steps in metrics.jsonl and overwrite each
other's checkpoints, so `train` (and the learning benchmark) take this lock first and a second
run is refused with the holder named: its pid, host, start time and command line, which the
holder writes into the lock file. The lock is an OS lock (`fcntl.flock`) on an open file, so a
run that crashes or is killed releases it at once: there is no stale lock to delete by hand.
Within one process the lock is re-entrant (the benchmark holds it around `train`, which takes
it again). POSIX only; elsewhere no lock is taken.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

from mrtpo.harness.config import ConfigError

LOCK_NAME = ".lock"

_held: dict[str, list] = {}  # resolved run dir -> [file object, depth], this process's locks
_guard = threading.Lock()


class RunDirLocked(ConfigError):
    """Another process holds the run directory."""


class RunLock:
    """`with RunLock(run_dir):` holds `<run_dir>/.lock` (creating the directory), or raises
    RunDirLocked naming the process that holds it."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self._key = str(self.run_dir.resolve())
        self._mine = False

    def acquire(self) -> "RunLock":
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock
            return self
        with _guard:
            if self._key in _held:  # re-entrant within this process
                _held[self._key][1] += 1
                self._mine = True
                return self
            self.run_dir.mkdir(parents=True, exist_ok=True)
            f = open(self.path, "a+", encoding="utf-8")
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.seek(0)
                holder = f.read().strip()
                f.close()
                raise RunDirLocked(f"{self.run_dir} is in use by another run ({describe(holder)}); "
                                   "wait for it to finish, or choose another --output-dir / "
                                   "--run-name") from None
            f.seek(0)
            f.truncate()
            f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                                "command": " ".join(sys.argv)}) + "\n")
            f.flush()
            _held[self._key] = [f, 1]
            self._mine = True
        return self

    def release(self) -> None:
        with _guard:
            if not self._mine or self._key not in _held:
                return
            self._mine = False
            entry = _held[self._key]
            entry[1] -= 1
            if entry[1] == 0:
                del _held[self._key]
                entry[0].close()  # closing the file releases the flock

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def describe(holder: str) -> str:
    """The lock file's holder record in words."""
    try:
        h = json.loads(holder)
        return f"pid {h['pid']} on {h['host']}, started {h['started']}: {h['command']}"
    except (ValueError, KeyError, TypeError):
        return "a process that has not written its details yet" if not holder else holder[:200]
