"""Scoring: every reward of the task on every completion -> scores `[N, K]` and verdicts.

Columns are the rewards' names, in the order first seen in the batch, so column k means the
same reward on every row (instruction following has one reward per constraint and K varies
per prompt: a reward that does not apply to a row is NaN there). SAW's batch statistics and
the `rewards/<name>/...` metrics rely on that.

Verifiers run in a pool of forked worker processes (`workers > 0`, `_ForkPool`): one job per
(completion, reward), each with a deadline (`timeout` seconds, enforced inside the worker
with an interval timer, and by the parent per job as a backstop, which then kills and
replaces that worker). A reward that runs out of time scores its floor with feedback
"timed out after ...". A worker that dies while verifying (`os._exit`, `SystemExit`, a
segfault, the OOM killer) is seen at once (its pipe closes): the job scores the floor with
feedback saying the verifier died, and a fresh worker takes its place. Forking lets workers
use the task object as it is (closures, test-defined tasks), with no pickling of verify
functions.

A reward that raises, returns something other than one `Verdict`, or a non-finite score is a
programming error (bad *model output* must score the floor instead): it stops the run with a
`RewardError` that names the reward, the example and the response.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import wait

import torch

from mrtpo.tasks.base import Example, Reward, Task, Verdict
from mrtpo.tasks.contract import RewardError, _where, check_verdict, checked_rewards


#: the feedback of a reward that ran past the scorer's deadline (`Scorer.score` writes it)
TIMEOUT_FEEDBACK = "timed out after {timeout:g} s"


def timed_out(verdict: Verdict) -> bool:
    """Whether `verdict` says its reward ran out of time: the scorer's per-job deadline, or a
    verifier's own (an SQL query past its limit, mrtpo.verifiers.sql.TIMEOUT_ERROR, which
    text2sql's `executes` quotes after "SQLite error: "). Counted by the
    `rewards/<name>/timeout_frac` metric."""
    from mrtpo.verifiers.sql_sandbox import TIMEOUT_ERROR

    text = verdict.feedback or ""
    return (text.startswith(TIMEOUT_FEEDBACK.split("{")[0])
            or TIMEOUT_ERROR.split("{")[0] in text)


@dataclass
class Scored:
    names: list[str]  # K reward columns
    scores: torch.Tensor  # [N, K] NaN where the reward does not apply to the row
    weights: torch.Tensor  # [K] reward weights (task's, or overridden)
    floors: torch.Tensor  # [K] lowest possible score per reward
    row_names: list[list[str]]  # N: each row's reward names in task order
    verdicts: list[list[Verdict]]  # N: each row's verdicts in task order
    seconds: dict[str, float]  # total verify time per reward name (worker time)

    def column(self, name: str) -> int:
        return self.names.index(name)


def reward_names(rewards: list[Reward]) -> list[str]:
    """Names of an example's rewards, made unique with '#2', '#3'... for repeats."""
    seen: dict[str, int] = {}
    out = []
    for r in rewards:
        seen[r.name] = seen.get(r.name, 0) + 1
        out.append(r.name if seen[r.name] == 1 else f"{r.name}#{seen[r.name]}")
    return out


# --- worker side ------------------------------------------------------------------------------
_TASK: Task | None = None  # set in the parent before forking, inherited by the workers


class _Deadline(BaseException):
    """The per-job timer ran out. A BaseException (like KeyboardInterrupt), so no `except
    Exception` in a verifier or a format's parser can catch it and report something else."""


def _on_alarm(signum, frame):
    raise _Deadline()


def _run_job(example: Example, response: str, index: int, timeout: float | None):
    """Run reward `index` of `example` on `response`: ('ok', verdict, s) / ('timeout', ...) / ('error', ...)."""
    reward = _TASK.rewards(example)[index]
    start = time.perf_counter()
    use_timer = timeout is not None and hasattr(signal, "setitimer")
    if use_timer:
        signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        result = reward.verify(example, response)
    except _Deadline:
        return ("timeout", None, time.perf_counter() - start)
    except Exception as exc:  # reported to the parent, which stops the run with the name
        return ("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}", time.perf_counter() - start)
    except SystemExit as exc:  # the verifier tried to end its process: it died, as in a worker
        return ("died", f"the verifier died: it raised SystemExit({exc.code!r}) while verifying "
                        "this response", time.perf_counter() - start)
    finally:
        if use_timer:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return ("ok", result, time.perf_counter() - start)


def _serve(conn, inherited=()) -> None:
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
        result = _run_job(*job)
        try:
            conn.send(result)
        except Exception as exc:  # e.g. a verdict that cannot be pickled
            conn.send(("error", f"its result could not be returned from the worker: "
                                f"{type(exc).__name__}: {exc}", result[2]))


def _died_message(exitcode: int | None) -> str:
    """Feedback for a job whose worker died: how it died, in words."""
    if exitcode is not None and exitcode < 0:
        try:
            how = f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"was killed by signal {-exitcode}"
        if -exitcode == signal.SIGKILL:
            how += " (out of memory, or killed from outside)"
    else:
        how = f"exited with code {exitcode}"
    return f"the verifier died: its worker process {how} while verifying this response"


