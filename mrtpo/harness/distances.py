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

from mrtpo.advantages import shuffle_within
from mrtpo.contexts import block_texts, build_item, model_positions, only_rewards
from mrtpo.harness.errors import ConfigError
from mrtpo.spans import spans_token_mask, token_offsets

#: where MRTPO's token weights come from (`--mrtpo-weights`): the replay's distances, the
#: same distances shuffled within each response (a control: placement removed, weight
#: distribution kept), or the task's own reward spans (an oracle control: `Task.reward_spans`)
WEIGHT_SOURCES = ("replay", "shuffled", "spans")


def token_distances(source: str, policy, task, rollout, scored, temperature: float, credit=None,
                    seed: int = 0) -> tuple[torch.Tensor, list[list[str]] | None]:
    """(q [N, K, T] on the batch's reward columns, blocks per completion or None) from
    `source` (one of WEIGHT_SOURCES); `advantages.place` turns q into token weights.
    `seed` draws the shuffle (the loop passes one per step, so a resumed run draws the same)."""
    if source == "spans":
        return span_distances(policy.tokenizer, task, rollout, scored), None
    q, blocks = replay_distances(policy, task, rollout, scored, temperature, credit=credit)  # [N, K, T]
    if source == "shuffled":
        q = shuffle_within(q, rollout.response_mask(), torch.Generator().manual_seed(seed))
    elif source != "replay":
        raise ConfigError(f"--mrtpo-weights must be one of {', '.join(WEIGHT_SOURCES)}, got {source!r}")
    return q, blocks


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


def span_distances(tokenizer, task, rollout, scored) -> torch.Tensor:
    """q [N, K, T]: 1 on the tokens of each reward's spans (`task.reward_spans`), 0 elsewhere;
    no forward pass. A token that decodes to nothing (the end of turn) is the format's; a
    reward with no spans on a response gets 0 there, hence weight 1 on every token."""
    q = torch.zeros(len(rollout.response_ids), len(scored.names), max(1, rollout.max_length))  # [N, K, T]
    for i, (ex, ids, text) in enumerate(zip(rollout.examples, rollout.response_ids, rollout.responses)):
        spans = task.reward_spans(ex, text)
        if spans is None:
            raise ConfigError(f"--mrtpo-weights spans: task {task.name!r} cannot say which tokens each "
                              "reward is about (it does not override Task.reward_spans); use "
                              "--mrtpo-weights replay or shuffled, or a task that does (toolcall)")
        offsets = token_offsets(tokenizer, ids)
        for name, ranges in spans.items():
            if name not in scored.names:
                continue
            hit = spans_token_mask(offsets, ranges)  # [T_i]
            if name == "format":
                hit = [h or a == b for h, (a, b) in zip(hit, offsets)]
            q[i, scored.column(name), :len(hit)] = torch.tensor(hit, dtype=torch.float32)
    return q
