"""The update skips the backward of rows without a gradient (`skip_zero_rows`) and still gives
the plain update's weights and statistics."""
from __future__ import annotations

import pytest
import torch

from mrtpo.harness.update import row_groups, update
from mrtpo.replay.plumbing import decoder_of


def _batch(pad_id: int):
    from mrtpo.harness.rollout import Rollout

    prompts = [[1, 5, 6], [1, 5, 6], [1, 7, 8, 9], [1, 7, 8, 9], [1, 11], [1, 11]]  # 3 groups of 2
    responses = [[20, 21, 2], [22], [23, 24, 25, 26], [27, 28], [29, 30, 31], [32, 33]]
    roll = Rollout(examples=[None] * 6, prompts=[""] * 6, prompt_ids=prompts, response_ids=responses,
                   responses=[""] * 6, truncated=[False] * 6, group_size=2)
    return roll.batch(pad_id)


def _run(tiny_qwen2_dir, advantages: list[torch.Tensor], skip: bool, **kw):
    """The gradients each optimizer step took, the weights and statistics after one `update` per
    advantage tensor [6, 4], from one seed, and how many positions the decoder ran with gradients in each update."""
    from mrtpo.harness.policy import load_policy

    torch.manual_seed(0)
    policy = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4, lora_dropout=0.0)
    # momentum and weight decay move the weights on a step of zero gradients (as AdamW's do);
    # SGD keeps the gradients' float rounding at its size, where Adam would magnify it
    opt = torch.optim.SGD(policy.trainable_parameters(), lr=0.5, momentum=0.9, weight_decay=0.01)
    calls, grads = [], []
    opt.register_step_pre_hook(lambda *_: grads.append(
        {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.requires_grad}))
    decoder = decoder_of(policy.model)  # what token_logps runs (prompts once, responses as tries)
    decoder.register_forward_hook(  # the positions each forward with gradients ran
        lambda _m, _args, out: calls.append(out[0].shape[:2].numel()) if torch.is_grad_enabled() else None)
    batch = _batch(policy.pad_id)
    settings = dict(temperature=1.0, loss_type="dapo", epsilon=0.2, epsilon_high=None, beta=0.0,
                    num_iterations=2, grad_accum=1, max_grad_norm=1.0, max_completion_length=4)
    settings.update(kw)
    stats, grad_forwards = [], []
    for adv in advantages:
        stats.append(update(policy, opt, batch, adv, skip_zero_rows=skip, **settings))
        grad_forwards.append(sum(calls) - sum(grad_forwards))
    weights = {n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad}
    return grads, weights, stats, grad_forwards


MIXED = torch.tensor([[1.0, 0.5, -0.5, 0], [-1.0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0],
                      [2.0, 1.0, 0.0, 0], [-0.3, 0.3, 0, 0]])  # the middle group has no gradient
NONE = torch.zeros(6, 4)


def _assert_same(a, b):
    """The same gradients at every optimizer step (to float rounding: the live rows' forward runs
    in a smaller batch), so the same weights and statistics."""
    ga, wa, sa, _ = a
    gb, wb, sb, _ = b
    assert len(ga) == len(gb) and ga
    for x, y in zip(ga, gb):
        assert x.keys() == y.keys() and x
        for name in x:
            torch.testing.assert_close(x[name], y[name], atol=1e-6, rtol=1e-4)
    assert wa.keys() == wb.keys()
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], atol=1e-6, rtol=1e-4)
    for x, y in zip(sa, sb):
        assert x.keys() == y.keys()
        for key in x:
            assert x[key] == pytest.approx(y[key], abs=1e-6, rel=1e-5, nan_ok=True), key


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_rows_without_gradient_skip_the_backward_and_change_nothing(tiny_qwen2_dir, grad_accum):
    # a step with a dead group, then one where every row is dead (the optimizer still moves the
    # weights by its momentum and weight decay, as with the zero gradients backward leaves)
    plain = _run(tiny_qwen2_dir, [MIXED, NONE], skip=False, grad_accum=grad_accum)
    fast = _run(tiny_qwen2_dir, [MIXED, NONE], skip=True, grad_accum=grad_accum)
    _assert_same(plain, fast)
    assert 0 < fast[3][0] < plain[3][0] == plain[3][1]  # the dead group ran without
    assert fast[3][1] == 0  # every row dead: nothing ran with gradients
    assert all(not g.any() for g in fast[0][-1].values()) and len(fast[0]) == 4  # the last two steps: zero
    before = _run(tiny_qwen2_dir, [MIXED], skip=True, grad_accum=grad_accum)[1]
    assert any(not torch.equal(before[k], fast[1][k]) for k in before)  # the all-dead step moved them


def test_a_kl_term_gives_every_row_a_gradient(tiny_qwen2_dir):
    plain = _run(tiny_qwen2_dir, [MIXED], skip=False, beta=0.1)
    fast = _run(tiny_qwen2_dir, [MIXED], skip=True, beta=0.1)
    _assert_same(plain, fast)
    assert fast[3] == plain[3]


def test_row_groups():
    live = torch.tensor([True, False, True, True])
    assert row_groups(slice(2, 4), live) == [(slice(2, 4), True)]
    assert row_groups(slice(0, 2), None) == [(slice(0, 2), True)]
    (a, ga), (b, gb) = row_groups(slice(0, 3), live)
    assert a.tolist() == [0, 2] and ga and b.tolist() == [1] and not gb
    (c, gc), = row_groups(slice(1, 2), live)
    assert c.tolist() == [1] and not gc
