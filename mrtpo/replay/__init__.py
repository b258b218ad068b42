"""Teacher-forced replay of sampled responses under their K+1 contexts -> per-token JS distances.

For each response n and reward k, `q[n, k, t]` is the Jensen-Shannon distance (base 2, in
[0, 1]) between the policy's next-token distributions at response token t under P_all and
under P_without_k (mrtpo.contexts). The distribution for response token t comes from the
position just before it (the last context token for t = 0). No generation happens: the
sampled ids are fed back exactly.

Two methods give the same numbers:

- full forward (`shared_prefix=False`, the reference): one full forward per distinct context, as RL
  trainers compute log-probabilities (`logits_to_keep` covering the response positions).
- shared prefix (default): all contexts of a prompt's responses begin with the same tokens
  (system prompt, P0, the response-independent blocks). Items are grouped by that prefix, the
  group's longest common token prefix is encoded once, and its KV cache is reused for every
  (response, context) suffix in batched forwards of the decoder. A context suffix that several
  responses share (blocks that do not depend on the response: a format rule, a reference,
  a tool schema) is itself encoded once on that cache, and those responses run on top of it,
  so per prompt each block's tokens go through the model once, not once per response; such
  suffixes that begin alike (toolcall: P_without_schema edits P0's tool list, so the prefix
  of all four contexts is short, but the other three keep all of P0) share that beginning,
  encoded once as well. The responses that follow one such suffix are fed as token tries
  (sampled responses of a prompt begin alike: the same format, often the same first words),
  each shared beginning once, with a tree attention mask (each token sees the cache and its
  own ancestors; its position is its depth); so are the rows whose context suffix is theirs
  alone (a response-dependent block: text2sql's SQLite error), which share what comes before
  that block and its common wording. A row's last token is not fed (its output predicts
  nothing). A trie's attention is dense over its nodes, so a sequence joins one only where
  the tokens it saves outweigh the attention it adds (`planning.build_tries`). The LM head is applied only to the hidden states at response
  positions, a chunk of tokens at a time, and the JS distance is taken chunk by chunk in
  fp32; positions where an item with the same contexts and the same beginning already has
  its distances are copied from it. Contexts equal to P_all (an empty block) are not
  replayed: their q is exactly 0.

Works with any transformers decoder-only model exposing `get_decoder()` and
`get_output_embeddings()` with a `DynamicCache` (Qwen2, Llama, ...), peft-wrapped or not.

The package: `planning` (pure Python: groups, suffixes, tries, the cost model, the schedule of
forwards, `ReplayOptions`), `shared` (the shared-prefix method), `full` (the full-forward
method, the reference), `plumbing` (transformers: decoder, head, KV-cache argument and
output), `js` (the JS distance and the replay's JS step).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

import torch

from mrtpo.replay.full import replay_full
from mrtpo.replay.js import head_and_js, js_distance, js_distance_log_probs
from mrtpo.replay.planning import (ItemPlan, ReplayGroup, ReplayOptions, groups_common, plan_costs, plan_item,
                                   replay_groups, replay_tokens, takes_tree_mask)
from mrtpo.replay.plumbing import EncodedStart, PaddingSide, cache_kwarg, decoder_of, device_of, head_of, output_cache
from mrtpo.replay.shared import encode_start, replay_shared

if TYPE_CHECKING:  # items are duck-typed: the package imports nothing of mrtpo's but itself
    from mrtpo.contexts import ReplayItem

__all__ = [
    "ItemPlan", "PaddingSide", "ReplayGroup", "ReplayOptions", "cache_kwarg", "decoder_of", "distances",
    "head_and_js", "head_of", "js_distance", "js_distance_log_probs", "output_cache", "plan_item",
    "replay_groups", "replay_onto_columns", "replay_tokens", "takes_tree_mask",
]


def distances(model, items: Sequence[ReplayItem], temperature: float = 1.0, k_max: int | None = None,
              length: int | None = None, shared_prefix: bool = True, chunk_tokens: int = 256,
              batch_tokens: int | None = None, padding_side: PaddingSide = "right",
              tree_tokens: int = 1024, options: ReplayOptions = ReplayOptions(),
              known: EncodedStart | None = None, forward_tokens: int | None = None) -> torch.Tensor:
    """Per-token JS distances `q [N, K, T]` (float32, on the model's device) of replayed responses.

    K = `k_max` or the largest number of rewards among `items`; T = `length` or the longest
    response. q is 0 on padding (t >= the response's length), for absent rewards (an item with
    fewer than K rewards) and for rewards whose block is empty (P_without_k == P_all). Runs
    under `torch.no_grad()` with the model in eval mode (its training flag is restored after).
    `temperature` divides the logits, as in the policy's log-prob pass.

    `batch_tokens` bounds the padded tokens of one forward (rows are sorted by length and cut
    into forwards so that padding plus `forward_tokens` per forward is least); both default to
    the model's device's costs (`planning.plan_costs`: 8,192 and 64 on CPU; on CUDA, where a
    forward is launch-bound, 65,536 and 8,192, so a step's contexts go in as few forwards as
    that allows; the same q either way); `chunk_tokens` bounds the logit rows alive at
    once; `padding_side` is how the full-forward method pads the rows of one forward (both
    give the same q; the shared method pads its tries on the right).
    `tree_tokens` bounds the nodes of one response trie (W below; a response longer than that
    is a trie alone); 0 feeds each response as its own row, as does a model that does not
    take a tree mask (`takes_tree_mask`: flash attention, sliding-window layers).
    `options` (`ReplayOptions`) switches the shared method's kinds of sharing off one by one;
    every setting gives the same q. `known` (`plumbing.EncodedStart`, the rollout's): the KV of
    a beginning the contexts share, encoded already; the shared method takes as much of it as
    its contexts begin with, while the weights are the ones it was encoded under (the same q,
    to float rounding).

    Peak extra memory of the shared-prefix method, beyond the weights (b = bytes per element
    of the model dtype, V = vocabulary, H = hidden size, KV = 2 * layers * kv_heads * head_dim,
    L = the group's prefix length, R x S = the padded rows of one forward, R * S <=
    batch_tokens):

        L * KV * b                           the prefix cache (kept while its group runs)
      + 2 * R * (L + S) * KV * b             its copy for one forward (repeated over R rows)
                                             and the cache with the suffix keys/values
      + activations of one R x S forward     as an ordinary forward of R * S tokens (attention
                                             scores R * heads * S * (L + S) on the math path)
      + R * W * (L + S + W)                  the boolean tree masks of one forward of tries
      + 2 * batch_tokens * H * b             hidden states at response positions, kept for the
                                             JS step (whole items, <= 2 * batch_tokens positions)
      + chunk_tokens * V * (b + 8)           logits of one chunk and their fp32 log-softmax
      + 6 * max(J, 4 * V)                    JS temporaries (fp32 buffers of J = 1 MB on CPU,
                                             64 MB on an accelerator)

    The distance computation therefore holds about chunk_tokens * V * (b + 8) bytes whatever
    N, K and T, never a [N, K + 1, T, V] tensor. The full-forward method instead holds the
    logits of one forward, R * (T + 1) * V * b, as trainers do.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    device = device_of(model)
    costs = plan_costs(device)
    batch_tokens = costs.batch_tokens if batch_tokens is None else batch_tokens
    forward_tokens = costs.forward_tokens if forward_tokens is None else forward_tokens
    if chunk_tokens < 1 or batch_tokens < 1 or forward_tokens < 0:
        raise ValueError("chunk_tokens and batch_tokens must be >= 1, forward_tokens >= 0")
    if tree_tokens < 0:
        raise ValueError(f"tree_tokens must be >= 0, got {tree_tokens}")
    k_needed = max((it.num_rewards for it in items), default=0)
    t_needed = max((len(it.response_ids) for it in items), default=0)
    K = k_needed if k_max is None else k_max
    T = t_needed if length is None else length
    if K < k_needed:
        raise ValueError(f"k_max={k_max} but an item has {k_needed} rewards; pass k_max >= {k_needed}")
    if T < t_needed:
        raise ValueError(f"length={length} but a response has {t_needed} tokens; pass length >= {t_needed}")
    q = torch.zeros(len(items), K, T, dtype=torch.float32, device=device)  # [N, K, T]
    groups = replay_groups(items, shared_prefix, one_group=options.trunks)
    if not groups:
        return q
    plans = {n: plan_item(items[n], n) for g in groups for n in g.items}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            # the beginning every group's prefix shares (system text, worked example), once
            start = encode_start(model, groups[0].prefix[:groups_common(groups, options)], known) if shared_prefix else None
            for group in groups:
                if shared_prefix:
                    replay_shared(model, items, group, plans, q, temperature, chunk_tokens, batch_tokens,
                                  tree_tokens, options, start, known, forward_tokens)
                else:
                    replay_full(model, items, group, plans, q, temperature, chunk_tokens, batch_tokens, padding_side)
    finally:
        model.train(was_training)
    return q


def replay_onto_columns(model, items: Sequence, columns: Sequence[Sequence[int]], shape: tuple[int, int, int],
                        temperature: float = 1.0, rows: Sequence[int] | None = None, chunk: int | None = None,
                        on_progress: Callable[[int, int], None] | None = None,
                        known: EncodedStart | None = None, options: ReplayOptions = ReplayOptions()) -> torch.Tensor:
    """q [N, K, T] = `shape` (float32, on the CPU) of a batch's reward columns: the step the
    trainer (mrtpo.harness.token_credit), the TRL integration and `mrtpo credit` share.

    Each item is one completion with its own rewards (instruction following has one reward
    per constraint, so rows differ); the batch has one column per reward name. Item j's
    reward k lands at `q[rows[j], columns[j][k]]`; a column a row does not have stays 0.

    `columns[j]`: the column of each of item j's rewards, in its reward order; `rows[j]`: its
    row (default: j). T = `shape[2]` must cover the longest response. `chunk` replays that
    many items at a time and calls `on_progress(done, total)` after each (a progress display;
    q is the same). `known`: the rollout's encoded prompt start; `options`: which sharing the
    replay uses (both as in `distances`).
    """
    q = torch.zeros(shape)  # [N, K, T]
    rows = range(len(items)) if rows is None else rows
    step = chunk or max(1, len(items))
    for start in range(0, len(items), step):
        part = items[start:start + step]
        q_part = distances(model, part, temperature=temperature, length=shape[2],
                           known=known, options=options).float().cpu()  # [c, K_part, T]
        for j, q_item in enumerate(q_part, start=start):
            for k, col in enumerate(columns[j]):
                q[rows[j], col] = q_item[k]
        if on_progress is not None:
            on_progress(min(start + step, len(items)), len(items))
    return q
