"""Teacher-forced replay of sampled responses under their K+1 contexts -> per-token JS distances.

For each response n and reward k, `q[n, k, t]` is the Jensen-Shannon distance (base 2, in
[0, 1]) between the policy's next-token distributions at response token t under P_all and
under P_without_k (mrtpo.contexts). The distribution for response token t comes from the
position just before it (the last context token for t = 0). No generation happens: the
sampled ids are fed back exactly.

Two methods give the same numbers:

- plain (`shared_prefix=False`, the reference): one full forward per distinct context, as RL
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
  the tokens it saves outweigh the attention it adds (`_trees`). The LM head is applied only to the hidden states at response
  positions, a chunk of tokens at a time, and the JS distance is taken chunk by chunk in
  fp32; positions where an item with the same contexts and the same beginning already has
  its distances are copied from it. Contexts equal to P_all (an empty block) are not
  replayed: their q is exactly 0.

Works with any transformers decoder-only model exposing `get_decoder()` and
`get_output_embeddings()` with a `DynamicCache` (Qwen2, Llama, ...), peft-wrapped or not.
"""
from __future__ import annotations

import bisect
import copy
import inspect
import math
from dataclasses import dataclass
from typing import Literal, Sequence

import torch

from mrtpo.advantages import js_distance_log_probs
from mrtpo.contexts import ReplayItem

PaddingSide = Literal["left", "right"]


@dataclass
class _Plan:
    """One item's distinct contexts: [0] = P_all; `which[k]` indexes them (None: same as P_all)."""

    contexts: list[list[int]]
    which: list[int | None]
    slots: list[int]  # each distinct context's first index in item.context_ids

    @property
    def active(self) -> bool:
        return len(self.contexts) > 1


@dataclass
class ReplayGroup:
    """Items replayed on one shared prefix, and the rows fed after it.

    `prefix` is encoded once; each row is `(item, slot, ids)` with `ids` = the rest of
    `items[item].context_ids[slot]` followed by the response ids exactly as sampled, so
    `prefix + ids == context_ids[slot] + response_ids`. Contexts equal to P_all are not rows.
    """

    prefix: list[int]
    items: list[int]
    rows: list[tuple[int, int, list[int]]]


