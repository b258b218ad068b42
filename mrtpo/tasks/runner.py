"""The one way to run a task's code: verifiers, block builders and `reference`, in a worker
process, under a deadline, with a call that hangs or dies turned into something a command can
go on with.

A task's code is the user's (a plugin's): it may loop for ever, sleep, call `os._exit`, print
megabytes. Every command that calls it (training's scoring, the held-out measurement, `eval`,
`blocks lint` and `preview`, `credit`, `probe`) runs it through a `TaskRunner`:

- each call is a job for a forked worker process (`_ForkPool`), with a deadline enforced in
  the worker by an interval timer and by the parent as a backstop (it kills and replaces a
  worker stuck in C code);
- a worker that dies while running a job (`os._exit`, `SystemExit`, a segfault, the OOM
  killer) is seen at once (its pipe closes) and replaced;
- a verifier that runs out of time or dies scores its reward's floor, with feedback saying why
  ("timed out after 30 s", "the verifier died: ..."), and the runner says so in one line on
  stderr, once per reward and kind of failure; a block builder or `reference` that does scores
  nothing: the call raises `TaskCodeFailure`, which the contract turns into a message naming
  the task, reward and example (the lint reports it as a finding);
- what task code prints in a worker goes to stderr, so `--json` output stays pure JSON;
- an exception raised by task code comes back as itself (the contract in
  mrtpo.tasks.contract decides what it means).

A runner is made active for its task (`with TaskRunner(task, ...)`, or `start()`/`close()`):
while it is, `rewards(task, example)` hands out Rewards whose `verify` and `block` run in its
workers, and `reference(task, example)` runs there too. The worker finds the Reward by its
index in `task.rewards(example)`, so the Rewards' own functions (closures, test-defined tasks)
need no pickling. With `workers=0`, or no active runner, task code runs in this process, with
no deadline (library use, tests of pure functions).

`run_bounded(fn, timeout)` runs one call of code that is only imported (a plugin's task
factory, for `mrtpo tasks ls`) in a child of its own, with the same deadline and death checks.
"""
from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import pickle
import signal
import sys
import time
import traceback
from multiprocessing.connection import wait
from typing import Any, Callable

from mrtpo.tasks.base import Example, Reward, Task, Verdict

#: the feedback of a reward that ran past the runner's deadline
TIMEOUT_FEEDBACK = "timed out after {timeout:g} s"
#: the default deadline of one call into task code, in seconds (`--verify-timeout`)
DEFAULT_TIMEOUT = 30.0


#: how the feedback of a verifier that died begins
DIED_FEEDBACK = "the verifier died: "


def failure(verdict: Any) -> str | None:
    """'timed out' or 'died' when `verdict` is the floor a runner gave a verifier that ran out of
    time or died (its feedback says so), else None."""
    text = getattr(verdict, "feedback", None)
    if not isinstance(text, str):
        return None
    if text.startswith(TIMEOUT_FEEDBACK.split("{")[0]):
        return "timed out"
    return "died" if text.startswith(DIED_FEEDBACK) else None


class TaskCodeFailure(RuntimeError):
    """A block builder or `reference` (or a task factory) ran past its deadline or killed its
    process; the message says which, in words."""


# --- worker side ------------------------------------------------------------------------------
class _Deadline(BaseException):
    """The per-job timer ran out. A BaseException (like KeyboardInterrupt), so no `except
    Exception` in a verifier or a format's parser can catch it and report something else."""


def _on_alarm(signum, frame):
    raise _Deadline()


def _call(task: Task, op: str, example: Example, arg: Any, k: int):
    """The task code a job names: reward k's `verify(example, arg)` or `block(example, arg)`,
    or `task.reference(example)`."""
    if op == "reference":
        return task.reference(example)
    reward = task.rewards(example)[k]
    return reward.verify(example, arg) if op == "verify" else reward.block(example, arg)


def _returnable(exc: BaseException) -> BaseException:
    """`exc` if it survives pickling (to be raised again in the parent as itself), else a
    RuntimeError with its type, text and traceback."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")


def _run_job(task: Task, job: tuple, timeout: float | None):
    """Run one job (op, example, arg, k) of `task`: ('ok', result, s), ('error', exception, s),
    ('timeout', None, s) or ('died', how, s)."""
    op, example, arg, k = job
    start = time.perf_counter()
    use_timer = timeout is not None and hasattr(signal, "setitimer")
    if use_timer:
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        result = _call(task, op, example, arg, k)
    except _Deadline:
        return ("timeout", None, time.perf_counter() - start)
    except Exception as exc:  # the caller decides what it means (the contract: a RewardError)
        return ("error", _returnable(exc), time.perf_counter() - start)
    except SystemExit as exc:  # task code tried to end its process: it died, as in a worker
        return ("died", f"it raised SystemExit({exc.code!r})", time.perf_counter() - start)
    finally:
        if use_timer:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return ("ok", result, time.perf_counter() - start)


def _quiet_stdout() -> None:
    """Point this process's standard output at its standard error: what task code prints must
    not reach a command's stdout (its `--json` document)."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    try:
        os.dup2(2, 1)
    except OSError:
        pass
    sys.stdout = sys.stderr


