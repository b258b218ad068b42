"""MRTPO's replay step in the trainer: contexts for each completion, JS distances per reward.

Each completion is replayed (teacher-forced, its sampled ids exactly) under P_all and each
P_without_k by `mrtpo.replay.distances`; the result, in each row's own reward order, is laid
out on the batch's reward columns (`Scored.names`) so that `advantages.place` can weight
each reward's credit. A column a row does not have stays 0 (its credit is 0 there anyway).

With `credit`, a (completion, reward) pair whose credit is exactly 0 is not replayed (its q
stays 0): the estimators give exactly 0 to a reward that a group scored alike (and SAW
weights a saturated reward 0), and a weight times zero credit adds nothing to the token
advantage, so `advantages.place` gives the same result (up to float rounding: the replay
batches other rows) and the replay runs fewer contexts. Nothing left to replay: no forward.
"""
from __future__ import annotations

import torch

from mrtpo.contexts import block_texts, build_item, model_positions, only_rewards


def blocks_for(task, rollout, scored) -> list[list[str]]:
    """Each completion's block texts, in its reward order (for the completions log)."""
    return [block_texts(task, ex, v) for ex, v in zip(rollout.examples, scored.verdicts)]


@torch.no_grad()
def replay_distances(policy, task, rollout, scored, temperature: float,
                     credit=None) -> tuple[torch.Tensor, list[list[str]]]:
    """(q [N, K, T] on the batch's reward columns, blocks per completion). `credit`
    (advantages.Credit on the same rows and columns): skip the pairs whose credit is 0."""
    from mrtpo.replay import replay_onto_columns

    positions = model_positions(policy.model)  # blocks are cut so that P_all + response fits
    items = [build_item(task, policy.tokenizer, ex, ids, v, positions)
             for ex, ids, v in zip(rollout.examples, rollout.response_ids, scored.verdicts)]
    if credit is not None:
        items = [only_rewards(item, [bool(credit.per_reward[i, scored.column(name)] != 0) for name in names])
                 for i, (item, names) in enumerate(zip(items, scored.row_names))]
    shape = (len(items), len(scored.names), max(1, rollout.max_length))
    if all(ctx == item.context_ids[0] for item in items for ctx in item.context_ids[1:]):
        return torch.zeros(shape), [item.blocks for item in items]  # every pair has zero credit
    columns = [[scored.column(name) for name in names] for names in scored.row_names]
    was_training = policy.model.training
    policy.model.eval()
    try:
        with policy.merged() as model:  # LoRA folded into fp32 weights: one product per projection
            q = replay_onto_columns(model, items, columns, shape, temperature=temperature)  # [N, K, T]
    finally:
        policy.model.train(was_training)
    return q, [item.blocks for item in items]