def distances(model, items: Sequence[ReplayItem], temperature: float = 1.0, k_max: int | None = None,
              length: int | None = None, shared_prefix: bool = True, chunk_tokens: int = 256,
              batch_tokens: int = 8192, padding_side: PaddingSide = "right",
              tree_tokens: int = 1024) -> torch.Tensor:
    """Per-token JS distances `q [N, K, T]` (float32, on the model's device) of replayed responses.

    K = `k_max` or the largest number of rewards among `items`; T = `length` or the longest
    response. q is 0 on padding (t >= the response's length), for absent rewards (an item with
    fewer than K rewards) and for rewards whose block is empty (P_without_k == P_all). Runs
    under `torch.no_grad()` with the model in eval mode (its training flag is restored after).
    `temperature` divides the logits, as in the policy's log-prob pass.

    `batch_tokens` bounds the padded tokens of one forward (rows are sorted by length and cut
    into forwards so that padding stays small); `chunk_tokens` bounds the logit rows alive at
    once; `padding_side` is how the plain method pads the rows of one forward (both give the
    same q; the shared method pads its tries on the right).
    `tree_tokens` bounds the nodes of one response trie (W below; a response longer than that
    is a trie alone); 0 feeds each response as its own row, as does a model that does not
    take a tree mask (`takes_tree_mask`: flash attention, sliding-window layers).

    Peak extra memory of the shared-prefix method, beyond the weights (b = bytes per element
    of the model dtype, V = vocabulary, H = hidden size, KV = 2 * layers * kv_heads * head_dim,
    L = the group's prefix length, R x S = the padded rows of one forward, R * S <=
    batch_tokens):

        L * KV * b                           the prefix cache (kept while its group runs)
      + 2 * R * (L + S) * KV * b             its copy for one forward (repeated over R rows)
                                             and the cache with the suffix keys/values
      + activations of one R x S forward     as a plain forward of R * S tokens (attention
                                             scores R * heads * S * (L + S) on the math path)
      + R * W * (L + S + W)                  the boolean tree masks of one forward of tries
      + 2 * batch_tokens * H * b             hidden states at response positions, kept for the
                                             JS step (whole items, <= 2 * batch_tokens positions)
      + chunk_tokens * V * (b + 8)           logits of one chunk and their fp32 log-softmax
      + 6 * max(J, 4 * V)                    JS temporaries (fp32 buffers of J = 1 MB on CPU,
                                             64 MB on an accelerator)

    The distance computation therefore holds about chunk_tokens * V * (b + 8) bytes whatever
    N, K and T, never a [N, K + 1, T, V] tensor. The plain method instead holds the logits of
    one forward, R * (T + 1) * V * b, as trainers do.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    if chunk_tokens < 1 or batch_tokens < 1:
        raise ValueError("chunk_tokens and batch_tokens must be >= 1")
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
    device = _device(model)
    q = torch.zeros(len(items), K, T, dtype=torch.float32, device=device)  # [N, K, T]
    groups = replay_groups(items, shared_prefix)
    if not groups:
        return q
    plans = {n: _plan(items[n], n) for g in groups for n in g.items}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for group in groups:
                if shared_prefix:
                    _replay_shared(model, items, group, plans, q, temperature, chunk_tokens, batch_tokens,
                                   tree_tokens)
                else:
                    _replay_plain(model, items, group, plans, q, temperature, chunk_tokens, batch_tokens, padding_side)
    finally:
        model.train(was_training)
    return q


def replay_groups(items: Sequence[ReplayItem], shared_prefix: bool = True) -> list[ReplayGroup]:
    """What the replay feeds the model: groups of items, each a prefix and its rows.

    With `shared_prefix=False` there is one group with an empty prefix (every row is a whole
    context plus the response). Items with nothing to replay (every block empty, or an empty
    response) appear in no group.
    """
    plans = [_plan(item, i) for i, item in enumerate(items)]
    active = [n for n, p in enumerate(plans) if p.active and items[n].response_ids]
    groups = _groups(plans, active) if shared_prefix else ([(0, active)] if active else [])
    out = []
    for prefix_len, members in groups:
        rows = [(n, slot, ctx[prefix_len:] + list(items[n].response_ids))
                for n in members for slot, ctx in zip(plans[n].slots, plans[n].contexts)]
        out.append(ReplayGroup(list(plans[members[0]].contexts[0][:prefix_len]), list(members), rows))
    return out


def replay_tokens(items: Sequence[ReplayItem], shared_prefix: bool = True, batch_tokens: int = 8192,
                  tree_tokens: int = 1024, model=None) -> int:
    """Tokens the replay feeds through the model (padding excluded), for cost accounting.

    Plain: every distinct context plus the response. Shared prefix: each group's prefix once;
    each context suffix that several responses share once, plus the nodes of its responses'
    tries; the nodes of the tries of every other (context suffix + response) row; a beginning
    shared in a trie once, a row's last token not at all. As `distances` with the same
    `batch_tokens` and `tree_tokens` feeds them to `model` (which tries pay depends on its
    shape; None: every sequence that shares a beginning joins its trie).
    """
    groups = replay_groups(items, shared_prefix)
    if not shared_prefix:
        return sum(len(ids) for g in groups for _, _, ids in g.rows)
    tree_nodes, keys = _trie_settings(model.config, tree_tokens) if model is not None else (tree_tokens, math.inf)

    def fed(seqs) -> int:
        return sum(len(tree.tokens) for tree in _trees(seqs, tree_nodes, keys))

    total = 0
    for g in groups:
        total += len(g.prefix)
        for wave in _waves(g, items, 2 * batch_tokens):
            singles, branches = _branches(wave, items)
            total += fed([(None, ids[:-1]) for _, _, ids in singles])
            for shared, members in _clusters(branches):
                total += len(shared) + sum(len(branches[b][0]) - len(shared) + fed(
                    [(None, items[n].response_ids[:-1]) for n, _ in branches[b][1]]) for b in members)
    return total


# --- planning ---------------------------------------------------------------------------------

def _plan(item: ReplayItem, index: int) -> _Plan:
    k = item.num_rewards
    if len(item.context_ids) != k + 1:
        raise ValueError(f"item {index} has {len(item.context_ids)} contexts for {k} rewards; "
                         "expected K + 1 (P_all, then P_without_k for each reward)")
    if any(len(c) == 0 for c in item.context_ids):
        raise ValueError(f"item {index} has an empty context; render it with the chat template")
    contexts, slots = [list(item.context_ids[0])], [0]
    seen = {tuple(contexts[0]): 0}
    which: list[int | None] = []
    for slot, ctx in enumerate(item.context_ids[1:], start=1):
        key = tuple(ctx)
        if key not in seen:
            seen[key] = len(contexts)
            contexts.append(list(ctx))
            slots.append(slot)
        which.append(seen[key] or None)
    return _Plan(contexts, which, slots)


def _common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for s in seqs[1:]:
        i = 0
        while i < n and s[i] == first[i]:
            i += 1
        n = i
    return n


def _groups(plans: Sequence[_Plan], active: Sequence[int]) -> list[tuple[int, list[int]]]:
    """Items whose contexts share the same common prefix -> (prefix length, item indices).

    All responses of one prompt have the same prefix (P0 and the response-independent blocks
    come first), so they land in one group. The prefix stops at least one token short of every
    context, so each suffix holds the position that predicts the first response token.
    """
    by_key: dict[tuple[int, ...], list[int]] = {}
    for n in active:
        ctxs = plans[n].contexts
        key = tuple(ctxs[0][:_common_prefix(ctxs)])
        by_key.setdefault(key, []).append(n)
    out = []
    for key, members in by_key.items():
        shortest = min(len(c) for n in members for c in plans[n].contexts)
        out.append((min(len(key), shortest - 1), members))
    return out


def _batches(group: ReplayGroup, batch_tokens: int) -> list[list[tuple[int, int, list[int]]]]:
    """The group's rows in forwards of whole items (an item's contexts are compared with each
    other), as many items as keep rows * longest row <= batch_tokens, at least one."""
    by_item: dict[int, list] = {}
    for row in group.rows:
        by_item.setdefault(row[0], []).append(row)
    out, cur, width = [], [], 0
    for rows in by_item.values():
        new_width = max(width, max(len(r[2]) for r in rows))
        if cur and (len(cur) + len(rows)) * new_width > batch_tokens:
            out.append(cur)
            cur, new_width = [], max(len(r[2]) for r in rows)
        cur.extend(rows)
        width = new_width
    if cur:
        out.append(cur)
    return out


# --- model plumbing ---------------------------------------------------------------------------

def _device(model) -> torch.device:
    return next(model.parameters()).device


def decoder_of(model):
    """The transformer body (hidden states after the final norm), LoRA layers included."""
    try:
        return model.get_decoder()
    except (AttributeError, NotImplementedError) as err:
        raise TypeError(f"{type(model).__name__} exposes no get_decoder(); the shared-prefix replay "
                        "needs a transformers decoder-only causal LM (use shared_prefix=False)") from err


def head_of(model):
    """hidden [M, H] -> logits [M, V], as the model's forward computes them from hidden states."""
    lm_head = model.get_output_embeddings()
    config = model.config
    softcap = getattr(config, "final_logit_softcapping", None)  # Gemma 2/3
    scale = getattr(config, "logit_scale", None)  # Cohere

    def head(hidden: torch.Tensor) -> torch.Tensor:
        logits = lm_head(hidden)
        if isinstance(scale, (int, float)) and scale != 1:
            logits = logits * scale
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        return logits

    return head


