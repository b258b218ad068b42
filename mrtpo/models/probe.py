"""Where a policy starts: sample it on a task's prompts (P0, as the trainer does) and score.

Used to check the warm start (each reward well above 0 and well below 1), and by the tests
and benchmarks. Sampling goes through the trainer's own rollout code, so a probe sees
exactly what the first training step sees.
"""
from __future__ import annotations

import math
from typing import Sequence

from mrtpo.tasks.base import Example, Task


def reward_means(model, tokenizer, task: Task, examples: Sequence[Example], num_generations: int = 4,
                 max_new_tokens: int = 128, temperature: float = 1.0, batch_prompts: int = 8,
                 seed: int = 0) -> dict[str, float]:
    """Mean score per reward name over `num_generations` samples of each example (rewards
    that do not apply to an example are left out of its mean, as in the trainer's metrics),
    plus "reward": the mean over examples of the sum of the weighted rewards."""
    import torch

    from mrtpo.harness.policy import Policy
    from mrtpo.harness.rollout import sample

    torch.manual_seed(seed)
    policy = Policy(model, tokenizer, next(model.parameters()).device, next(model.parameters()).dtype, lora=False)
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    totals = []
    for i in range(0, len(examples), batch_prompts):
        chunk = list(examples[i: i + batch_prompts])
        rollout = sample(policy, task, chunk, num_generations, temperature=temperature,
                         max_new_tokens=max_new_tokens)
        for ex, response in zip(rollout.examples, rollout.responses):
            total = 0.0
            for reward, verdict in zip(task.rewards(ex), task.score(ex, response)):
                sums[reward.name] = sums.get(reward.name, 0.0) + verdict.score
                counts[reward.name] = counts.get(reward.name, 0) + 1
                total += reward.weight * verdict.score
            totals.append(total)
    out = {name: sums[name] / counts[name] for name in sorted(sums)}
    out["reward"] = sum(totals) / len(totals) if totals else math.nan
    return out
