"""mrtpo/replay/ as a package: one JS distance, the package imports only itself,
each `ReplayOptions` setting gives the full-forward method's distances, and the one batch replay
onto reward columns (`replay_onto_columns`) that the trainer, TRL and `mrtpo credit` call."""
from __future__ import annotations

import subprocess
import sys

import torch

from mrtpo.replay import ReplayOptions, distances, replay_groups, replay_onto_columns, replay_tokens
from mrtpo.replay.planning import common_prefix, groups_common
from replay_models import TOL, begin_alike_items, load_model, one_thread  # noqa: F401 (a fixture: one torch thread)


def test_one_js_distance_and_the_package_imports_only_itself():
    import mrtpo.advantages
    import mrtpo.replay

    code = ("import sys, mrtpo.replay, mrtpo.advantages; "
            "print(sorted(m for m in sys.modules if m.startswith('mrtpo.') and not m.startswith('mrtpo.replay')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['mrtpo.advantages']"


def test_every_option_gives_the_full_forward_distances(tiny_qwen2_dir, tiny_tokenizer):
    model = load_model(tiny_qwen2_dir)
    items = begin_alike_items(tiny_tokenizer)
    full = distances(model, items, shared_prefix=False)
    fed = {}
    for suffixes in (False, True):
        for tries in (False, True):
            for copies in (False, True):
                for common in (False, True):
                    for trunks in (False, True):
                        options = ReplayOptions(suffixes=suffixes, tries=tries, copies=copies, common=common,
                                                trunks=trunks)
                        assert (distances(model, items, options=options) - full).abs().max() <= TOL, options
                        fed[options] = replay_tokens(items, model=model, options=options)
    assert fed[ReplayOptions(tries=False)] > fed[ReplayOptions()]  # the switch reaches the planning
    assert fed[ReplayOptions(tries=False)] == replay_tokens(items, tree_tokens=0)
    one_level = ReplayOptions(trunks=False)
    assert fed[ReplayOptions()] < fed[one_level]  # nested trunks share more
    groups = replay_groups(items)
    assert len(groups) == 2  # two prompts whose prefixes begin alike (the chat template's system turn)
    assert len(replay_groups(items, one_group=True)) == 1  # trunks take the nesting over
    shared = common_prefix([g.prefix for g in groups])
    assert 0 < shared == groups_common(groups) and groups_common(groups, ReplayOptions(common=False)) == 0
    assert fed[ReplayOptions(common=False, trunks=False)] - fed[one_level] == shared  # encoded once, not twice


def test_replay_onto_columns_lays_each_item_on_its_row_and_columns(tiny_qwen2_dir, tiny_tokenizer):
    model = load_model(tiny_qwen2_dir)
    items = begin_alike_items(tiny_tokenizer)
    whole = distances(model, items)  # [N, K, T]
    n, k, t = whole.shape
    rows = [2 * j + 1 for j in range(n)]  # every other row: the rows between have no item
    columns = [list(range(k))[::-1] if j % 2 else [c + 1 for c in range(k)] for j in range(n)]
    calls = []
    for chunk in (None, 2):
        q = replay_onto_columns(model, items, columns, (2 * n + 1, k + 1, t + 3), rows=rows, chunk=chunk,
                                on_progress=lambda done, total: calls.append((done, total)))
        assert q.dtype == torch.float32 and q.device.type == "cpu"
        expected = torch.zeros(2 * n + 1, k + 1, t + 3)
        for j in range(n):
            for r, col in enumerate(columns[j]):
                expected[rows[j], col, :t] = whole[j, r]
        assert (q - expected).abs().max() <= TOL, chunk
    assert calls == [(n, n)] + [(min(s + 2, n), n) for s in range(0, n, 2)]
    assert replay_onto_columns(model, [], [], (3, 2, 4)).eq(0).all()


def test_common_prefix():
    assert common_prefix([]) == 0
    assert common_prefix([[1, 2, 3]]) == 3
    assert common_prefix([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert common_prefix([[1, 2], []]) == 0
    assert common_prefix([[5, 2], [1, 2]]) == 0
