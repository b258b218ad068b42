"""Metrics for any task without a benchmark of its own (plugins): each reward's mean.

Every response goes through the task's own rewards (`task.score`); the summary gives
`rewards/<name>/mean` over the examples a reward applies to (names as TRL logs them) and
`reward`, the mean weighted sum, so a plugin task is evaluated the way it is trained.
"""
from __future__ import annotations

from typing import Sequence

from mrtpo.evaluation.report import EvalReport, mean
from mrtpo.tasks.base import Example, Task


def evaluate(task: Task, examples: Sequence[Example], responses: Sequence[str]) -> EvalReport:
    per_reward: dict[str, list[float]] = {}
    totals, records = [], []
    for ex, response in zip(examples, responses):
        rewards = task.rewards(ex)
        verdicts = task.score(ex, response)
        if len(verdicts) != len(rewards):
            raise RuntimeError(f"task {task.name!r}: {len(verdicts)} verdicts for {len(rewards)} "
                               f"rewards on example {ex.id!r}")
        for r, v in zip(rewards, verdicts):
            per_reward.setdefault(r.name, []).append(v.score)
        totals.append(sum(r.weight * v.score for r, v in zip(rewards, verdicts)))
        records.append({
            "id": ex.id, "prompt": ex.prompt, "response": response,
            "rewards": {r.name: v.score for r, v in zip(rewards, verdicts)},
            "feedback": {r.name: v.feedback for r, v in zip(rewards, verdicts) if v.feedback},
        })
    metrics = {"reward": mean(totals)}
    metrics.update({f"rewards/{name}/mean": mean(s) for name, s in per_reward.items()})
    groups = {name: {"mean": mean(s), "n": len(s)} for name, s in per_reward.items()}
    return EvalReport(task.name, len(records), metrics, groups, records)
