"""The rollout's encoded prompt start (`plumbing.EncodedStart`): the replay takes the KV of the
beginning its contexts share with the rollout's prompts instead of encoding it again, gives the
same distances, and takes nothing once the weights have changed."""
from __future__ import annotations

import torch

from mrtpo.harness.rollout import prompt_cache, prompt_token_ids, render_prompt
from mrtpo.replay import distances
from mrtpo.replay.plumbing import EncodedStart, decoder_of, weights_key
from replay_task import EX, SQLishTask
from replay_models import TOL, begin_alike_items, load_model


def _prompt_start(model, tokenizer) -> EncodedStart:
    """What `rollout.sample` keeps of a batch of one prompt, EX's P0: all of it but its last
    token (the items of EX2 begin otherwise and take none of it)."""
    ids = [prompt_token_ids(tokenizer, render_prompt(tokenizer, SQLishTask(), EX))]
    with torch.no_grad():
        start = prompt_cache(model, ids, 2, 0).start
    assert start is not None and len(start.ids) > 10
    return start


def _fed_tokens(model, run) -> int:
    """Tokens the decoder was fed while `run()` ran (a hook on the real decoder)."""
    fed = []
    hook = decoder_of(model).register_forward_pre_hook(
        lambda _m, args, kwargs: fed.append(kwargs["input_ids"].numel()), with_kwargs=True)
    try:
        run()
    finally:
        hook.remove()
    return sum(fed)


def test_the_replay_takes_the_rollouts_prompt_start_and_gives_the_same_distances(tiny_qwen2_dir, tiny_tokenizer):
    model = load_model(tiny_qwen2_dir)
    items = begin_alike_items(tiny_tokenizer)
    start = _prompt_start(model, tiny_tokenizer)
    shared = start.reusable(model, items[0].context_ids[0])  # P_all begins as P0 does, up to its blocks
    assert shared > len(start.ids) // 2
    plain = distances(model, items)
    fed_plain = _fed_tokens(model, lambda: distances(model, items))
    got = distances(model, items, known=start)
    fed_known = _fed_tokens(model, lambda: distances(model, items, known=start))
    assert (got - plain).abs().max() <= TOL and plain.max() > 0.1
    # EX2's contexts begin otherwise, so the group's prefix is short: EX's trunks take the rest
    assert fed_plain - fed_known >= shared - 1, (fed_plain, fed_known, shared)
    for kw in ({"tree_tokens": 0}, {"batch_tokens": 40, "chunk_tokens": 5}):
        assert (distances(model, items, known=start, **kw) - plain).abs().max() <= TOL, kw


def test_a_start_from_other_weights_is_not_taken(tiny_qwen2_dir, tiny_tokenizer):
    """An in-place write to any weight (an optimizer step's kind) makes the start stale: the
    replay encodes everything itself and gives the new weights' distances."""
    model = load_model(tiny_qwen2_dir)
    items = begin_alike_items(tiny_tokenizer)
    start = _prompt_start(model, tiny_tokenizer)
    key = weights_key(model)
    with torch.no_grad():
        next(model.parameters()).mul_(1.0)  # the same values, but written: the key moves
    assert weights_key(model) != key and start.reusable(model, items[0].context_ids[0]) == 0
    with torch.no_grad():
        model.get_output_embeddings().weight.add_(0.05)  # other weights: other distances
    fresh = distances(model, items)
    assert (distances(model, items, known=start) - fresh).abs().max() <= TOL
    assert _fed_tokens(model, lambda: distances(model, items, known=start)) == \
        _fed_tokens(model, lambda: distances(model, items))


def test_a_start_holds_only_the_beginning_its_ids_share(tiny_qwen2_dir, tiny_tokenizer):
    model = load_model(tiny_qwen2_dir)
    start = _prompt_start(model, tiny_tokenizer)
    ids = list(start.ids)
    assert start.reusable(model, ids[:5]) == 5
    assert start.reusable(model, ids[:7] + [ids[7] + 1] + ids[8:]) == 7
    assert start.reusable(model, [ids[0] + 1] + ids[1:]) == 0
    cache = start.cache(6)
    assert cache.get_seq_length() == 6
    longer = start.extend(cache, 6, 3)  # positions 6..8 after the first 6; the first cache unchanged
    assert longer.get_seq_length() == 9 and cache.get_seq_length() == 6
    for (k, v), layer in zip(start.layers, longer.layers):
        assert torch.equal(layer.keys, k[:, :, :9]) and torch.equal(layer.values, v[:, :, :9])


def test_no_start_is_kept_from_a_cache_with_sliding_window_layers(tiny_qwen2_dir):
    """A sliding-window layer keeps only its window: its cache is no beginning to reuse."""
    from transformers import DynamicCache

    model = load_model(tiny_qwen2_dir)
    keys = torch.zeros(1, 2, 5, 8)
    plain = DynamicCache(ddp_cache_data=[(keys, keys)])
    assert EncodedStart.of(model, [1, 2, 3, 4, 5], plain) is not None
    model.config.sliding_window, model.config.layer_types = 4, ["sliding_attention"]
    sliding = DynamicCache(config=model.config)
    sliding.update(keys, keys, 0)
    assert type(sliding.layers[0]).__name__ == "DynamicSlidingWindowLayer"
    assert EncodedStart.of(model, [1, 2, 3, 4, 5], sliding) is None
    assert EncodedStart.of(model, [], plain) is None and EncodedStart.of(model, [1], None) is None
