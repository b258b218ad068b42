"""benchmarks/speed/replay_sharing.py: its switches turn each kind of sharing off and the replay's
distances stay the same (the times it prints are measured, not asserted)."""
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
    for name, switches in bench.SETTINGS.items():
        with bench.sharing(*switches):
            assert (distances(model, items) - plain).abs().max() <= 1e-5, name
            fed[name] = replay_tokens(items, model=model)
    assert fed["suffixes"] == replay_tokens(items, tree_tokens=0)  # tries off: a chain per sequence
    assert fed["none of the three"] >= fed["suffixes"] > fed["suffixes + tries"] == fed["suffixes + tries + copies"]
    assert replay_tokens(items, model=model) == fed["suffixes + tries + copies"]  # switches restored
    with bench.sharing(True, True, False):  # copies off: nothing is copied
        import mrtpo.replay as replay

        assert replay._Computed().copy_shared(None, 0, None, [1]) == 0
