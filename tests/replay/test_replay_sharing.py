"""benchmarks/speed/replay_sharing.py: its settings (`ReplayOptions`) turn each kind of sharing off
and the replay's distances stay the same (the times it prints are measured, not asserted)."""
from __future__ import annotations

from benchmarks.speed import replay_sharing as bench
from mrtpo.replay import distances, replay_tokens
from replay_models import begin_alike_items, load_model


def test_each_setting_feeds_what_it_says_and_gives_the_same_distances(tiny_qwen2_dir, tiny_tokenizer):
    model = load_model(tiny_qwen2_dir)
    items = begin_alike_items(tiny_tokenizer)
    full = distances(model, items, shared_prefix=False)
    fed = {}
    for name, options in bench.settings().items():
        assert (distances(model, items, options=options) - full).abs().max() <= 1e-5, name
        fed[name] = replay_tokens(items, model=model, options=options)
    one_level = bench.settings()["suffixes"]
    assert fed["suffixes"] == replay_tokens(items, tree_tokens=0, options=one_level)  # tries off: a chain each
    assert fed["none of the three"] >= fed["suffixes"] > fed["suffixes + tries"] == fed["suffixes + tries + copies"]
    assert fed["nested trunks + tries + copies"] <= fed["suffixes + tries + copies"]
    assert replay_tokens(items, model=model) == fed["nested trunks + tries + copies"]  # the defaults: all on
    from mrtpo.replay.planning import CopiedPositions

    assert CopiedPositions(enabled=False).source(0, None, [1]) == (None, 0)  # copies off: nothing is copied


def test_the_parts_timers_cover_the_replays_parts(tiny_qwen2_dir, tiny_tokenizer):
    """`timing.time_prefixes` encodes each group's prefix once; `time_head_and_js_parts` times
    the head, the log-softmax and both JS steps (the figures are measured, not asserted)."""
    from benchmarks.speed import timing
    from mrtpo.replay import replay_groups

    model = load_model(tiny_qwen2_dir)
    items = begin_alike_items(tiny_tokenizer)
    seconds, tokens = timing.time_prefixes(model, items)
    assert tokens == sum(len(g.prefix) for g in replay_groups(items, True)) > 0 and seconds > 0
    parts = timing.time_head_and_js_parts(model, items, temperature=0.7)
    assert set(parts) == {"head", "log_softmax", "js", "js_pairwise"} and all(v > 0 for v in parts.values())


def test_replay_hidden_gives_the_replays_own_distances(tiny_qwen2_dir, tiny_tokenizer):
    """The hidden states `timing.replay_hidden` takes, through the head and the JS step, give
    the replay's q: they are the states at each context's response positions."""
    from benchmarks.speed import timing
    import torch
    from mrtpo.replay import head_and_js, head_of

    model = load_model(tiny_qwen2_dir)
    items = begin_alike_items(tiny_tokenizer)
    plans, hidden = timing.replay_hidden(model, items)
    q = torch.zeros(len(items), max(it.num_rewards for it in items), max(len(it.response_ids) for it in items))
    with torch.no_grad():
        for n, (plan, h) in enumerate(zip(plans, hidden)):
            head_and_js(q, n, plan, h, head_of(model), 1.0, 256)
    assert (q - distances(model, items, shared_prefix=False)).abs().max() <= 1e-5



def _run_end_by_definition(run, i, depth, rooms, min_shared):
    """`run_end` by its definition: grow while every row of the run, compared with all the
    others, shares `min_shared` tokens past `depth` within every row's room."""
    from mrtpo.replay.planning import common_prefix

    def shared(k):  # what run[i:k] shares
        return min(common_prefix([r[2][depth:] for r in run[i:k]]), min(rooms[i:k]) - depth)

    j = i + 1
    while j < len(run) and shared(j + 1) >= min_shared:
        j += 1
    return j, shared(j) if j - i > 1 else 0


def test_run_end_matches_its_definition_and_suffix_trunks_nest():
    """A run, found comparing its first and last rows, is the one the definition gives (every
    row compared), on random sorted rows that share beginnings at several depths; the trunk
    trees built from them nest."""
    import random
    from types import SimpleNamespace

    from mrtpo.replay.planning import run_end, suffix_trunks

    rng = random.Random(0)
    deepest = []
    for trial in range(200):
        stems = [[rng.randrange(3) for _ in range(rng.randrange(0, 40))] for _ in range(3)]
        items, rows = [], []
        for n in range(rng.randrange(1, 12)):
            response = [rng.randrange(5) for _ in range(rng.randrange(1, 6))]
            items.append(SimpleNamespace(response_ids=response))
            for slot in range(rng.randrange(1, 3)):
                suffix = rng.choice(stems) + [rng.randrange(3) for _ in range(rng.randrange(1, 30))]
                rows.append((n, slot, suffix + response))
        run = sorted(rows, key=lambda r: r[2])
        rooms = [len(r[2]) - len(items[r[0]].response_ids) - 1 for r in run]
        min_shared = rng.choice([1, 4, 16])
        # below a trunk of depth 2 (its rows all begin with its 2 tokens), and at the top
        below = [(n, slot, [7, 7] + ids) for n, slot, ids in run]
        for rs, room_of, depth in ((run, rooms, 0), (below, [x + 2 for x in rooms], 2)):
            for i in range(len(rs)):
                got = run_end(rs, i, depth, room_of, min_shared)
                assert got == _run_end_by_definition(rs, i, depth, room_of, min_shared), (trial, depth, i)
        deepest.append(_depth(suffix_trunks(rows, [], items, min_shared=min_shared, min_saved=8)))
    assert sum(d >= 1 for d in deepest) > 100 and max(deepest) >= 3  # trunks, nested, not only flat rows


def _depth(trunk) -> int:
    return max((1 + _depth(k) for k in trunk.kids), default=0)
