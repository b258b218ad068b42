"""Run many sandboxed SQLite queries in parallel worker processes, each under its own deadline.

Why processes: the deadline inside `execute` (a progress handler) covers SQLite's own work,
but a crash in C code, or a hang outside the VM, would take the caller down with it. Here
each query runs in a worker process; the dispatcher gives every query a hard deadline
(`timeout + hard_grace(timeout)`), kills a worker that passes it or dies, records a timeout
(or, for a death, an error) for that one query and starts a fresh worker. Other queries are
unaffected. This is what bounds a query whose time goes into SQLite function calls with no
progress check between them (hundreds of `x LIKE p` on a 1 MB value in one row), which the
in-process progress handler cannot interrupt. Each worker also caps SQLite's heap (`PRAGMA hard_heap_limit`,
WORKER_HEAP_BYTES), so a query that would fill memory fails with "out of memory" instead.

Workers are fresh interpreters (`python -m mrtpo.verifiers.sql_pool <fd_in> <fd_out>`),
not forks or multiprocessing spawns: a fork would copy a trainer's threads and GPU state,
and a spawn re-imports the caller's `__main__` (re-running an unguarded training script).
They import only the standard library and mrtpo.verifiers.sql_sandbox. POSIX only; elsewhere
`execute_many` runs the queries in-process.
"""
from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
import time
from collections import deque
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Sequence

from mrtpo.verifiers.sql_sandbox import (
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT,
    TIMEOUT_ERROR,
    ExecResult,
    execute,
)

_GRACE_S = 2.0  # least time on top of timeout: to open the file, pickle rows, be scheduled
WORKER_HEAP_BYTES = 1 << 30  # SQLite's heap per worker process (PRAGMA hard_heap_limit)


def hard_grace(timeout: float, grace: float = _GRACE_S) -> float:
    """Seconds a worker may run past `timeout` before it is killed: max(grace, timeout / 2)."""
    return max(grace, 0.5 * timeout)
_START_TIMEOUT_S = 30.0  # a worker that does not say hello by then is a setup error


