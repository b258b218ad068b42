"""The vocabulary head a slice at a time (mrtpo.harness.fast.head_logps) against the plain [M, V] logits."""
from __future__ import annotations

import pytest
import torch

from mrtpo.harness.fast.head_logps import chosen_logps
from mrtpo.harness.forward import token_logps
from mrtpo.replay.plumbing import plain_linear_head


def _plain(hidden, weight, targets, temperature):
    logits = (hidden @ weight.t()).float() / temperature  # [..., V]
    lsm = logits.log_softmax(-1)
    return lsm.gather(-1, targets[..., None])[..., 0], -(lsm.exp() * lsm).sum(-1)


@pytest.mark.parametrize("temperature,width", [(1.0, 7), (0.7, 16), (0.7, 1000), (1.3, 50)])
def test_values_entropies_and_gradients_equal_the_plain_head(temperature, width):
    """Slices that do not divide the vocabulary (7, 16, 50), one slice for all (1000), targets
    in every slice: the same log-probs, entropies and gradients for the hidden states and the
    head's weight as the plain log-softmax, to float rounding."""
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 5, 8, generator=g)  # [N, T, H]
    weight = torch.randn(101, 8, generator=g)  # [V, H]
    targets = torch.randint(0, 101, (3, 5), generator=g)  # [N, T]
    targets[0, 0], targets[0, 1] = 0, 100  # the first word and the last
    upstream = torch.randn(3, 5, generator=g)  # a loss that weighs every position differently

    def run(fn):
        h, w = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
        logp, ent = fn(h, w)
        (logp * upstream).sum().backward()
        return logp.detach(), ent, h.grad, w.grad

    sliced = run(lambda h, w: chosen_logps(h, w, targets, temperature, with_entropy=True, slice_width=width))
    plain = run(lambda h, w: _plain(h, w, targets, temperature))
    for a, b in zip(sliced, plain):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert sliced[0].shape == (3, 5) and not sliced[1].requires_grad


def test_a_frozen_head_gets_no_gradient_and_no_entropy_is_asked():
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(4, 6, generator=g, requires_grad=True)
    weight = torch.randn(30, 6, generator=g)  # frozen (tied embeddings under LoRA)
    logp, ent = chosen_logps(hidden, weight, torch.tensor([0, 5, 29, 7]), 0.7, slice_width=8)
    assert ent is None
    logp.sum().backward()
    assert weight.grad is None and torch.isfinite(hidden.grad).all()


def test_only_a_plain_linear_head_is_sliced(tiny_qwen2_dir):
    """Soft-capped or scaled logits (Gemma, Cohere) and a head with a bias keep the plain path."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir)
    assert plain_linear_head(model) is model.get_output_embeddings().weight
    model.config.final_logit_softcapping = 30.0
    assert plain_linear_head(model) is None
    model.config.final_logit_softcapping = None
    model.config.logit_scale = 0.5
    assert plain_linear_head(model) is None
    model.config.logit_scale = None
    head = model.get_output_embeddings()
    model.set_output_embeddings(torch.nn.Linear(head.in_features, head.out_features, bias=True))
    assert plain_linear_head(model) is None


@pytest.mark.parametrize("share_prompts", [False, True])
def test_token_logps_with_the_sliced_head_equal_the_plain_logits(tiny_qwen2_dir, share_prompts):
    """Through a real LoRA policy in training mode: the same log-probs, entropies and LoRA
    gradients with and without the sliced head, with the prompts shared or not."""
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import Rollout

    policy = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4, lora_dropout=0.0)
    model = policy.model
    model.train()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.normal_(0, 0.1, generator=g)
    prompts = [torch.randint(3, 300, (9,), generator=g).tolist() for _ in range(2)]
    responses = [torch.randint(3, 300, (k,), generator=g).tolist() for k in (4, 6, 2, 5)]
    roll = Rollout(examples=[None] * 4, prompts=[""] * 4, prompt_ids=[prompts[i // 2] for i in range(4)],
                   response_ids=responses, responses=[""] * 4, truncated=[False] * 4, group_size=2)
    b = roll.batch(policy.pad_id)
    t = b.response_mask.shape[1]

    def run(sliced: bool):
        model.zero_grad(set_to_none=True)
        logp, ent = token_logps(model, b.input_ids, b.attention_mask, b.position_ids, t, 0.7, with_entropy=True,
                                share_prompts=share_prompts, sliced_head=sliced)
        (logp * b.response_mask * torch.linspace(-1, 1, t)).sum().backward()
        m = b.response_mask.bool()
        return [logp.detach()[m], ent[m]] + [p.grad.clone() for p in policy.trainable_parameters()]

    for a, c in zip(run(True), run(False)):
        torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-4)


def test_positions_that_share_a_hidden_row_equal_their_own_rows():
    """`rows`: positions reading one hidden row (with the same target twice, and with other
    targets) give what each position's own copy of the row gives, values, entropies and
    gradients (summed over the positions that share a row)."""
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(4, 8, generator=g)  # [M, H]
    weight = torch.randn(61, 8, generator=g)  # [V, H]
    rows = torch.tensor([[0, 1, 1, 3], [0, 3, 1, 3]])  # [N, T]: row 2 unread; (1, 60), (3, 0) twice
    targets = torch.tensor([[5, 60, 60, 0], [7, 33, 60, 0]])  # [N, T]
    upstream = torch.randn(2, 4, generator=g)

    def run(fn):
        h, w = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
        logp, ent = fn(h, w)
        (logp * upstream).sum().backward()
        return logp.detach(), ent, h.grad, w.grad

    shared = run(lambda h, w: chosen_logps(h, w, targets, 0.7, with_entropy=True, slice_width=16, rows=rows))
    copied = run(lambda h, w: chosen_logps(h[rows], w, targets, 0.7, with_entropy=True, slice_width=16))
    for a, b in zip(shared, copied):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert shared[0].shape == (2, 4) and float(shared[2][2].abs().sum()) == 0.0