def _serve(task: Task, conn, inherited=()) -> None:
    """Worker loop (in a forked child): run each job received, send back its result.

    When the parent dies (killed, out of memory) the worker exits instead of waiting for
    ever (and keeping the run's files open): it closes `inherited` first, the parent's ends
    of the pool's pipes (its own among them) that the fork copied, so that it reads
    end-of-file once the parent is gone; and since another forked child may hold such an end
    too, it also looks every second whether its parent is still the one that forked it."""
    for c in inherited:
        c.close()
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _quiet_stdout()
    while True:
        try:
            while not conn.poll(1.0):
                if os.getppid() != parent:  # orphaned: re-parented to init or a subreaper
                    return
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        conn.send("started")  # so a death before this point is not blamed on the job
        result = _run_job(task, *job)
        try:
            conn.send(result)
        except Exception as exc:  # e.g. a verdict that cannot be pickled
            conn.send(("error", RuntimeError(f"its result could not be returned from the worker: "
                                             f"{type(exc).__name__}: {exc}"), result[2]))


def died_message(exitcode: int | None) -> str:
    """How a worker died, in words: 'its worker process exited with code 7'."""
    if exitcode is not None and exitcode < 0:
        try:
            how = f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"was killed by signal {-exitcode}"
        if -exitcode == signal.SIGKILL:
            how += " (out of memory, or killed from outside)"
    else:
        how = f"exited with code {exitcode}"
    return f"its worker process {how}"


class _ForkPool:
    """Forked worker processes that run `_run_job` for one task, one job each at a time.

    Unlike `multiprocessing.Pool` (which loses the job of a worker that dies and lets its
    caller wait for it forever), each worker here has its own pipe: a death shows at once as
    end-of-file, the job gets ("died", how, seconds) and a fresh worker is forked for it. A
    worker that died before it took its job (killed while idle) is replaced and the job runs
    again, since the job is not to blame.
    """

    def __init__(self, size: int, task: Task | None = None):
        self.ctx = mp.get_context("fork")
        self.task = task
        self.procs: list = []
        self.conns: list = []
        self.started: set[int] = set()  # busy slots whose worker said it took its job
        for _ in range(size):
            self._add()

    def _add(self, slot: int | None = None) -> None:
        parent, child = self.ctx.Pipe()
        others = [c for i, c in enumerate(self.conns) if i != slot]  # the old one of `slot` is closed
        proc = self.ctx.Process(target=_serve, args=(self.task, child, [parent, *others]), daemon=True)
        proc.start()
        child.close()  # so the parent's end reads EOF when the worker dies
        if slot is None:
            self.procs.append(proc)
            self.conns.append(parent)
        else:
            self.procs[slot], self.conns[slot] = proc, parent

    def _kill(self, slot: int) -> int | None:
        proc = self.procs[slot]
        if proc.is_alive():
            proc.kill()
        proc.join(5.0)
        self.conns[slot].close()
        return proc.exitcode

    def run(self, jobs: list[tuple], hard_timeout: float | None) -> list[tuple]:
        """Results of `_run_job(task, *job)` for each job, in order; see the class docstring."""
        out: list[tuple | None] = [None] * len(jobs)
        todo = list(range(len(jobs)))[::-1]
        busy: dict[int, tuple[int, float]] = {}  # slot -> (job index, start time)
        self.started = set()
        retries: dict[int, int] = {}
        try:
            while todo or busy:
                for slot in range(len(self.procs)):
                    if todo and slot not in busy:
                        i = todo.pop()
                        self._send(slot, jobs[i])
                        busy[slot] = (i, time.monotonic())
                limit = None if hard_timeout is None else max(
                    0.0, min(t for _, t in busy.values()) + hard_timeout - time.monotonic())
                wait([self.conns[s] for s in busy], timeout=limit)
                for slot in list(busy):
                    i, started = busy[slot]
                    result = self._collect(slot, started, hard_timeout)
                    if result == "retry":
                        retries[i] = retries.get(i, 0) + 1
                        if retries[i] > 2:  # workers die as soon as they start: say so
                            out[i] = ("died", "its worker process died three times before it could "
                                      "take this job", 0.0)
                        else:
                            todo.append(i)
                        del busy[slot]
                    elif result is not None:
                        out[i] = result
                        del busy[slot]
                        self.started.discard(slot)
        except BaseException:
            for slot in busy:  # a worker still busy would answer the next call with this one's result
                self._kill(slot)
                self._add(slot)
            raise
        return out  # type: ignore[return-value]

    def _send(self, slot: int, job: tuple) -> None:
        """Give `job` to the worker in `slot`, replacing it first if its pipe is closed."""
        try:
            self.conns[slot].send(job)
        except (BrokenPipeError, ConnectionResetError, OSError):
            self._kill(slot)
            self._add(slot)
            self.conns[slot].send(job)

    def _collect(self, slot: int, started: float, hard_timeout: float | None) -> tuple | None:
        """The result of the job in `slot` if it is over (answered, died, or overran), else None."""
        conn = self.conns[slot]
        try:
            # "started" then the result, each read as it comes: a message can arrive between two
            # polls, so every message is looked at before it is taken for the result
            while conn.poll():
                message = conn.recv()
                if slot not in self.started:
                    if message != "started":
                        raise EOFError("the worker answered out of turn")
                    self.started.add(slot)
                    continue
                return message
            overran = hard_timeout is not None and time.monotonic() - started > hard_timeout
            if self.procs[slot].is_alive() and not overran:
                return None
        except (EOFError, OSError):
            overran = False
        seconds = time.monotonic() - started
        exitcode = self._kill(slot)
        self._add(slot)
        if slot not in self.started and not overran:
            return "retry"
        self.started.discard(slot)
        if overran:
            return ("timeout", None, seconds)
        return ("died", died_message(exitcode), seconds)

    def close(self) -> None:
        for slot in range(len(self.procs)):
            try:
                self.conns[slot].send(None)
            except OSError:
                pass
        for slot in range(len(self.procs)):
            self.procs[slot].join(1.0)
            self._kill(slot)
        self.procs, self.conns = [], []