def cache_kwarg(module) -> str:
    """transformers >= 5 names the KV-cache argument `cache`; earlier versions `past_key_values`."""
    params = inspect.signature(module.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def output_cache(out):
    """The KV cache a forward pass with use_cache=True returned (`cache` or `past_key_values`)."""
    for name in ("cache", "past_key_values"):
        value = getattr(out, name, None)
        if value is not None:
            return value
    raise RuntimeError("the decoder returned no KV cache although use_cache=True")


def _pack(seqs: Sequence[Sequence[int]], side: PaddingSide, device, start: int = 0):
    """Pad rows -> ids [R, S], mask [R, S], positions [R, S] (from `start`), left pads per row."""
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    pos = torch.full((len(seqs), width), start, dtype=torch.long)
    offsets = []
    for r, s in enumerate(seqs):
        off = width - len(s) if side == "left" else 0
        ids[r, off:off + len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        mask[r, off:off + len(s)] = 1
        pos[r, off:off + len(s)] = torch.arange(start, start + len(s))
        offsets.append(off)
    return ids.to(device), mask.to(device), pos.to(device), offsets


def _fill(q: torch.Tensor, n: int, plan: _Plan, logits: torch.Tensor, temperature: float, t0: int = 0,
          rows: int = 64) -> None:
    """q[n, k, t0:t0 + c] from logits [C, c, V] of the item's distinct contexts (0 = P_all),
    `rows` positions at a time: each context's log-softmax once, then P_all against each."""
    for r0 in range(0, logits.shape[1], rows):
        x = logits[:, r0:r0 + rows].float()  # [C, r, V]
        lp = torch.log_softmax(x if temperature == 1.0 else x / temperature, -1)  # [C, r, V]
        del x
        for k, j in enumerate(plan.which):
            if j is not None:
                q[n, k, t0 + r0:t0 + r0 + lp.shape[1]] = js_distance_log_probs(
                    lp[0], lp[j], chunk_bytes=_js_chunk_bytes(lp.device))  # [r]


def _js_chunk_bytes(device: torch.device) -> int:
    """fp32 buffers of the JS step: ~1 MB stays in a CPU core's cache; a GPU wants fewer,
    larger ones (each chunk is a handful of kernel launches)."""
    return 2**20 if device.type == "cpu" else 2**26


def _response_starts(batch, offsets, items) -> list[int]:
    """Column of each row's position that predicts its first response token."""
    return [off + len(ids) - len(items[n].response_ids) - 1 for off, (n, _, ids) in zip(offsets, batch)]


def _per_item(batch):
    """(item, first row, number of rows) for the consecutive rows of each item in a batch."""
    out, start = [], 0
    while start < len(batch):
        n, end = batch[start][0], start
        while end < len(batch) and batch[end][0] == n:
            end += 1
        out.append((n, start, end - start))
        start = end
    return out


# --- shared prefix ----------------------------------------------------------------------------

def _replay_shared(model, items, group: ReplayGroup, plans, q, temperature, chunk_tokens, batch_tokens,
                   tree_tokens: int) -> None:
    device = q.device
    decoder, head = decoder_of(model), head_of(model)
    eager = (getattr(model.config, "_attn_implementation", None) or "eager") == "eager"
    dtype = next(model.parameters()).dtype
    tree_nodes, keys_per_token = _trie_settings(model.config, tree_tokens)
    cache_arg = cache_kwarg(decoder)
    prefix_len, prefix_cache = len(group.prefix), None
    if prefix_len:
        prefix = torch.as_tensor(group.prefix, dtype=torch.long, device=device)[None]  # [1, L]
        out = decoder(input_ids=prefix, attention_mask=torch.ones_like(prefix), use_cache=True)
        prefix_cache = output_cache(out)

    def on_cache(base, base_len: int, rows: int, mask: torch.Tensor) -> tuple[dict, torch.Tensor]:
        """Decoder kwargs that put `rows` copies of the cache `base` (`base_len` positions)
        before `mask` [rows, S], and the mask over both."""
        if base is None:
            return {}, mask
        cache = copy.deepcopy(base)
        cache.batch_repeat_interleave(rows)
        return {cache_arg: cache, "use_cache": True}, torch.cat([mask.new_ones(rows, base_len), mask], 1)

    def run_tries(tries, cache, cache_mask: torch.Tensor, starts: Sequence[int], spend_cache: bool):
        """Feed tries [(cache row j, _Tree)] on the rows of `cache` (None: no cache; `cache_mask`
        [rows, C] its positions, `starts[j]` the position of depth 0 on row j), in forwards of
        about `batch_tokens` -> (j, tree, hidden [W, H] of its nodes) for each trie with nodes.
        `spend_cache`: the cache is not needed after, so the last forward may extend it in place."""
        batches = _forwards([(j, tree, tree.tokens) for j, tree in tries if tree.tokens], batch_tokens)
        for i, batch in enumerate(batches):
            which = torch.tensor([j for j, _, _ in batch], device=device)  # [R] each trie's cache row
            width = max(len(tree.tokens) for _, tree, _ in batch)
            ids = torch.zeros(len(batch), width, dtype=torch.long)  # [R, W]
            pos = torch.zeros(len(batch), width, dtype=torch.long)  # [R, W]
            tmask = torch.zeros(len(batch), width, width, dtype=torch.bool)  # [R, W, W]
            for r, (j, tree, _) in enumerate(batch):
                ids[r, :len(tree.tokens)] = torch.as_tensor(tree.tokens)
                pos[r, :len(tree.tokens)] = starts[j] + torch.as_tensor(tree.depth)
                tmask[r] = _tree_mask(tree.depth, width)
            ids, pos, tmask = ids.to(device), pos.to(device), tmask.to(device)
            kwargs, cmask = {}, cache_mask[which]  # [R, C]
            if cache is not None:  # each trie on a copy of its row (the forward appends to the cache)
                rows = cache if spend_cache and i == len(batches) - 1 else copy.deepcopy(cache)
                rows.batch_select_indices(which)
                kwargs = {cache_arg: rows, "use_cache": True}
            if all(len(tree.members) == 1 for _, tree, _ in batch):  # chains: a 2D mask, causal
                mask = torch.cat([cmask, torch.ones_like(ids, dtype=torch.bool)], 1).long()  # [R, C + W]
            else:  # each node sees the cache and its own ancestors
                mask = torch.cat([cmask[:, None].expand(-1, width, -1), tmask], 2)[:, None]  # [R, 1, W, C + W]
                if eager:  # eager attention adds the mask to the scores
                    mask = torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill_(~mask, torch.finfo(dtype).min)
            hidden = decoder(input_ids=ids, attention_mask=mask, position_ids=pos,
                             **kwargs).last_hidden_state  # [R, W, H]
            del kwargs
            for r, (j, tree, _) in enumerate(batch):
                yield j, tree, hidden[r]
            del hidden

    def run_singles(singles, kept) -> None:
        """Rows whose context suffix no other row shares (a block that depends on the response
        comes first): suffix + response on the prefix cache, as tries (rows that begin alike,
        a response's P_all and P_without_k before the block that differs, share nodes)."""
        fed = [((n, slot), list(ids[:-1])) for n, slot, ids in singles]
        tries = [(0, tree) for tree in _trees(fed, tree_nodes, keys_per_token)]
        cache_mask = torch.ones(1, prefix_len, dtype=torch.bool, device=device)  # [1, L]
        for _, tree, hidden in run_tries(tries, prefix_cache, cache_mask, [prefix_len], spend_cache=False):
            for (n, slot), path in zip(tree.members, tree.paths):
                t_len = len(items[n].response_ids)  # the last t_len fed positions predict the response
                kept[n, plans[n].slots.index(slot)] = hidden[path[len(path) - t_len:]]  # [T, H]

    def run_branches(branches, kept, base, base_len: int) -> None:
        """Branches (suffix after `base_len` positions, [(item, slot), ...]): each suffix
        encoded once on the cache `base`, its responses on top of it as tries (a beginning
        several responses share fed once) -> hidden states in `kept`."""
        for part in _forwards([(b, 0, suffix) for b, (suffix, _) in enumerate(branches)], batch_tokens):
            suffixes = [branches[b][0] for b, _, _ in part]
            ids, smask, pos, _ = _pack(suffixes, "left", device, start=base_len)  # [Bb, S]
            kwargs, mask = on_cache(base, base_len, len(part), smask)  # [Bb, base + S]
            kwargs["use_cache"] = True
            out = decoder(input_ids=ids, attention_mask=mask, position_ids=pos, **kwargs)
            last = out.last_hidden_state[:, -1]  # [Bb, H] (left padding): predicts each response's first token
            branch_cache = output_cache(out)
            del kwargs, out
            tries = [(j, tree) for j, (b, _, _) in enumerate(part) for tree in _trees(
                [(m, list(items[m[0]].response_ids[:-1])) for m in branches[b][1]], tree_nodes, keys_per_token)]
            for j, tree in tries:  # the first response token: predicted by the suffix's last position
                for n, slot in tree.members:
                    kept[n, plans[n].slots.index(slot)] = last[j:j + 1]  # [1, H]
            starts = [base_len + len(suffix) for suffix in suffixes]
            for j, tree, hidden in run_tries(tries, branch_cache, mask.bool(), starts, spend_cache=True):
                for (n, slot), path in zip(tree.members, tree.paths):
                    c = plans[n].slots.index(slot)
                    kept[n, c] = torch.cat([kept[n, c], hidden[path]])  # [T, H]
            del branch_cache

    computed = _Computed()
    for wave in _waves(group, items, 2 * batch_tokens):
        kept: dict[tuple[int, int], torch.Tensor] = {}  # (item, context) -> hidden [T, H]
        singles, branches = _branches(wave, items)
        if singles:
            run_singles(singles, kept)
        # context suffixes shared by several responses (blocks that do not depend on the
        # response): each suffix encoded once on the prefix cache, its responses on top of it;
        # suffixes that begin alike (contexts that keep all of P0 when another one edits it)
        # share that beginning too, encoded once
        clusters = _clusters(branches)
        alone = [branches[b] for shared, members in clusters if not shared for b in members]
        if alone:  # batched together, on the prefix cache
            run_branches(alone, kept, prefix_cache, prefix_len)
        for shared, members in clusters:
            if not shared:
                continue
            sub = [branches[b] for b in members]
            ids = torch.as_tensor(shared, dtype=torch.long, device=device)[None]  # [1, S0]
            pos = torch.arange(prefix_len, prefix_len + len(shared), device=device)[None]  # [1, S0]
            kwargs, mask = on_cache(prefix_cache, prefix_len, 1, torch.ones_like(ids))  # [1, L + S0]
            kwargs["use_cache"] = True
            base = output_cache(decoder(input_ids=ids, attention_mask=mask, position_ids=pos, **kwargs))
            del kwargs
            run_branches([(suffix[len(shared):], rows) for suffix, rows in sub], kept, base, prefix_len + len(shared))
            del base
        for n in dict.fromkeys(r[0] for r in wave):
            h = torch.stack([kept.pop((n, j)) for j in range(len(plans[n].contexts))])  # [C, T, H]
            start = computed.copy_shared(q, n, plans[n], items[n].response_ids)
            if start < h.shape[1]:
                head_and_js(q, n, plans[n], h[:, start:], head, temperature, chunk_tokens, t0=start)


def head_and_js(q: torch.Tensor, n: int, plan: _Plan, hidden: torch.Tensor, head, temperature: float,
                chunk_tokens: int, t0: int = 0) -> None:
    """q[n, :, t0:t0 + T] from the hidden states [C, T, H] of item n's distinct contexts at its
    response positions t0.. : the vocabulary head, `chunk_tokens` positions (of all contexts)
    at a time, then the JS step. The plain method does the same work inside its forward."""
    n_ctx = hidden.shape[0]
    step = max(1, chunk_tokens // n_ctx)
    for t in range(0, hidden.shape[1], step):
        x = hidden[:, t:t + step]  # [C, c, H]
        logits = head(x.reshape(-1, x.shape[-1])).view(n_ctx, x.shape[1], -1)  # [C, c, V]
        _fill(q, n, plan, logits, temperature, t0 + t, rows=step)


class _Computed:
    """Items whose q is filled, by their distinct contexts. Another item with the same contexts
    whose response begins like one of theirs has the same next-token distributions, hence the
    same q, up to one token past that beginning (the distribution for token t depends on the
    context and tokens < t only): that part is copied, and only the rest goes through the head
    and the JS step. Sampled groups repeat beginnings often (a format, a function name)."""

    def __init__(self) -> None:
        self.by_contexts: dict[tuple, list[tuple[tuple[int, ...], int]]] = {}  # sorted (response, item)

    def copy_shared(self, q: torch.Tensor, n: int, plan: _Plan, response: Sequence[int]) -> int:
        """Copy q[n, :, :c] from the filled item sharing the longest beginning; record n -> c."""
        done = self.by_contexts.setdefault((tuple(map(tuple, plan.contexts)), tuple(plan.which)), [])
        resp = tuple(response)
        i = bisect.bisect_left(done, (resp, -1))
        c, source = 0, None
        for other, m in done[max(0, i - 1):i + 1]:  # in sorted order the longest beginning is a neighbour's
            shared = min(_common_prefix([other, resp]) + 1, len(other), len(resp))
            if shared > c:
                c, source = shared, m
        if source is not None:
            q[n, :, :c] = q[source, :, :c]
        bisect.insort(done, (resp, n))
        return c


def _branches(rows, items) -> tuple[list, list[tuple[list[int], list[tuple[int, int]]]]]:
    """Split rows (item, slot, suffix + response) into those whose context suffix is theirs
    alone, and branches: (suffix, [(item, slot), ...]) for each suffix two or more rows share."""
    by_suffix: dict[tuple[int, ...], list] = {}
    for row in rows:
        n, _, ids = row
        by_suffix.setdefault(tuple(ids[:len(ids) - len(items[n].response_ids)]), []).append(row)
    singles, branches = [], []
    for suffix, members in by_suffix.items():
        if len(members) > 1:
            branches.append((list(suffix), [(n, slot) for n, slot, _ in members]))
        else:
            singles.extend(members)
    return singles, branches


def _clusters(branches, min_shared: int = 16) -> list[tuple[list[int], list[int]]]:
    """Branches whose suffixes begin with the same `min_shared` or more tokens, grouped ->
    [(their common beginning, branch indices)]; a branch alone gets an empty beginning. The
    beginning stops at least one token short of each suffix (whose last position predicts the
    first response token). Suffixes are sorted, so those that begin alike are neighbours."""
    order = sorted(range(len(branches)), key=lambda b: branches[b][0])
    runs: list[list[int]] = []
    for b in order:
        if runs and _common_prefix([branches[runs[-1][-1]][0], branches[b][0]]) >= min_shared:
            runs[-1].append(b)
        else:
            runs.append([b])
    out = []
    for run in runs:
        suffixes = [branches[b][0] for b in run]
        n = min(_common_prefix(suffixes), min(len(x) for x in suffixes) - 1) if len(run) > 1 else 0
        out.append((list(suffixes[0][:n]) if n >= min_shared else [], run))
    return out


@dataclass
class _Tree:
    """Responses fed after one context suffix as a token trie: node i is token `tokens[i]` at
    response position `depth[i]`, in preorder (each node after its parent, a subtree's nodes
    contiguous); `paths[m]` lists the nodes of `members[m]`'s response tokens but the last
    (whose output predicts nothing), so a beginning several responses share is fed once."""

    members: list[tuple[int, int]]  # (item, slot)
    tokens: list[int]
    depth: list[int]
    paths: list[list[int]]


def _trees(seqs, max_nodes: int, keys_per_token: float = math.inf) -> list[_Tree]:
    """Sequences [(member, fed tokens)] as tries of at most `max_nodes` nodes (a longer one
    alone; 0: every sequence alone, a chain). Sorted, sequences that begin alike are
    neighbours, and each one's new nodes are those past its common beginning with the one
    before (which keeps the nodes in preorder).

    A trie's attention is dense: each node attends over all W nodes, masked. A sequence joins
    the current trie only if the tokens it saves cost more than that: s shared tokens save
    s token passes, its u new nodes add about 2 * u * W attention keys, and one token through
    a layer's projections costs as much as `keys_per_token` keys (`_keys_per_token`).
    """
    trees: list[_Tree] = []
    prev: list[int] = []  # the previous sequence of the current trie
    for member, seq in sorted(((m, list(seq)) for m, seq in seqs), key=lambda x: x[1]):
        tree = trees[-1] if trees else None
        shared = _common_prefix([prev, seq]) if tree else 0
        new = len(seq) - shared
        if tree is None or not max_nodes or (tree.tokens and (
                len(tree.tokens) + new > max_nodes or shared * keys_per_token < 2 * new * len(tree.tokens))):
            tree, shared = _Tree([], [], [], []), 0
            trees.append(tree)
        path = tree.paths[-1][:shared] if shared else []
        path += range(len(tree.tokens), len(tree.tokens) + len(seq) - shared)
        tree.tokens += seq[shared:]
        tree.depth += range(shared, len(seq))
        tree.members.append(member)
        tree.paths.append(path)
        prev = seq
    return trees


def _trie_settings(config, tree_tokens: int) -> tuple[int, float]:
    """(max nodes of a trie, keys per token) for `_trees` on a model with `config`; max nodes
    0 (a row per sequence) where its attention takes no tree mask."""
    return (tree_tokens if takes_tree_mask(config) else 0), _keys_per_token(config)


def takes_tree_mask(config) -> bool:
    """Whether the model's forward takes a 4D mask as the whole of its attention pattern, as the
    response tries need: sdpa or eager attention (flash attention takes no 4D mask), and no
    sliding-window layer (transformers hands a 4D mask to every layer as given, so a window
    would be dropped). Otherwise the replay feeds a row per response."""
    if (getattr(config, "_attn_implementation", None) or "eager") not in ("sdpa", "eager"):
        return False
    types = getattr(config, "layer_types", None)
    if types is not None:
        return all(t == "full_attention" for t in types)
    return not getattr(config, "sliding_window", None) or getattr(config, "use_sliding_window", True) is False


def _keys_per_token(config) -> float:
    """How many attention keys cost as much as one token through a decoder layer's projections
    (multiply-adds: q, k, v, o and a gated MLP, against q.k and the weighted sum of v over all
    heads), from the model's config; a cost model for `_trees`. 1,152 for the built-in policy,
    about 8,300 for a Qwen2.5-0.5B shape."""
    hidden = getattr(config, "hidden_size", 0) or 0
    heads = getattr(config, "num_attention_heads", 0) or 0
    if not hidden or not heads:
        return math.inf
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    q_dim = heads * head_dim
    kv_dim = (getattr(config, "num_key_value_heads", None) or heads) * head_dim
    inner = getattr(config, "intermediate_size", None) or 4 * hidden
    return (2 * hidden * q_dim + 2 * hidden * kv_dim + 3 * hidden * inner) / (2 * q_dim)


def _tree_mask(depth: Sequence[int], width: int) -> torch.Tensor:
    """[width, width] bool: node i sees node j iff j is i or an ancestor of i (preorder: j <= i
    and i lies in j's subtree, which ends at the next node no deeper than j). Padding past the
    nodes sees itself only, so that no attention row is empty."""
    end = [len(depth)] * len(depth)  # one past the last node of each subtree
    stack: list[int] = []
    for i, d in enumerate(depth):
        while stack and depth[stack[-1]] >= d:
            end[stack.pop()] = i
        stack.append(i)
    idx = torch.arange(width)
    ends = torch.cat([torch.tensor(end, dtype=torch.long), idx[len(depth):] + 1])  # [W]
    return (idx[None, :] <= idx[:, None]) & (idx[:, None] < ends[None, :])  # [W, W]


def _waves(group: ReplayGroup, items, max_positions: int) -> list[list[tuple[int, int, list[int]]]]:
    """The group's rows, whole items at a time, while the response positions whose hidden
    states are kept for the JS step stay <= max_positions (at least one item per wave)."""
    out, cur, n_pos, last = [], [], 0, None
    for row in group.rows:
        t_len = len(items[row[0]].response_ids)
        if row[0] != last and cur and n_pos + t_len > max_positions:
            out.append(cur)
            cur, n_pos = [], 0
        cur.append(row)
        n_pos += t_len
        last = row[0]
    if cur:
        out.append(cur)
    return out


def _forwards(rows, batch_tokens: int, overhead: int = 64) -> list[list[tuple[int, int, list[int]]]]:
    """Rows sorted by length and cut into forwards so that padded tokens plus `overhead` per
    forward are fewest, with rows * width <= batch_tokens (a longer row goes alone).

    P_all rows are longer than P_without_k rows by a block, so one padded batch of all of
    them would waste about a block per row; sorting and cutting keeps the padding small.
    """
    rows = sorted(rows, key=lambda r: -len(r[2]))
    n = len(rows)
    best = [0.0] + [float("inf")] * n  # best[i]: cost of the first i rows
    cut = [0] * (n + 1)
    for i in range(1, n + 1):
        for j in range(i - 1, -1, -1):
            width = len(rows[j][2])  # the longest of rows j..i-1
            if (i - j) * width > batch_tokens and i - j > 1:
                break
            cost = best[j] + (i - j) * width + overhead
            if cost < best[i]:
                best[i], cut[i] = cost, j
    out, i = [], n
    while i > 0:
        out.append(rows[cut[i]:i])
        i = cut[i]
    return out[::-1]


# --- plain: one full forward per context ------------------------------------------------------

def _replay_plain(model, items, group: ReplayGroup, plans, q, temperature, chunk_tokens, batch_tokens, side) -> None:
    device = q.device
    for batch in _batches(group, batch_tokens):
        ids, mask, pos, offsets = _pack([r[2] for r in batch], side, device)  # [R, S] each
        starts = _response_starts(batch, offsets, items)
        first_col = min(starts)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False,
                       logits_to_keep=ids.shape[1] - first_col).logits  # [R, keep, V]
        for n, first, count in _per_item(batch):
            t_len = len(items[n].response_ids)
            sel = torch.stack([logits[first + j, starts[first + j] - first_col:starts[first + j] - first_col + t_len]
                               for j in range(count)])  # [C, T, V]
            _fill(q, n, plans[n], sel, temperature, rows=max(1, chunk_tokens // count))
