"""benchmarks/speed/replay_sharing.py: its settings (`ReplayOptions`) turn each kind of sharing off
and the replay's distances stay the same (the times it prints are measured, not asserted)."""
from __future__ import annotations

import benchmark_module
from mrtpo.replay import distances, replay_tokens
from test_replay import _begin_alike_items, _load


def test_each_setting_feeds_what_it_says_and_gives_the_same_distances(tiny_qwen2_dir, tiny_tokenizer):
    bench = benchmark_module.load("replay_sharing")
    model = _load(tiny_qwen2_dir)
    items = _begin_alike_items(tiny_tokenizer)
    plain = distances(model, items, shared_prefix=False)
    fed = {}
    for name, options in bench.settings().items():
        assert (distances(model, items, options=options) - plain).abs().max() <= 1e-5, name
        fed[name] = replay_tokens(items, model=model, options=options)
    assert fed["suffixes"] == replay_tokens(items, tree_tokens=0)  # tries off: a chain per sequence
    assert fed["none of the three"] >= fed["suffixes"] > fed["suffixes + tries"] == fed["suffixes + tries + copies"]
    assert replay_tokens(items, model=model) == fed["suffixes + tries + copies"]  # the defaults: all on
    from mrtpo.replay.planning import CopiedPositions

    assert CopiedPositions(enabled=False).source(0, None, [1]) == (None, 0)  # copies off: nothing is copied