# --- parent side ------------------------------------------------------------------------------
_ACTIVE: dict[int, "TaskRunner"] = {}  # id(task) -> the runner its code runs through now


def hard_timeout(timeout: float | None) -> float | None:
    """The parent's backstop for a job with worker deadline `timeout`: a little later, for a
    job blocked in C code that the worker's timer cannot interrupt."""
    return None if timeout is None else timeout + max(5.0, 0.5 * timeout)


def _where(task: Task, example: Example, reward: str | None = None) -> str:
    what = f"reward {reward!r}" if reward is not None else "task.reference(example)"
    return (f"{what} on example {example.id!r} ({example.source or 'no source'}) of task "
            f"{getattr(task, 'name', '?')!r}")


class TaskRunner:
    """Runs one task's code in forked workers with a deadline per call (see the module doc).

    `workers=0` runs it in this process, with no deadline. `report(line)` is told, once per
    (reward, kind of failure), that a verifier timed out or died (default: a line on stderr).
    """

    def __init__(self, task: Task, workers: int = 1, timeout: float | None = DEFAULT_TIMEOUT,
                 report: Callable[[str], None] | None = None):
        self.task = task
        self.timeout = timeout
        self.workers = workers if "fork" in mp.get_all_start_methods() else 0
        self.report = report if report is not None else _to_stderr
        self.reported: set[tuple[str, str]] = set()
        self._pool: _ForkPool | None = None

    # lifetime: active for its task between start() and close()
    def start(self, fork: bool = False) -> "TaskRunner":
        """Make this the runner of its task's code; `fork` forks the workers now (best before a
        model is loaded: a small process to copy), else at the first call."""
        _ACTIVE[id(self.task)] = self
        if fork and self.workers > 0:
            self._get_pool()
        return self

    def __enter__(self) -> "TaskRunner":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if _ACTIVE.get(id(self.task)) is self:
            del _ACTIVE[id(self.task)]
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _get_pool(self) -> _ForkPool:
        if self._pool is None:
            self._pool = _ForkPool(self.workers, self.task)
        return self._pool

    # running jobs
    def run(self, jobs: list[tuple]) -> list[tuple]:
        """`_run_job` of each (op, example, arg, k), in the workers (in parallel) or in this process."""
        if self.workers == 0:
            return [_run_job(self.task, job, None) for job in jobs]
        return self._get_pool().run([(job, self.timeout) for job in jobs], hard_timeout(self.timeout))

    def verify(self, example: Example, response: str, k: int, reward: Reward):
        """Reward k's `verify(example, response)` as it returned, or the reward's floor with the
        reason when it timed out or died; what it raised is raised here."""
        return self.verdict(self.run([("verify", example, response, k)])[0], example, reward)

    def verdict(self, outcome: tuple, example: Example, reward: Reward):
        """What one verify job's outcome means: its result, the floor (timed out, died), or its
        exception raised again."""
        status, value, _ = outcome
        if status == "ok":
            return value
        if status == "error":
            raise value
        if status == "timeout":
            feedback = TIMEOUT_FEEDBACK.format(timeout=self.timeout)
            self.report_once(reward.name, "timeout", f"{_where(self.task, example, reward.name)} timed out "
                      f"after {self.timeout:g} s; it scores its floor ({reward.floor:g}) where it "
                      "does (--verify-timeout sets the deadline)")
        else:
            feedback = f"{DIED_FEEDBACK}{value} while verifying this response"
            self.report_once(reward.name, "died", f"{_where(self.task, example, reward.name)}: the verifier "
                      f"died ({value}); it scores its floor ({reward.floor:g}) where it does")
        return Verdict(float(reward.floor), feedback)

    def other(self, op: str, example: Example, arg: Any = None, k: int = 0, name: str | None = None):
        """A block builder's or `reference`'s result; TaskCodeFailure when it timed out or died,
        what it raised raised again."""
        status, value, _ = self.run([(op, example, arg, k)])[0]
        if status == "ok":
            return value
        if status == "error":
            raise value
        what = "task.reference(example)" if op == "reference" else f"the block builder of reward {name!r}"
        if status == "timeout":
            raise TaskCodeFailure(f"{what} ran past its {self.timeout:g} s deadline (--verify-timeout)")
        raise TaskCodeFailure(f"{what} died: {value}")

    def report_once(self, reward: str, kind: str, line: str) -> None:
        """`report(line)`, the first time `reward` fails in this `kind` of way."""
        if (reward, kind) not in self.reported:
            self.reported.add((reward, kind))
            self.report(line)


