"""Decoding attention over each prompt's cached columns once per group (mrtpo.harness.fast.cascade)."""
from __future__ import annotations

import types

import pytest
import torch

from mrtpo.harness.fast.cascade import _PLAN, cascade_attention, shared_prompt_attention


def _sdpa(module, query, key, value, mask):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, mask)[0]


def _decode_inputs(seed: int, prompts: int = 3, group: int = 4, heads: int = 6, kv_heads: int = 2,
                   width: int = 11, room: int = 9, dim: int = 8):
    """One decoding step's query [N, H, 1, d] and cache [N, K, W + room, d] where rows of a group
    share their first `width` columns (with some left padding), then own columns, partly filled."""
    g = torch.Generator().manual_seed(seed)
    n = prompts * group
    key = torch.randn(n, kv_heads, width + room, dim, generator=g)
    value = torch.randn(n, kv_heads, width + room, dim, generator=g)
    for p in range(prompts):  # a group's rows hold the same prompt columns
        rows = slice(p * group, (p + 1) * group)
        key[rows, :, :width] = key[p * group, :, :width]
        value[rows, :, :width] = value[p * group, :, :width]
    mask = torch.ones(n, 1, 1, width + room, dtype=torch.bool)
    mask[group:2 * group, ..., 3:6] = False  # the second prompt is shorter: padding after the common part
    filled = torch.randint(1, room + 1, (n,), generator=g)  # each row's own tokens so far (the current one included)
    for i in range(n):
        mask[i, ..., width + int(filled[i]):] = False
    query = torch.randn(n, heads, 1, dim, generator=g)
    module = types.SimpleNamespace(num_key_value_groups=heads // kv_heads, is_causal=True)
    return module, query, key, value, mask


@pytest.mark.parametrize("seed,group,heads,kv_heads", [(0, 4, 6, 2), (1, 2, 9, 3), (2, 3, 4, 4)])
def test_two_part_attention_equals_one_softmax_over_all_columns(seed, group, heads, kv_heads):
    module, query, key, value, mask = _decode_inputs(seed, group=group, heads=heads, kv_heads=kv_heads)
    token = _PLAN.set((group, 11, []))
    try:
        out, _ = cascade_attention(module, query, key, value, mask)
    finally:
        _PLAN.reset(token)
    torch.testing.assert_close(out, _sdpa(module, query, key, value, mask), atol=1e-5, rtol=1e-5)
    assert out.shape == (query.shape[0], 1, heads, query.shape[-1])


def test_the_cpu_kernel_and_the_plain_products_agree():
    from mrtpo.harness.fast.cascade import _part, additive

    _, query, key, value, mask = _decode_inputs(4)
    q = query.reshape(query.shape[0], 2, 3, query.shape[-1])  # [N, K, rep, d]
    add = additive(mask, q.dtype)
    kernel, plain = _part(q, key, value, add, 0.3), _part(q, key, value, add, 0.3, use_kernel=False)
    for a, b in zip(kernel, plain):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_without_a_plan_or_for_longer_queries_it_is_sdpa():
    module, query, key, value, mask = _decode_inputs(3)
    torch.testing.assert_close(cascade_attention(module, query, key, value, mask)[0],
                               _sdpa(module, query, key, value, mask))  # no plan: outside the rollout
    token = _PLAN.set((4, 11, []))
    try:
        q2 = torch.randn(query.shape[0], query.shape[1], 2, query.shape[3])  # a two-token query (not decoding)
        m2 = mask.expand(-1, -1, 2, -1)
        torch.testing.assert_close(cascade_attention(module, q2, key, value, m2)[0], _sdpa(module, q2, key, value, m2))
    finally:
        _PLAN.reset(token)


@pytest.mark.parametrize("model_dir", ["tiny_qwen2_dir", "tiny_llama_dir"])
def test_sampling_with_it_draws_the_same_completions_and_restores_the_model(model_dir, request):
    from mrtpo.harness.distributed import RowSeededSampling
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import sample
    from mrtpo.tasks import get_task

    policy = load_policy(str(request.getfixturevalue(model_dir)), lora=True, lora_r=4, lora_dropout=0.0)
    task = get_task("toolcall")
    examples = task.load()[:2]
    before = policy.model.config._attn_implementation

    def run(cascade: bool, static_cache: bool = True):
        return sample(policy, task, examples, 3, temperature=0.9, max_new_tokens=12, cascade=cascade,
                      static_cache=static_cache, logits_processor=[RowSeededSampling(5, 1, 0, 0.9)]).response_ids

    assert run(True) == run(False) == run(True, static_cache=False)
    assert policy.model.config._attn_implementation == before == "sdpa"
    with torch.no_grad(), policy.sampler() as model, shared_prompt_attention(model, 3, 10) as on:
        assert on and model.config._attn_implementation == "mrtpo_cascade"
    assert policy.model.config._attn_implementation == "sdpa"


def test_it_leaves_other_attention_implementations_and_single_rows_alone(tiny_qwen2_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir, attn_implementation="eager")
    with shared_prompt_attention(model, 4, 10) as on:
        assert not on and model.config._attn_implementation == "eager"
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir)
    with shared_prompt_attention(model, 1, 10) as on:
        assert not on
