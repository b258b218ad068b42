"""What the replay feeds the model, and in which forwards: pure Python, no torch.

An item's distinct contexts (`plan_item`), the groups of items that share a prefix
(`replay_groups`), the context suffixes that several responses share (`split_branches`) and
those that begin alike (`cluster_suffixes`), or all context suffixes nested by the
beginnings they share (`suffix_trunks`), the responses as token tries (`build_tries`)
with the cost model that decides which sequence joins a trie (`attention_keys_per_token`),
and the schedule of forwards (`waves`, `forwards`, `item_batches`). `ReplayOptions` switches
each kind of sharing off (the benchmarks measure what each one buys); every setting gives
the same distances.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # items are duck-typed: the package imports nothing of mrtpo's but itself
    from mrtpo.contexts import ReplayItem


Row = tuple[int, int, list[int]]  # (item, slot, context suffix + response ids)

#: what one more forward costs, in tokens fed: a forward reads every weight however few tokens
#: it feeds (SmolLM2 on 2 CPU cores: a forward of 1 token takes as long as 40-60 tokens of a
#: long one); `forwards` weighs padding against it
FORWARD_TOKENS = 64


@dataclass(frozen=True)
class PlanCosts:
    """What the replay's plan weighs, by device: the padded tokens one forward may feed and what
    one more forward costs in tokens fed (`forwards`). Every plan gives the same q; only the
    number and size of the forwards change."""

    batch_tokens: int
    forward_tokens: int


#: 2 CPU cores: a forward costs about 64 tokens, and 8,192 padded tokens keep a forward's
#: activations within a few hundred MB
CPU_COSTS = PlanCosts(batch_tokens=8192, forward_tokens=FORWARD_TOKENS)
#: a CUDA GPU: a forward of SmolLM2 is bound by its kernel launches below thousands of tokens
#: (about 30 ms whatever it feeds on an H200), so the plan puts every context of a step into as
#: few forwards as 65,536 padded tokens allow (a few GB of activations for a 1B model in bf16)
GPU_COSTS = PlanCosts(batch_tokens=65536, forward_tokens=8192)


def plan_costs(device) -> PlanCosts:
    """The costs the replay plans by on `device` (a torch.device or its name)."""
    import torch

    return GPU_COSTS if torch.device(device).type == "cuda" else CPU_COSTS


#: tokens a trunk must save to be encoded on its own (`suffix_trunks`). Rows left in one trie
#: share their beginning there too, so a trunk buys smaller tries (their attention is dense,
#: [W, W]) and beginnings that no longer repeat across tries, for one more forward. Measured
#: on SmolLM2, text2sql with its worked example, one batch of 2 x 4 at 2 threads (replay
#: seconds): 64: 3.07, 128: 2.97, 256: 2.69, 512: 2.54, 1024: 2.57, no trunks: 2.85.
TRUNK_MIN_SAVED = 512


@dataclass(frozen=True)
class ReplayOptions:
    """Which kinds of sharing the shared-prefix replay uses beyond the prefix (all exact):

    - `suffixes`: context suffixes that begin alike share that beginning (`cluster_suffixes`);
    - `tries`: responses after one suffix, and rows whose suffix is theirs alone, are fed as
      token tries (`build_tries`); off: a row per sequence;
    - `copies`: positions whose distances an item with the same contexts and the same
      beginning already has are copied (`CopiedPositions`), not sent through the head and JS;
    - `common`: the beginning every group's prefix shares (the system text and a worked
      example, before each prompt's own question) is encoded once for all the groups;
    - `trunks`: all items in one group, and every row's context suffix nested by the
      beginnings it shares with others (`suffix_trunks`): each encoded once where that saves
      `TRUNK_MIN_SAVED` tokens (`FORWARD_TOKENS` with tries off), the rest fed as tries. A run
      of rows below the bar is not searched for longer trunks inside it (rows that share a
      long beginning only within such a run get none). It takes the place of `suffixes`
      and `common` (one level of shared beginnings for the suffixes several responses share,
      and the beginning the groups' prefixes share), which apply with it off.
    """

    suffixes: bool = True
    tries: bool = True
    copies: bool = True
    common: bool = True
    trunks: bool = True


@dataclass
class ItemPlan:
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
    rows: list[Row]


def plan_item(item: ReplayItem, index: int) -> ItemPlan:
    """Item `index`'s distinct contexts (checked: K + 1 contexts, none empty)."""
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
    return ItemPlan(contexts, which, slots)


def replay_groups(items: Sequence[ReplayItem], shared_prefix: bool = True,
                  one_group: bool = False) -> list[ReplayGroup]:
    """What the replay feeds the model: groups of items, each a prefix and its rows.

    With `shared_prefix=False` there is one group with an empty prefix (every row is a whole
    context plus the response). `one_group` (`ReplayOptions.trunks`, whose trunks take over
    the nesting): one group whose prefix is what all the items' contexts share. Items with
    nothing to replay (every block empty, or an empty response) appear in no group.
    """
    plans = [plan_item(item, i) for i, item in enumerate(items)]
    active = [n for n, p in enumerate(plans) if p.active and items[n].response_ids]
    groups = prefix_groups(plans, active) if shared_prefix else ([(0, active)] if active else [])
    if one_group and len(groups) > 1:
        first = [plans[members[0]].contexts[0][:length] for length, members in groups]
        groups = [(common_prefix(first), [n for _, members in groups for n in members])]
    out = []
    for prefix_len, members in groups:
        rows = [(n, slot, ctx[prefix_len:] + list(items[n].response_ids))
                for n in members for slot, ctx in zip(plans[n].slots, plans[n].contexts)]
        out.append(ReplayGroup(list(plans[members[0]].contexts[0][:prefix_len]), list(members), rows))
    return out


def replay_tokens(items: Sequence[ReplayItem], shared_prefix: bool = True, batch_tokens: int = 8192,
                  tree_tokens: int = 1024, model=None, options: ReplayOptions = ReplayOptions()) -> int:
    """Tokens the replay feeds through the model (padding excluded), for cost accounting.

    Plain: every distinct context plus the response. Shared prefix: each group's prefix once;
    each context suffix that several responses share once, plus the nodes of its responses'
    tries; the nodes of the tries of every other (context suffix + response) row; with
    `options.trunks`, the beginnings these suffixes share (`suffix_trunks`) once; a beginning
    shared in a trie once, a row's last token not at all. As `distances` with the same
    `batch_tokens`, `tree_tokens` and `options` feeds them to `model` (which tries pay depends
    on its shape; None: every sequence that shares a beginning joins its trie).
    """
    groups = replay_groups(items, shared_prefix, one_group=options.trunks)
    if not shared_prefix:
        return sum(len(ids) for g in groups for _, _, ids in g.rows)
    tree_nodes, keys = (trie_settings(model.config, tree_tokens, options) if model is not None
                        else (tree_tokens if options.tries else 0, math.inf))

    def fed(seqs) -> int:
        return sum(len(tree.tokens) for tree in build_tries(seqs, tree_nodes, keys))

    common = groups_common(groups, options)
    total = common
    for g in groups:
        total += len(g.prefix) - common
        for wave in waves(g, items, 2 * batch_tokens):
            singles, branches = split_branches(wave, items)
            if options.trunks:
                total += suffix_trunks(singles, branches, items, tries=bool(tree_nodes)).fed(
                    lambda rows, depth: fed([(None, ids[depth:-1]) for _, _, ids in rows]))
                continue
            total += fed([(None, ids[:-1]) for _, _, ids in singles])
            for shared, members in cluster_suffixes(branches, options=options):
                total += len(shared) + sum(len(branches[b][0]) - len(shared) + fed(
                    [(None, items[n].response_ids[:-1]) for n, _ in branches[b][1]]) for b in members)
    return total


def common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest beginning all `seqs` share (0 for no sequences)."""
    if not seqs:
        return 0
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for s in seqs[1:]:
        i = 0
        while i < n and s[i] == first[i]:
            i += 1
        n = i
    return n


def groups_common(groups: Sequence[ReplayGroup], options: ReplayOptions = ReplayOptions()) -> int:
    """The beginning all the groups' prefixes share, encoded once for all of them (0: none, one
    group, or `options.common` off)."""
    return common_prefix([g.prefix for g in groups]) if options.common and len(groups) > 1 else 0


def prefix_groups(plans: Sequence[ItemPlan], active: Sequence[int]) -> list[tuple[int, list[int]]]:
    """Items whose contexts share the same common prefix -> (prefix length, item indices).

    All responses of one prompt have the same prefix (P0 and the response-independent blocks
    come first), so they land in one group. The prefix stops at least one token short of every
    context, so each suffix holds the position that predicts the first response token.
    """
    by_key: dict[tuple[int, ...], list[int]] = {}
    for n in active:
        ctxs = plans[n].contexts
        key = tuple(ctxs[0][:common_prefix(ctxs)])
        by_key.setdefault(key, []).append(n)
    out = []
    for key, members in by_key.items():
        shortest = min(len(c) for n in members for c in plans[n].contexts)
        out.append((min(len(key), shortest - 1), members))
    return out


def item_batches(group: ReplayGroup, batch_tokens: int) -> list[list[Row]]:
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


def split_branches(rows, items) -> tuple[list, list[tuple[list[int], list[tuple[int, int]]]]]:
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


def cluster_suffixes(branches, min_shared: int = 16,
                     options: ReplayOptions = ReplayOptions()) -> list[tuple[list[int], list[int]]]:
    """Branches whose suffixes begin with the same `min_shared` or more tokens, grouped ->
    [(their common beginning, branch indices)]; a branch alone gets an empty beginning. The
    beginning stops at least one token short of each suffix (whose last position predicts the
    first response token). Suffixes are sorted, so those that begin alike are neighbours.
    With `options.suffixes` off, every branch is alone."""
    if not options.suffixes:
        return [([], [b]) for b in range(len(branches))]
    order = sorted(range(len(branches)), key=lambda b: branches[b][0])
    runs: list[list[int]] = []
    for b in order:
        if runs and common_prefix([branches[runs[-1][-1]][0], branches[b][0]]) >= min_shared:
            runs[-1].append(b)
        else:
            runs.append([b])
    out = []
    for run in runs:
        suffixes = [branches[b][0] for b in run]
        n = min(common_prefix(suffixes), min(len(x) for x in suffixes) - 1) if len(run) > 1 else 0
        out.append((list(suffixes[0][:n]) if n >= min_shared else [], run))
    return out


@dataclass
class Trunk:
    """Rows nested by the beginnings of their context suffixes (`suffix_trunks`): `shared` is
    encoded once on the parent trunk's cache (the group's prefix for the root, whose `shared`
    is empty); then, on this trunk's cache, `depth` positions past the group's prefix, `rows`
    are fed from `depth` (the rest of the suffix and the response) as tries, and each of
    `kids` goes on from it."""

    shared: list[int]
    depth: int
    rows: list[Row]
    kids: list["Trunk"]

    def fed(self, feed_rows) -> int:
        """Tokens this trunk and those below it feed: `shared`, plus `feed_rows(rows, depth)`
        (the trie nodes of rows cut at `depth`) at each trunk."""
        return (len(self.shared) + (feed_rows(self.rows, self.depth) if self.rows else 0)
                + sum(k.fed(feed_rows) for k in self.kids))


def suffix_trunks(singles: Sequence[Row], branches, items, tries: bool = True, min_shared: int = 16,
                  min_saved: int | None = None) -> Trunk:
    """The rows of one wave as a tree of trunks: the rows whose context suffix is theirs alone
    and the members of the branches (a suffix several responses share), both from
    `split_branches`, each with its suffix and response. Suffixes that begin with the same
    `min_shared` or more tokens share them, encoded once, and so on within them (the rows of
    one prompt share its worked example and question, a response's rows the blocks before the
    one that differs, a branch's rows their whole suffix). A trunk stops at least one token
    short of each suffix below it (whose last position predicts the first response token, a
    hidden state the JS step keeps), and is kept only where it saves `min_saved` tokens or
    more ((rows - 1) x its length; default `TRUNK_MIN_SAVED`, or `FORWARD_TOKENS` when the
    rows are fed as chains, not `tries`); otherwise its rows go on as tries, which share a
    beginning too, in the same forward as their neighbours'. Rows are sorted, so those that
    begin alike are neighbours."""
    if min_saved is None:
        min_saved = TRUNK_MIN_SAVED if tries else FORWARD_TOKENS
    rows = list(singles) + [(n, slot, list(suffix) + list(items[n].response_ids))
                            for suffix, members in branches for n, slot in members]

    def room(row: Row) -> int:  # positions a trunk may cover: the context suffix but its last
        return len(row[2]) - len(items[row[0]].response_ids) - 1

    def build(run: list[Row], shared: list[int], depth: int) -> Trunk:
        node = Trunk(shared, depth, [], [])
        rooms, i = [room(r) for r in run], 0
        while i < len(run):
            j, c = run_end(run, i, depth, rooms, min_shared)
            if (j - i - 1) * c >= min_saved and c > 0:
                node.kids.append(build(run[i:j], list(run[i][2][depth:depth + c]), depth + c))
            else:
                node.rows.extend(run[i:j])
            i = j
        return node

    return build(sorted(rows, key=lambda r: r[2]), [], 0)


def run_end(run: Sequence[Row], i: int, depth: int, rooms: Sequence[int], min_shared: int) -> tuple[int, int]:
    """(j, c): run[i:j] is the longest run from row i whose rows share `min_shared` or more
    tokens past `depth`, within each row's room (`rooms[k]`: the positions row k's trunk may
    cover), and c what they share (0 for one row). The rows are sorted, so a run shares what
    its first and last rows share: each step compares two rows."""
    j, low_room, c = i + 1, rooms[i], 0
    while j < len(run):
        low = min(low_room, rooms[j])
        both = min(common_prefix([run[i][2][depth:], run[j][2][depth:]]), low - depth)
        if both < min_shared:
            break
        j, low_room, c = j + 1, low, both
    return j, c


@dataclass
class Trie:
    """Responses fed after one context suffix as a token trie: node i is token `tokens[i]` at
    response position `depth[i]`, in preorder (each node after its parent, a subtree's nodes
    contiguous); `paths[m]` lists the nodes of `members[m]`'s response tokens but the last
    (whose output predicts nothing), so a beginning several responses share is fed once."""

    members: list[tuple[int, int]]  # (item, slot)
    tokens: list[int]
    depth: list[int]
    paths: list[list[int]]


def build_tries(seqs, max_nodes: int, keys_per_token: float = math.inf) -> list[Trie]:
    """Sequences [(member, fed tokens)] as tries of at most `max_nodes` nodes (a longer one
    alone; 0: every sequence alone, a chain). Sorted, sequences that begin alike are
    neighbours, and each one's new nodes are those past its common beginning with the one
    before (which keeps the nodes in preorder).

    A trie's attention is dense: each node attends over all W nodes, masked. A sequence joins
    the current trie only if the tokens it saves cost more than that: s shared tokens save
    s token passes, its u new nodes add about 2 * u * W attention keys, and one token through
    a layer's projections costs as much as `keys_per_token` keys (`attention_keys_per_token`).
    """
    trees: list[Trie] = []
    prev: list[int] = []  # the previous sequence of the current trie
    for member, seq in sorted(((m, list(seq)) for m, seq in seqs), key=lambda x: x[1]):
        tree = trees[-1] if trees else None
        shared = common_prefix([prev, seq]) if tree else 0
        new = len(seq) - shared
        if tree is None or not max_nodes or (tree.tokens and (
                len(tree.tokens) + new > max_nodes or shared * keys_per_token < 2 * new * len(tree.tokens))):
            tree, shared = Trie([], [], [], []), 0
            trees.append(tree)
        path = tree.paths[-1][:shared] if shared else []
        path += range(len(tree.tokens), len(tree.tokens) + len(seq) - shared)
        tree.tokens += seq[shared:]
        tree.depth += range(shared, len(seq))
        tree.members.append(member)
        tree.paths.append(path)
        prev = seq
    return trees


def trie_settings(config, tree_tokens: int, options: ReplayOptions = ReplayOptions()) -> tuple[int, float]:
    """(max nodes of a trie, keys per token) for `build_tries` on a model with `config`; max
    nodes 0 (a row per sequence) where its attention takes no tree mask or `options.tries` is
    off."""
    on = options.tries and takes_tree_mask(config)
    return (tree_tokens if on else 0), attention_keys_per_token(config)


def attention_of(config) -> str:
    """The model's attention implementation ("eager" when the config names none, as
    transformers reads it)."""
    return getattr(config, "_attn_implementation", None) or "eager"


def takes_tree_mask(config) -> bool:
    """Whether the model's forward takes a 4D mask as the whole of its attention pattern, as the
    response tries need: sdpa or eager attention (flash attention takes no 4D mask), and no
    sliding-window layer (transformers hands a 4D mask to every layer as given, so a window
    would be dropped). Otherwise the replay feeds a row per response."""
    if attention_of(config) not in ("sdpa", "eager"):
        return False
    types = getattr(config, "layer_types", None)
    if types is not None:
        return all(t == "full_attention" for t in types)
    return not getattr(config, "sliding_window", None) or getattr(config, "use_sliding_window", True) is False


def attention_keys_per_token(config) -> float:
    """How many attention keys cost as much as one token through a decoder layer's projections
    (multiply-adds: q, k, v, o and a gated MLP, against q.k and the weighted sum of v over all
    heads), from the model's config; a cost model for `build_tries`. 1,152 for the built-in
    policy, about 8,300 for a Qwen2.5-0.5B shape."""
    hidden = getattr(config, "hidden_size", 0) or 0
    heads = getattr(config, "num_attention_heads", 0) or 0
    if not hidden or not heads:
        return math.inf
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    q_dim = heads * head_dim
    kv_dim = (getattr(config, "num_key_value_heads", None) or heads) * head_dim
    inner = getattr(config, "intermediate_size", None) or 4 * hidden
    return (2 * hidden * q_dim + 2 * hidden * kv_dim + 3 * hidden * inner) / (2 * q_dim)


def waves(group: ReplayGroup, items, max_positions: int) -> list[list[Row]]:
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


def forwards(rows, batch_tokens: int, overhead: int = FORWARD_TOKENS) -> list[list]:
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


class CopiedPositions:
    """Items whose q is filled, by their distinct contexts. Another item with the same contexts
    whose response begins like one of theirs has the same next-token distributions, hence the
    same q, up to one token past that beginning (the distribution for token t depends on the
    context and tokens < t only): that part is copied, and only the rest goes through the head
    and the JS step. Sampled groups repeat beginnings often (a format, a function name).
    `enabled=False` (`ReplayOptions.copies` off): nothing is copied."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.by_contexts: dict[tuple, list[tuple[tuple[int, ...], int]]] = {}  # sorted (response, item)

    def source(self, n: int, plan: ItemPlan, response: Sequence[int]) -> tuple[int | None, int]:
        """(filled item sharing the longest beginning with item n, or None; how many positions
        of q it shares with n) -- and record n as filled."""
        if not self.enabled:
            return None, 0
        done = self.by_contexts.setdefault((tuple(map(tuple, plan.contexts)), tuple(plan.which)), [])
        resp = tuple(response)
        i = bisect.bisect_left(done, (resp, -1))
        c, source = 0, None
        for other, m in done[max(0, i - 1):i + 1]:  # in sorted order the longest beginning is a neighbour's
            shared = min(common_prefix([other, resp]) + 1, len(other), len(resp))
            if shared > c:
                c, source = shared, m
        bisect.insort(done, (resp, n))
        return source, c