def _to_stderr(line: str) -> None:
    try:
        sys.stderr.write(f"warning: {line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def active(task: Task) -> TaskRunner | None:
    """The runner `task`'s code runs through now, if any (None: in this process, unbounded).
    Keyed by the object's id, and checked to be its own (a runner left open must not serve
    another task that a later object reuses the id of)."""
    runner = _ACTIVE.get(id(task))
    return runner if runner is not None and runner.task is task else None


class _Guarded:
    """A Reward's verify or block, run by the task's runner as job `op` for reward index `k`."""

    def __init__(self, runner: TaskRunner, op: str, k: int, reward: Reward):
        self.runner, self.op, self.k, self.reward = runner, op, k, reward

    def __call__(self, example: Example, arg):
        if self.op == "verify":
            return self.runner.verify(example, arg, self.k, self.reward)
        return self.runner.other("block", example, arg, self.k, self.reward.name)


def guarded(runner: TaskRunner | None, rewards) -> Any:
    """`rewards` (what `task.rewards(example)` returned) with each Reward's verify and block run
    by `runner` (as they are when there is none, or it runs in this process)."""
    if runner is None or runner.workers == 0 or not isinstance(rewards, (list, tuple)):
        return rewards
    return [dataclasses.replace(r, verify=_Guarded(runner, "verify", k, r), block=_Guarded(runner, "block", k, r))
            if isinstance(r, Reward) else r for k, r in enumerate(rewards)]


def rewards(task: Task, example: Example):
    """`task.rewards(example)` as it returned it, its Rewards' code run by the task's runner."""
    return guarded(active(task), task.rewards(example))


def reference(task: Task, example: Example):
    """`task.reference(example)`, run by the task's runner (TaskCodeFailure when it timed out
    or died)."""
    runner = active(task)
    if runner is None or runner.workers == 0:
        return task.reference(example)
    return runner.other("reference", example)


# --- code that is only imported: one call in a child of its own --------------------------------
def _child(fn: Callable[[], Any], conn) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _quiet_stdout()
    try:
        result = ("ok", fn())
    except BaseException as exc:  # noqa: BLE001 - everything is reported to the parent
        result = ("error", str(exc) or type(exc).__name__)  # as the call would have said it
    try:
        conn.send(result)
    except Exception as exc:
        conn.send(("error", f"its result could not be returned: {type(exc).__name__}: {exc}"))
    conn.close()
    os._exit(0)


def run_bounded(fn: Callable[[], Any], timeout: float) -> Any:
    """`fn()` run in a forked child with a deadline; its (picklable) result, else
    TaskCodeFailure with the message of what it raised, or saying that it ran past `timeout` s
    or how it died."""
    if "fork" not in mp.get_all_start_methods():
        return fn()
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fn, child), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(timeout):
            if proc.is_alive():
                raise TaskCodeFailure(f"it ran past its {timeout:g} s deadline")
        try:
            status, value = parent.recv()
        except (EOFError, OSError):
            proc.join(5.0)
            raise TaskCodeFailure(f"it died: {died_message(proc.exitcode).replace('its worker process', 'its process')}") from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5.0)
        parent.close()
    if status != "ok":
        raise TaskCodeFailure(value)
    return value