class _ForkPool:
    """Forked worker processes that run `_run_job`, one job each at a time.

    Unlike `multiprocessing.Pool` (which loses the job of a worker that dies and lets its
    caller wait for it forever), each worker here has its own pipe: a death shows at once as
    end-of-file, the job gets ("died", how, seconds) and a fresh worker is forked for it. A
    worker that died before it took its job (killed while idle) is replaced and the job runs
    again, since the job is not to blame.
    """

    def __init__(self, size: int):
        self.ctx = mp.get_context("fork")
        self.procs: list = []
        self.conns: list = []
        self.started: set[int] = set()  # busy slots whose worker said it took its job
        for _ in range(size):
            self._add()

    def _add(self, slot: int | None = None) -> None:
        parent, child = self.ctx.Pipe()
        others = [c for i, c in enumerate(self.conns) if i != slot]  # the old one of `slot` is closed
        proc = self.ctx.Process(target=_serve, args=(child, [parent, *others]), daemon=True)
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
        """Results of `_run_job(*job)` for each job, in order; see the class docstring."""
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
                            out[i] = ("died", "the verifier died: its worker process died three "
                                      "times before it could take this job", 0.0)
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
        return ("died", _died_message(exitcode), seconds)

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
class Scorer:
    """Scores completions with a task's rewards; owns the verifier pool. Use as a context manager."""

    def __init__(self, task: Task, workers: int = 2, timeout: float = 30.0,
                 weights: dict[str, float] | None = None):
        self.task = task
        self.timeout = timeout
        self.weight_overrides = dict(weights or {})
        self.workers = workers if "fork" in mp.get_all_start_methods() else 0
        self._pool = None

    def start(self) -> "Scorer":
        """Fork the worker pool now: best before the model is loaded (a small process to copy,
        no GPU state or compute threads yet). Called lazily otherwise."""
        if self.workers > 0:
            self._get_pool()
        return self

    def __enter__(self) -> "Scorer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def _get_pool(self):
        global _TASK
        if self._pool is None:
            _TASK = self.task
            self._pool = _ForkPool(self.workers)
        return self._pool

    def score(self, examples: list[Example], responses: list[str]) -> Scored:
        if len(examples) != len(responses):
            raise ValueError(f"{len(examples)} examples for {len(responses)} responses")
        rewards = [checked_rewards(self.task, ex) for ex in examples]  # N lists
        jobs = [(i, k) for i, rs in enumerate(rewards) for k in range(len(rs))]
        results = self._run(jobs, examples, responses)
        verdicts: list[list[Verdict]] = [[None] * len(rs) for rs in rewards]  # type: ignore[list-item]
        seconds: dict[str, float] = {}
        for (i, k), (status, value, secs) in zip(jobs, results):
            reward = rewards[i][k]
            seconds[reward.name] = seconds.get(reward.name, 0.0) + secs
            if status == "error":
                raise RewardError(f"{_where(reward.name, examples[i], self.task, 'raised')} with the "
                                  f"response {responses[i][:80]!r}; verify must never raise on "
                                  f"model output (score the floor and say why): {value}")
            if status == "timeout":
                value = Verdict(float(reward.floor), TIMEOUT_FEEDBACK.format(timeout=self.timeout))
            elif status == "died":
                value = Verdict(float(reward.floor), value)
            verdicts[i][k] = check_verdict(reward, value, examples[i], responses[i], self.task)
        return self._table(rewards, verdicts, seconds)

    def _run(self, jobs, examples, responses) -> list[tuple]:
        if self.workers == 0:
            global _TASK
            _TASK = self.task
            return [_run_job(examples[i], responses[i], k, None) for i, k in jobs]
        # backstop: every job has its own timer inside the worker; one blocked in C code that the
        # timer cannot interrupt is killed (with its worker) a little after that
        hard = None if self.timeout is None else self.timeout + max(5.0, 0.5 * self.timeout)
        return self._get_pool().run([(examples[i], responses[i], k, self.timeout) for i, k in jobs],
                                    hard)

    def _table(self, rewards: list[list[Reward]], verdicts, seconds) -> Scored:
        row_names = [reward_names(rs) for rs in rewards]
        names: list[str] = []
        weights: dict[str, float] = {}
        floors: dict[str, float] = {}
        for rs, ns in zip(rewards, row_names):
            for r, name in zip(rs, ns):
                if name not in weights:
                    names.append(name)
                    weights[name] = float(self.weight_overrides.get(name, self.weight_overrides.get(r.name, r.weight)))
                    floors[name] = float(r.floor)
        scores = torch.full((len(rewards), len(names)), float("nan"))  # [N, K]
        for i, (ns, vs) in enumerate(zip(row_names, verdicts)):
            for name, v in zip(ns, vs):
                scores[i, names.index(name)] = float(v.score)
        return Scored(names, scores, torch.tensor([weights[n] for n in names]),
                      torch.tensor([floors[n] for n in names]), row_names, verdicts, seconds)
