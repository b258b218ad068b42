"""Scoring: every reward of the task on every completion -> scores `[N, K]` and verdicts.

Columns are the rewards' names, in the order first seen in the batch, so column k means the
same reward on every row (instruction following has one reward per constraint and K varies
per prompt: a reward that does not apply to a row is NaN there). SAW's batch statistics and
the `rewards/<name>/...` metrics rely on that.

Verifiers run in the task's runner (mrtpo.tasks.runner, `workers > 0`): one job per
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

from dataclasses import dataclass

import torch

from mrtpo.tasks.base import Example, Reward, Task, Verdict
from mrtpo.tasks.contract import RewardError, _raised, _where, check_verdict, checked_rewards
from mrtpo.tasks.runner import TIMEOUT_FEEDBACK, TaskRunner, _ForkPool  # noqa: F401 (re-exported)


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


# --- parent side ------------------------------------------------------------------------------
class Scorer:
    """Scores completions with a task's rewards; owns the task's runner (mrtpo.tasks.runner: the
    verifier workers and their deadline), which is the runner of all of the task's code while
    the scorer is open (the held-out measurement's and the blocks' too). Use as a context manager."""

    def __init__(self, task: Task, workers: int = 2, timeout: float = 30.0,
                 weights: dict[str, float] | None = None):
        self.task = task
        self.timeout = timeout
        self.weight_overrides = dict(weights or {})
        self.runner = TaskRunner(task, workers, timeout)
        self.workers = self.runner.workers

    def start(self) -> "Scorer":
        """Make the runner active and fork its workers now: best before the model is loaded (a
        small process to copy, no GPU state or compute threads yet)."""
        self.runner.start(fork=True)
        return self

    def __enter__(self) -> "Scorer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.runner.close()

    @property
    def _pool(self):  # the runner's worker pool (tests kill its workers)
        return self.runner._pool

    def score(self, examples: list[Example], responses: list[str]) -> Scored:
        if len(examples) != len(responses):
            raise ValueError(f"{len(examples)} examples for {len(responses)} responses")
        rewards = [checked_rewards(self.task, ex) for ex in examples]  # N lists
        jobs = [(i, k) for i, rs in enumerate(rewards) for k in range(len(rs))]
        results = self.runner.run([("verify", examples[i], responses[i], k) for i, k in jobs])
        verdicts: list[list[Verdict]] = [[None] * len(rs) for rs in rewards]  # type: ignore[list-item]
        seconds: dict[str, float] = {}
        for (i, k), (status, value, secs) in zip(jobs, results):
            reward = rewards[i][k]
            seconds[reward.name] = seconds.get(reward.name, 0.0) + secs
            if status == "error":
                raise RewardError(f"{_where(reward.name, examples[i], self.task, 'raised')} with the "
                                  f"response {responses[i][:80]!r}; verify must never raise on "
                                  f"model output (score the floor and say why): {_raised(value)}")
            if status == "timeout":
                value = Verdict(float(reward.floor), TIMEOUT_FEEDBACK.format(timeout=self.timeout))
            elif status == "died":  # said once per reward (timeouts: the loop's timeout warnings)
                self.runner.report_once(reward.name, "died", f"reward {reward.name!r} of task "
                                        f"{self.task.name!r}: the verifier died ({value}); it scores "
                                        f"its floor ({reward.floor:g}) where it does")
                value = Verdict(float(reward.floor), f"the verifier died: {value} while verifying "
                                "this response")
            verdicts[i][k] = check_verdict(reward, value, examples[i], responses[i], self.task)
        return self._table(rewards, verdicts, seconds)

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
