"""The full-forward replay, the reference the shared-prefix method is tested against: one full
forward per distinct context.

As RL trainers compute log-probabilities: each (context + response) row through the whole
model, `logits_to_keep` covering the response positions, then the JS step per item.
"""
from __future__ import annotations

import torch

from mrtpo.replay.js import fill
from mrtpo.replay.planning import ReplayGroup, item_batches
from mrtpo.replay.plumbing import PaddingSide, pack


def replay_full(model, items, group: ReplayGroup, plans, q: torch.Tensor, temperature: float,
                chunk_tokens: int, batch_tokens: int, side: PaddingSide) -> None:
    """q[n] for the items of `group` (its prefix is empty: every row is a whole context plus
    the response), rows padded on `side`, forwards of about `batch_tokens` padded tokens."""
    device = q.device
    for batch in item_batches(group, batch_tokens):
        ids, mask, pos, offsets = pack([r[2] for r in batch], side, device)  # [R, S] each
        starts = response_starts(batch, offsets, items)
        first_col = min(starts)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False,
                       logits_to_keep=ids.shape[1] - first_col).logits  # [R, keep, V]
        for n, first, count in per_item(batch):
            t_len = len(items[n].response_ids)
            sel = torch.stack([logits[first + j, starts[first + j] - first_col:starts[first + j] - first_col + t_len]
                               for j in range(count)])  # [C, T, V]
            fill(q, n, plans[n], sel, temperature, rows=max(1, chunk_tokens // count))


def response_starts(batch, offsets, items) -> list[int]:
    """Column of each row's position that predicts its first response token."""
    return [off + len(ids) - len(items[n].response_ids) - 1 for off, (n, _, ids) in zip(offsets, batch)]


def per_item(batch):
    """(item, first row, number of rows) for the consecutive rows of each item in a batch."""
    out, start = [], 0
    while start < len(batch):
        n, end = batch[start][0], start
        while end < len(batch) and batch[end][0] == n:
            end += 1
        out.append((n, start, end - start))
        start = end
    return out
