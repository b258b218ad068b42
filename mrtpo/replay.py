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
  encoded once as well. The LM head is applied only
  to the hidden states at response positions, a chunk of tokens at a time, and the JS distance
  is taken chunk by chunk in fp32. Contexts equal to P_all (an empty block) are not replayed:
  their q is exactly 0.

Works with any transformers decoder-only model exposing `get_decoder()` and
`get_output_embeddings()` with a `DynamicCache` (Qwen2, Llama, ...), peft-wrapped or not.
"""
from __future__ import annotations

import copy
import inspect
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
              batch_tokens: int = 8192, padding_side: PaddingSide = "right") -> torch.Tensor:
    """Per-token JS distances `q [N, K, T]` (float32, on the model's device) of replayed responses.

    K = `k_max` or the largest number of rewards among `items`; T = `length` or the longest
    response. q is 0 on padding (t >= the response's length), for absent rewards (an item with
    fewer than K rewards) and for rewards whose block is empty (P_without_k == P_all). Runs
    under `torch.no_grad()` with the model in eval mode (its training flag is restored after).
    `temperature` divides the logits, as in the policy's log-prob pass.

    `batch_tokens` bounds the padded tokens of one forward (rows are sorted by length and cut
    into forwards so that padding stays small); `chunk_tokens` bounds the logit rows alive at
    once; `padding_side` is how the rows of one forward are padded (both give the same q).

    Peak extra memory of the shared-prefix method, beyond the weights (b = bytes per element
    of the model dtype, V = vocabulary, H = hidden size, KV = 2 * layers * kv_heads * head_dim,
    L = the group's prefix length, R x S = the padded rows of one forward, R * S <=
    batch_tokens):

        L * KV * b                           the prefix cache (kept while its group runs)
      + 2 * R * (L + S) * KV * b             its copy for one forward (repeated over R rows)
                                             and the cache with the suffix keys/values
      + activations of one R x S forward     as a plain forward of R * S tokens (attention
                                             scores R * heads * S * (L + S) on the math path)
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
                    _replay_shared(model, items, group, plans, q, temperature, chunk_tokens, batch_tokens, padding_side)
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


def replay_tokens(items: Sequence[ReplayItem], shared_prefix: bool = True, batch_tokens: int = 8192) -> int:
    """Tokens the replay feeds through the model (padding excluded), for cost accounting.

    Plain: every distinct context plus the response. Shared prefix: each group's prefix once;
    each context suffix that several responses share once, plus those responses; every other
    (context suffix + response) row whole (as `distances` with the same `batch_tokens` feeds them).
    """
    groups = replay_groups(items, shared_prefix)
    if not shared_prefix:
        return sum(len(ids) for g in groups for _, _, ids in g.rows)
    total = 0
    for g in groups:
        total += len(g.prefix)
        for wave in _waves(g, items, 2 * batch_tokens):
            singles, branches = _branches(wave, items)
            total += sum(len(ids) for _, _, ids in singles)
            for shared, members in _clusters(branches):
                total += len(shared) + sum(len(branches[b][0]) - len(shared) + sum(
                    len(items[n].response_ids) for n, _ in branches[b][1]) for b in members)
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

def _replay_shared(model, items, group: ReplayGroup, plans, q, temperature, chunk_tokens, batch_tokens, side) -> None:
    device = q.device
    decoder, head = decoder_of(model), head_of(model)
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

    def run_branches(branches, kept, base, base_len: int) -> None:
        """Branches (suffix after `base_len` positions, [(item, slot), ...]): each suffix
        encoded once on the cache `base`, its responses on top of it -> hidden states in `kept`."""
        for part in _forwards([(b, 0, suffix) for b, (suffix, _) in enumerate(branches)], batch_tokens):
            suffixes = [branches[b][0] for b, _, _ in part]
            ids, smask, pos, _ = _pack(suffixes, "left", device, start=base_len)  # [Bb, S]
            kwargs, mask = on_cache(base, base_len, len(part), smask)  # [Bb, base + S]
            kwargs["use_cache"] = True
            out = decoder(input_ids=ids, attention_mask=mask, position_ids=pos, **kwargs)
            last = out.last_hidden_state[:, -1]  # [Bb, H] (left padding): predicts each response's first token
            branch_cache, branch_mask = output_cache(out), mask  # [Bb, base + S]
            del kwargs, out
            rows = [(n, slot, items[n].response_ids, j) for j, (b, _, _) in enumerate(part)
                    for n, slot in branches[b][1]]
            for batch in _forwards(rows, batch_tokens):
                which = torch.tensor([r[3] for r in batch], device=device)  # [R] each row's suffix
                rids, rmask, _, _ = _pack([r[2] for r in batch], "right", device)  # [R, T]
                starts = base_len + torch.tensor([len(suffixes[r[3]]) for r in batch], device=device)  # [R]
                rpos = starts[:, None] + torch.arange(rids.shape[1], device=device)  # [R, T]
                cache = copy.deepcopy(branch_cache)
                cache.batch_select_indices(which)
                hidden = decoder(input_ids=rids, attention_mask=torch.cat([branch_mask[which], rmask], 1),
                                 position_ids=rpos, use_cache=True,
                                 **{cache_arg: cache}).last_hidden_state  # [R, T, H]
                del cache
                for r, (n, slot, resp, j) in enumerate(batch):
                    kept[n, plans[n].slots.index(slot)] = torch.cat(
                        [last[j:j + 1], hidden[r, :len(resp) - 1]])  # [T, H]
                del hidden
            del branch_cache

    for wave in _waves(group, items, 2 * batch_tokens):
        kept: dict[tuple[int, int], torch.Tensor] = {}  # (item, context) -> hidden [T, H]
        singles, branches = _branches(wave, items)
        # rows whose context suffix no other row shares: suffix + response, on the prefix cache
        for batch in _forwards(singles, batch_tokens):
            ids, mask, pos, offsets = _pack([r[2] for r in batch], side, device, start=prefix_len)  # [R, S]
            kwargs, mask = on_cache(prefix_cache, prefix_len, len(batch), mask)  # mask [R, L + S]
            hidden = decoder(input_ids=ids, attention_mask=mask, position_ids=pos,
                             **kwargs).last_hidden_state  # [R, S, H]
            del kwargs
            for r, ((n, slot, _), start) in enumerate(zip(batch, _response_starts(batch, offsets, items))):
                t_len = len(items[n].response_ids)
                kept[n, plans[n].slots.index(slot)] = hidden[r, start:start + t_len].clone()  # [T, H]
            del hidden
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
            head_and_js(q, n, plans[n], h, head, temperature, chunk_tokens)


def head_and_js(q: torch.Tensor, n: int, plan: _Plan, hidden: torch.Tensor, head, temperature: float,
                chunk_tokens: int) -> None:
    """q[n] from the hidden states [C, T, H] of item n's distinct contexts at its response
    positions: the vocabulary head, `chunk_tokens` positions (of all contexts) at a time,
    then the JS step. The plain method does the same work inside its forward."""
    n_ctx = hidden.shape[0]
    step = max(1, chunk_tokens // n_ctx)
    for t0 in range(0, hidden.shape[1], step):
        x = hidden[:, t0:t0 + step]  # [C, c, H]
        logits = head(x.reshape(-1, x.shape[-1])).view(n_ctx, x.shape[1], -1)  # [C, c, V]
        _fill(q, n, plan, logits, temperature, t0, rows=step)


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
