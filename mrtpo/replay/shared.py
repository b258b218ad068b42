"""The shared-prefix replay: each group's prefix encoded once, its KV cache reused.

For one `ReplayGroup` (mrtpo.replay.planning): the prefix is encoded once; context suffixes
that several responses share (`split_branches`) are encoded once on its cache, those that
begin alike (`cluster_suffixes`) share that beginning too, and the responses after a suffix
are fed as token tries with a tree attention mask (`tree_mask`). Rows whose context suffix
is theirs alone are fed as tries on the prefix cache. With `ReplayOptions.trunks` (the
default), every row instead goes past the beginnings its suffix shares with others
(`suffix_trunks`), each encoded once, and the rest of it is fed as tries. The hidden states
at response positions go through the head and the JS step (`head_and_js`), except positions
an item with the same contexts and beginning already has (`CopiedPositions`).
"""
from __future__ import annotations

import copy
from typing import Sequence

import torch

from mrtpo.replay.js import head_and_js
from mrtpo.replay.planning import (FORWARD_TOKENS, CopiedPositions, ReplayGroup, ReplayOptions, Trunk, attention_of,
                                   build_tries,
                                   cluster_suffixes, forwards, split_branches, suffix_trunks, trie_settings, waves)
from mrtpo.replay.plumbing import EncodedStart, cache_kwarg, decoder_of, head_of, on_cache, output_cache, pack


def replay_shared(model, items, group: ReplayGroup, plans, q: torch.Tensor, temperature: float,
                  chunk_tokens: int, batch_tokens: int, tree_tokens: int,
                  options: ReplayOptions = ReplayOptions(), start=None, known: EncodedStart | None = None,
                  forward_tokens: int = FORWARD_TOKENS) -> None:
    """q[n] for the items of `group`, its prefix encoded once (see the module doc). `start`:
    (cache, length) of the prefix's first `length` tokens, encoded already (`encode_start`).
    `known`: the rollout's encoded prompt start; the prefix and the trunks take the KV of as
    many of their first tokens as it holds (`SharedReplay.known_part`). `forward_tokens`: what one
    more forward costs in tokens fed, as the plan weighs it (`planning.plan_costs`)."""
    SharedReplay(model, items, plans, q, batch_tokens, tree_tokens, options, known,
                 forward_tokens).run(group, temperature, chunk_tokens, start)


def encode_start(model, ids: Sequence[int], known: EncodedStart | None = None):
    """(KV cache, length) of `ids` [L] encoded once: the beginning several groups' prefixes
    share, which each group's `run` copies and goes on from (None for no ids). `known`: the KV
    of a beginning encoded already (the rollout's prompts'); the first tokens it holds for
    `model` as it stands are taken from it, and only the rest is encoded."""
    if not ids:
        return None
    decoder, device = decoder_of(model), next(model.parameters()).device
    done = known.reusable(model, ids) if known is not None else 0
    cache = known.cache(done) if done else None
    if done == len(ids):
        return cache, done
    return encode_rest(decoder, cache_kwarg(decoder), cache, ids, done, device), len(ids)


def encode_rest(decoder, cache_arg: str, cache, ids: Sequence[int], done: int, device):
    """The one-row KV cache of all of `ids` [L]: the first `done` are in `cache` (None when
    `done` is 0), which the rest, encoded on it, extends."""
    x = torch.as_tensor(list(ids[done:]), dtype=torch.long, device=device)[None]  # [1, L - done]
    kwargs = {cache_arg: cache} if cache is not None else {}
    pos = torch.arange(done, len(ids), device=device)[None]  # [1, L - done]
    mask = torch.ones(1, len(ids), dtype=torch.long, device=device)  # [1, L]
    return output_cache(decoder(input_ids=x, attention_mask=mask, position_ids=pos, use_cache=True, **kwargs))


def tree_mask(depth: Sequence[int], width: int) -> torch.Tensor:
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


