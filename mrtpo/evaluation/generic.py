"""Metrics for any task without a benchmark of its own (plugins): each reward's mean.

Every response goes through the task's own rewards, each checked against the contract as in
training (`mrtpo.tasks.contract`: a reward that raises or returns no finite Verdict stops the
evaluation with a RewardError naming it); the summary gives
`rewards/<name>/mean` over the examples a reward applies to (names as TRL logs them) and
`reward`, the mean weighted sum, so a plugin task is evaluated the way it is trained.
"""
from __future__ import annotations

from typing import Sequence

from mrtpo.evaluation.report import EvalReport, mean
from mrtpo.tasks.base import Example, Task
from mrtpo.tasks.contract import checked_rewards, checked_verify


def evaluate(task: Task, examples: Sequence[Example], responses: Sequence[str]) -> EvalReport:
    per_reward: dict[str, list[float]] = {}
    totals, records = [], []
    for ex, response in zip(examples, responses):
        rewards = checked_rewards(task, ex)  # the contract, checked as training checks it
        verdicts = [checked_verify(task, r, ex, response) for r in rewards]
        for r, v in zip(rewards, verdicts):
            per_reward.setdefault(r.name, []).append(v.score)
        totals.append(sum(r.weight * v.score for r, v in zip(rewards, verdicts)))
        records.append({
            "id": ex.id, "prompt": ex.prompt, "response": response, "reward": totals[-1],
            "rewards": {r.name: v.score for r, v in zip(rewards, verdicts)},
            "feedback": {r.name: v.feedback for r, v in zip(rewards, verdicts) if v.feedback},
        })
    metrics = {"reward": mean(totals)}
    metrics.update({f"rewards/{name}/mean": mean(s) for name, s in per_reward.items()})
    groups = {name: {"mean": mean(s), "n": len(s)} for name, s in per_reward.items()}
    return EvalReport(task.name, len(records), metrics, groups, records)


def per_example(records: Sequence[dict]) -> dict[str, list[float | None]]:
    """Each metric's value on each example (`evaluate`'s records, in order): `reward` (the
    weighted sum) and each reward's score, None where that reward does not apply to the
    example; each metric is the mean of its list's numbers."""
    names = list(dict.fromkeys(name for r in records for name in r["rewards"]))
    out: dict[str, list[float | None]] = {"reward": [float(r["reward"]) for r in records]}
    out.update({f"rewards/{name}/mean": [r["rewards"].get(name) for r in records] for name in names})
    return out