class _Worker:
    """One worker process and the two pipe ends the dispatcher talks to it through."""

    def __init__(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # the directory holding `mrtpo/`
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mrtpo.verifiers.sql_pool", str(to_child_r), str(from_child_w)],
                pass_fds=(to_child_r, from_child_w), env=env, stdin=subprocess.DEVNULL,
                close_fds=True,
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.send_conn = Connection(to_child_w, readable=False)
        self.recv_conn = Connection(from_child_r, writable=False)

    def wait_ready(self) -> "_Worker":
        """Block until the worker says hello; a worker that cannot start is a setup error."""
        try:
            ok = self.recv_conn.poll(_START_TIMEOUT_S) and self.recv_conn.recv() == "ready"
        except (EOFError, OSError):
            ok = False
        if not ok:
            self.kill()
            raise RuntimeError(
                "an SQL worker process did not start: `python -m mrtpo.verifiers.sql_pool` "
                f"failed with {sys.executable}; check that mrtpo imports in a fresh interpreter")
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        for c in (self.send_conn, self.recv_conn):
            try:
                c.close()
            except OSError:
                pass

    def stop(self) -> None:
        try:
            self.send_conn.send(None)
            self.proc.wait(timeout=1.0)
        except Exception:
            pass
        self.kill()


class SQLPool:
    """A fixed number of worker processes that run `execute` jobs; see the module docstring.

    `run` is thread-safe (calls are serialised). Workers start on first use and are kept
    between calls; `close()` stops them (also done at interpreter exit).
    """

    def __init__(self, workers: int, grace: float = _GRACE_S) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.size = workers
        self.grace = grace  # hard deadline per query: timeout + hard_grace(timeout, grace)
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._running: dict[int, int] = {}  # job index -> worker pid, while it runs

    def running(self) -> dict[int, int]:
        """Job index -> pid of the worker running it now (for diagnostics and tests)."""
        return dict(self._running)

    def run(self, items: Sequence[tuple[str, str]], timeout: float = DEFAULT_TIMEOUT,
            max_rows: int = DEFAULT_MAX_ROWS) -> list[ExecResult]:
        """`execute(db, sql, timeout, max_rows)` for each `(db, sql)`, in parallel."""
        with self._lock:
            try:
                return self._run(items, timeout, max_rows)
            except BaseException:
                # interrupted (a caller's deadline, Ctrl-C): a worker still busy would later
                # answer the next call with this call's result, so stop those workers
                for w in self._workers:
                    if w.pid in self._running.values():
                        w.kill()
                self._workers = [w for w in self._workers if w.alive()]
                raise
            finally:
                self._running.clear()

    def _run(self, items, timeout, max_rows) -> list[ExecResult]:
        results: list[ExecResult | None] = [None] * len(items)
        todo = deque(range(len(items)))
        hard = timeout + hard_grace(timeout, self.grace)
        new = [_Worker() for _ in range(min(self.size, len(items)) - len(self._workers))]
        self._workers += [w.wait_ready() for w in new]  # started together, then greeted
        busy: dict[int, tuple[int, float]] = {}  # worker slot -> (job index, hard deadline)
        started: set[int] = set()  # busy slots whose worker said it began its job
        while todo or busy:
            for slot in range(len(self._workers)):
                if not todo:
                    break
                if slot in busy:
                    continue
                i = todo.popleft()
                db, sql = items[i]
                self._send(slot, (str(db), sql, timeout, max_rows))
                busy[slot] = (i, time.monotonic() + hard)
                self._running[i] = self._workers[slot].pid
            soonest = min(d for _, d in busy.values())
            # A worker's result pipe becomes readable when it answers or when it dies (EOF).
            wait([self._workers[s].recv_conn for s in busy],
                 timeout=max(0.0, soonest - time.monotonic()))
            for slot in list(busy):
                i, deadline = busy[slot]
                w = self._workers[slot]
                got, eof = self._receive(w)
                if got == "started":
                    started.add(slot)
                    got, eof = self._receive(w)
                if got is not None:
                    results[i] = got
                elif (eof or not w.alive()) and slot not in started:
                    # it died before taking the job (killed while idle): the query is not to
                    # blame, so it runs again on a fresh worker
                    self._replace(slot)
                    todo.appendleft(i)
                elif eof or not w.alive():
                    try:
                        w.proc.wait(timeout=1.0)
                    except subprocess.TimeoutExpired:
                        pass
                    results[i] = ExecResult(error=(
                        f"the SQLite worker process died (exit code {w.proc.returncode}) "
                        "while running this query"))
                    self._replace(slot)
                elif time.monotonic() > deadline:
                    results[i] = ExecResult(error=(
                        TIMEOUT_ERROR.format(timeout=timeout)
                        + " and its worker process was stopped"))
                    self._replace(slot)
                else:
                    continue
                del busy[slot]
                started.discard(slot)
                self._running.pop(i, None)
        return results  # type: ignore[return-value]

    @staticmethod
    def _receive(w: _Worker) -> tuple[ExecResult | None, bool]:
        """(the worker's answer if one is waiting, whether its pipe hit end-of-file)."""
        try:
            if w.recv_conn.poll():
                return w.recv_conn.recv(), False
        except (EOFError, OSError):
            return None, True
        return None, False

    def _send(self, slot: int, job: tuple) -> None:
        """Give `job` to the worker in `slot`; one that died while idle (the OOM killer) is
        replaced first, or when the send finds its pipe closed."""
        if not self._workers[slot].alive():
            self._replace(slot)
        try:
            self._workers[slot].send_conn.send(job)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            self._replace(slot)
            self._workers[slot].send_conn.send(job)

    def _replace(self, slot: int) -> None:
        self._workers[slot].kill()
        self._workers[slot] = _Worker().wait_ready()

    def close(self) -> None:
        with self._lock:
            for w in self._workers:
                w.stop()
            self._workers.clear()


_shared: dict[int, SQLPool] = {}
_shared_pid = os.getpid()  # pools belong to the process that started them (see shared_pool)
_shared_lock = threading.Lock()


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def shared_pool(workers: int | None = None) -> SQLPool:
    """The process-wide pool with `workers` processes (default `min(4, cpu_count)`)."""
    global _shared_pid
    n = workers or default_workers()
    with _shared_lock:
        if _shared_pid != os.getpid():
            # a forked child (a trainer's scoring pool): the inherited pools talk to the
            # parent's workers, so start afresh without touching them
            _shared.clear()
            _shared_pid = os.getpid()
        if n not in _shared:
            _shared[n] = SQLPool(n)
        return _shared[n]


def execute_many(items: Sequence[tuple[str, str]], timeout: float = DEFAULT_TIMEOUT,
                 max_rows: int = DEFAULT_MAX_ROWS, workers: int | None = None) -> list[ExecResult]:
    """`execute` for each `(db_path, sql)`: in the shared pool, or in-process with workers=0."""
    if not items:
        return []
    if workers == 0 or os.name != "posix":
        return [execute(db, sql, timeout, max_rows) for db, sql in items]
    return shared_pool(workers).run(items, timeout, max_rows)


@atexit.register
def _close_shared() -> None:
    if _shared_pid == os.getpid():
        for pool in list(_shared.values()):
            pool.close()


def _serve(fd_in: int, fd_out: int) -> None:
    """Worker loop: receive `(db, sql, timeout, max_rows)`, send "started", then an ExecResult."""
    import sqlite3

    recv = Connection(fd_in, writable=False)
    send = Connection(fd_out, readable=False)
    limit = sqlite3.connect(":memory:")  # the heap limit is process-wide: one pragma sets it
    limit.execute(f"PRAGMA hard_heap_limit={WORKER_HEAP_BYTES}")
    limit.close()
    send.send("ready")
    while True:
        try:
            job = recv.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        db, sql, timeout, max_rows = job
        send.send("started")  # so a death before this point is not blamed on the query
        send.send(execute(db, sql, timeout, max_rows))


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))