def tree_attention_mask(cache_mask: torch.Tensor, tmask: torch.Tensor, config, dtype: torch.dtype) -> torch.Tensor:
    """The 4D attention mask [R, 1, W, C + W] of R rows of W trie nodes on a cache: each node
    sees the cache's positions `cache_mask` [R, C] (bool) and what `tmask` [R, W, W] lets it
    (`tree_mask`: itself and its ancestors). Eager attention adds its mask to the scores, so
    for a model on it the mask is 0 / the dtype's minimum instead of True / False."""
    width = tmask.shape[-1]
    mask = torch.cat([cache_mask[:, None].expand(-1, width, -1), tmask], 2)[:, None]  # [R, 1, W, C + W]
    if attention_of(config) == "eager":
        mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, torch.finfo(dtype).min)
    return mask


class SharedReplay:
    """The model's parts and the settings one group's shared replay runs with; the hidden
    states it computes land in `kept[(item, context)]` ([T, H] at the response positions)."""

    def __init__(self, model, items, plans, q: torch.Tensor, batch_tokens: int, tree_tokens: int,
                 options: ReplayOptions, known: EncodedStart | None = None,
                 forward_tokens: int = FORWARD_TOKENS) -> None:
        self.items, self.plans, self.q = items, plans, q
        self.model, self.known = model, known
        self.prefix: list[int] = []  # the token ids of the group being run's prefix
        self.device = q.device
        self.decoder, self.head = decoder_of(model), head_of(model)
        self.config = model.config
        self.dtype = next(model.parameters()).dtype
        self.tree_nodes, self.keys_per_token = trie_settings(model.config, tree_tokens, options)
        self.cache_arg = cache_kwarg(self.decoder)
        self.batch_tokens, self.forward_tokens, self.options = batch_tokens, forward_tokens, options

    def run(self, group: ReplayGroup, temperature: float, chunk_tokens: int, start=None) -> None:
        """Encode the group's prefix (on a copy of `start`'s cache of its first tokens, if
        given), then its rows wave by wave (`waves`: the hidden states kept for the JS step
        stay bounded), each wave's items through the head and JS."""
        prefix_len, prefix_cache = len(group.prefix), None
        self.prefix = list(group.prefix)
        done = 0
        if start is not None:
            prefix_cache, done = copy.deepcopy(start[0]), start[1]
        if prefix_len > done:
            prefix_cache, k = self.known_part(prefix_cache, done, self.prefix[:done], self.prefix[done:])
            done += k
        if prefix_len > done:
            prefix_cache = encode_rest(self.decoder, self.cache_arg, prefix_cache, self.prefix, done, self.device)
        copied = CopiedPositions(self.options.copies)
        for wave in waves(group, self.items, 2 * self.batch_tokens):
            kept = self.wave_hidden(wave, prefix_cache, prefix_len)
            for n in dict.fromkeys(r[0] for r in wave):
                plan = self.plans[n]
                h = torch.stack([kept.pop((n, j)) for j in range(len(plan.contexts))])  # [C, T, H]
                source, start = copied.source(n, plan, self.items[n].response_ids)
                if source is not None:
                    self.q[n, :, :start] = self.q[source, :, :start]
                if start < h.shape[1]:
                    head_and_js(self.q, n, plan, h[:, start:], self.head, temperature, chunk_tokens, t0=start)

    def wave_hidden(self, wave, prefix_cache, prefix_len: int) -> dict[tuple[int, int], torch.Tensor]:
        """(item, context) -> hidden [T, H] at the response positions of the wave's rows."""
        kept: dict[tuple[int, int], torch.Tensor] = {}
        singles, branches = split_branches(wave, self.items)
        if self.options.trunks:  # every suffix past the beginnings it shares with others
            self.run_trunk(suffix_trunks(singles, branches, self.items, tries=bool(self.tree_nodes)), kept,
                           prefix_cache, prefix_len)
            return kept
        if singles:
            self.run_singles(singles, kept, prefix_cache, prefix_len)
        # context suffixes shared by several responses (blocks that do not depend on the
        # response): each suffix encoded once on the prefix cache, its responses on top of it;
        # suffixes that begin alike (contexts that keep all of P0 when another one edits it)
        # share that beginning too, encoded once
        clusters = cluster_suffixes(branches, options=self.options)
        alone = [branches[b] for shared, members in clusters if not shared for b in members]
        if alone:  # batched together, on the prefix cache
            self.run_branches(alone, kept, prefix_cache, prefix_len)
        for shared, members in clusters:
            if shared:
                self.run_cluster(shared, [branches[b] for b in members], kept, prefix_cache, prefix_len)
        return kept

    def known_part(self, cache, cache_len: int, begin: Sequence[int], tokens: Sequence[int]) -> tuple[object, int]:
        """(cache, k): `cache` (None, or `cache_len` positions holding the ids `begin`) followed
        by the KV of the first k of `tokens` that the rollout's encoded start holds for the
        model as it stands (`known`); (`cache`, 0) without one."""
        if self.known is None or not tokens:
            return cache, 0
        k = self.known.reusable(self.model, [*begin, *tokens]) - cache_len
        return (self.known.extend(cache, cache_len, k), k) if k > 0 else (cache, 0)

    def encode_on(self, cache, cache_len: int, tokens: list[int], begin: Sequence[int] | None = None):
        """`tokens` [S0] encoded once on a copy of `cache` (`cache_len` positions; None: no cache)
        -> the cache of all cache_len + S0 positions. `begin`: the ids `cache` holds; the first
        tokens the rollout's encoded start holds are then taken from it (`known_part`)."""
        if begin is not None:
            cache, k = self.known_part(cache, cache_len, begin, tokens)
            cache_len, tokens = cache_len + k, tokens[k:]
            if not tokens:
                return cache
        ids = torch.as_tensor(tokens, dtype=torch.long, device=self.device)[None]  # [1, S0]
        pos = torch.arange(cache_len, cache_len + len(tokens), device=self.device)[None]  # [1, S0]
        kwargs, mask = on_cache(self.cache_arg, cache, cache_len, 1, torch.ones_like(ids))  # [1, cache + S0]
        kwargs["use_cache"] = True
        return output_cache(self.decoder(input_ids=ids, attention_mask=mask, position_ids=pos, **kwargs))

    def run_cluster(self, shared: list[int], sub, kept, prefix_cache, prefix_len: int) -> None:
        """Branches whose suffixes begin with `shared`: that beginning encoded once on the
        prefix cache, the rest of each suffix and its responses on top of it."""
        base = self.encode_on(prefix_cache, prefix_len, shared)
        self.run_branches([(suffix[len(shared):], rows) for suffix, rows in sub], kept, base,
                          prefix_len + len(shared))

    def run_tries(self, tries, cache, cache_mask: torch.Tensor, starts: Sequence[int], spend_cache: bool):
        """Feed tries [(cache row j, Trie)] on the rows of `cache` (None: no cache; `cache_mask`
        [rows, C] its positions, `starts[j]` the position of depth 0 on row j), in forwards of
        about `batch_tokens` -> (j, tree, hidden [W, H] of its nodes) for each trie with nodes.
        `spend_cache`: the cache is not needed after, so the last forward may extend it in place."""
        device, dtype = self.device, self.dtype
        batches = forwards([(j, tree, tree.tokens) for j, tree in tries if tree.tokens], self.batch_tokens,
                           self.forward_tokens)
        for i, batch in enumerate(batches):
            which = torch.tensor([j for j, _, _ in batch], device=device)  # [R] each trie's cache row
            width = max(len(tree.tokens) for _, tree, _ in batch)
            ids = torch.zeros(len(batch), width, dtype=torch.long)  # [R, W]
            pos = torch.zeros(len(batch), width, dtype=torch.long)  # [R, W]
            tmask = torch.zeros(len(batch), width, width, dtype=torch.bool)  # [R, W, W]
            for r, (j, tree, _) in enumerate(batch):
                ids[r, :len(tree.tokens)] = torch.as_tensor(tree.tokens)
                pos[r, :len(tree.tokens)] = starts[j] + torch.as_tensor(tree.depth)
                tmask[r] = tree_mask(tree.depth, width)
            ids, pos, tmask = ids.to(device), pos.to(device), tmask.to(device)
            kwargs, cmask = {}, cache_mask[which]  # [R, C]
            if cache is not None:  # each trie on a copy of its row (the forward appends to the cache)
                rows = cache if spend_cache and i == len(batches) - 1 else copy.deepcopy(cache)
                rows.batch_select_indices(which)
                kwargs = {self.cache_arg: rows, "use_cache": True}
            if all(len(tree.members) == 1 for _, tree, _ in batch):  # chains: a 2D mask, causal
                mask = torch.cat([cmask, torch.ones_like(ids, dtype=torch.bool)], 1).long()  # [R, C + W]
            else:  # each node sees the cache and its own ancestors
                mask = tree_attention_mask(cmask, tmask, self.config, dtype)  # [R, 1, W, C + W]
            hidden = self.decoder(input_ids=ids, attention_mask=mask, position_ids=pos,
                                  **kwargs).last_hidden_state  # [R, W, H]
            del kwargs
            for r, (j, tree, _) in enumerate(batch):
                yield j, tree, hidden[r]
            del hidden

    def run_trunk(self, trunk: Trunk, kept, cache, cache_len: int, begin: Sequence[int] | None = None) -> None:
        """`trunk.shared` encoded once on `cache` (`cache_len` positions: the group's prefix and
        the trunks above, the ids `begin`; None: the group's prefix), then its rows as tries and
        its kids on that cache."""
        begin = self.prefix if begin is None else begin
        if trunk.shared:
            cache = self.encode_on(cache, cache_len, trunk.shared, begin)
            cache_len += len(trunk.shared)
            begin = [*begin, *trunk.shared]
        if trunk.rows:
            self.run_singles(trunk.rows, kept, cache, cache_len, trunk.depth)
        for kid in trunk.kids:
            self.run_trunk(kid, kept, cache, cache_len, begin)

    def run_singles(self, singles, kept, cache, cache_len: int, depth: int = 0) -> None:
        """Rows (item, slot, context suffix + response) past their first `depth` tokens (their
        trunks, in `cache` after the prefix: `cache_len` positions): the rest of the suffix +
        response as tries (rows that begin alike, a response's P_all and P_without_k before the
        block that differs, share nodes). Without trunks, the rows whose context suffix no
        other row shares (a block that depends on the response comes first)."""
        fed = [((n, slot), list(ids[depth:-1])) for n, slot, ids in singles]
        tries = [(0, tree) for tree in build_tries(fed, self.tree_nodes, self.keys_per_token)]
        cache_mask = torch.ones(1, cache_len, dtype=torch.bool, device=self.device)  # [1, C]
        for _, tree, hidden in self.run_tries(tries, cache, cache_mask, [cache_len], spend_cache=False):
            for (n, slot), path in zip(tree.members, tree.paths):
                t_len = len(self.items[n].response_ids)  # the last t_len fed positions predict the response
                kept[n, self.plans[n].slots.index(slot)] = hidden[path[len(path) - t_len:]]  # [T, H]

    def run_branches(self, branches, kept, base, base_len: int) -> None:
        """Branches (suffix after `base_len` positions, [(item, slot), ...]): each suffix
        encoded once on the cache `base`, its responses on top of it as tries (a beginning
        several responses share fed once) -> hidden states in `kept`."""
        items, plans = self.items, self.plans
        for part in forwards([(b, 0, suffix) for b, (suffix, _) in enumerate(branches)], self.batch_tokens,
                             self.forward_tokens):
            suffixes = [branches[b][0] for b, _, _ in part]
            ids, smask, pos, _ = pack(suffixes, "left", self.device, start=base_len)  # [Bb, S]
            kwargs, mask = on_cache(self.cache_arg, base, base_len, len(part), smask)  # [Bb, base + S]
            kwargs["use_cache"] = True
            out = self.decoder(input_ids=ids, attention_mask=mask, position_ids=pos, **kwargs)
            last = out.last_hidden_state[:, -1]  # [Bb, H] (left padding): predicts each response's first token
            branch_cache = output_cache(out)
            del kwargs, out
            tries = [(j, tree) for j, (b, _, _) in enumerate(part) for tree in build_tries(
                [(m, list(items[m[0]].response_ids[:-1])) for m in branches[b][1]], self.tree_nodes,
                self.keys_per_token)]
            for j, tree in tries:  # the first response token: predicted by the suffix's last position
                for n, slot in tree.members:
                    kept[n, plans[n].slots.index(slot)] = last[j:j + 1]  # [1, H]
            starts = [base_len + len(suffix) for suffix in suffixes]
            for j, tree, hidden in self.run_tries(tries, branch_cache, mask.bool(), starts, spend_cache=True):
                for (n, slot), path in zip(tree.members, tree.paths):
                    c = plans[n].slots.index(slot)
                    kept[n, c] = torch.cat([kept[n, c], hidden[path]])  # [T, H]
            del branch_cache
