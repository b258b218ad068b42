"""One process at a time per run directory: an exclusive lock on `<run>/.lock`.

Two runs writing one directory interleave their steps in metrics.jsonl and overwrite each
other's checkpoints, so `train` (and the learning benchmark) take this lock first and a second
run is refused with the holder named: its pid, host, start time and command line, which the
holder writes into the lock file. The lock is an OS lock (`fcntl.flock`) on an open file, so a
run that crashes or is killed releases it at once: there is no stale lock to delete by hand. A
forked child (the verifier workers) would share that open file and keep the lock after the run
died, so every fork closes its copy (`os.register_at_fork`); the parent's lock is untouched.
Within one process the lock is re-entrant (the benchmark holds it around `train`, which takes
it again). POSIX only; elsewhere no lock is taken.

The lock file is opened without following a link (`O_NOFOLLOW`) and must be a regular file
with one name: a `.lock` that is a symbolic link, a hard link to another file, a directory or
a device is refused with a message naming it, never truncated (mrtpo.harness.run.files). A run
directory that cannot be created (`--output-dir` names a file, or a place that cannot be
written) is refused the same way.
"""
from __future__ import annotations

import errno
import json
import os
import socket
import stat
import sys
import threading
import time
from pathlib import Path

from mrtpo.harness.config import ConfigError
from mrtpo.harness.run.files import RunFileError, check_entry
from mrtpo.textio import unwritable

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
            f = self._open()
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

    def _open(self):
        """The lock file, opened for reading and writing (created if absent) without
        following a link; RunFileError if it cannot be, or is not a plain file of its own."""
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunFileError(f"cannot use {self.run_dir} as the run directory: "
                               f"{unwritable(self.run_dir, exc, directory=True)}; choose another "
                               "--output-dir / --run-name") from None
        check_entry(self.path)  # a link or a directory: refused, naming it
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except OSError as exc:  # ELOOP: a link planted since the check
            if exc.errno == errno.ELOOP:
                check_entry(self.path)
            raise RunFileError(f"cannot open the run's lock file {self.path}: "
                               f"{unwritable(self.path, exc)}; choose another --output-dir") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            what = "has other names (a hard link)" if stat.S_ISREG(info.st_mode) else "is not a regular file"
            raise RunFileError(f"{self.path} {what}; mrtpo rewrites this file, which would change "
                               "every file it is linked to. Remove it (a new one is made), or choose "
                               "another --output-dir")
        return os.fdopen(fd, "r+", encoding="utf-8", errors="replace")

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


def _forget_in_child() -> None:
    """After a fork, in the child: close this process's copies of the lock files (closing a
    copy never releases the parent's flock; LOCK_UN here would). Without the guard: a thread
    of the parent may have held it at the fork."""
    for f, _ in list(_held.values()):
        try:
            f.close()
        except OSError:
            pass
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def describe(holder: str) -> str:
    """The lock file's holder record in words."""
    try:
        h = json.loads(holder)
        return f"pid {h['pid']} on {h['host']}, started {h['started']}: {h['command']}"
    except (ValueError, KeyError, TypeError):
        return "a process that has not written its details yet" if not holder else holder[:200]
