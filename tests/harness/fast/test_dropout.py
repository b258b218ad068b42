"""LoRA dropout that draws the dropped positions (mrtpo.harness.fast.dropout) against torch's dropout."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mrtpo.harness.fast.dropout import (MAX_SPARSE_P, SparseDropout, dropped_positions, sparse_dropout,
                                        use_sparse_dropout)


def _within(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    """Whether a Binomial(n, p) count lies within `sigmas` standard deviations of its mean."""
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("p", [0.05, 0.2])
@pytest.mark.parametrize("draws", [None, 7])
def test_positions_are_a_bernoulli_process(p, draws):
    """Dropped positions are increasing, inside [0, n), as many as a Binomial(n, p) count, as
    many in each tenth of the range, as many dropped pairs of neighbours as independent drops
    give (p^2 of the pairs), and a first position as often 0 as p says. `draws=7` takes the
    path that draws more gaps until they pass n (the first draws nearly always do)."""
    n, g = 200_000, torch.Generator().manual_seed(0)
    pos = dropped_positions(n, p, draws=draws, generator=g)
    assert pos.dtype == torch.long and bool((pos[1:] > pos[:-1]).all())
    assert int(pos[0]) >= 0 and int(pos[-1]) < n
    assert _within(pos.numel(), n, p)
    tenths = torch.bincount(pos * 10 // n, minlength=10)
    assert all(_within(int(c), n // 10, p) for c in tenths)
    dropped = torch.zeros(n, dtype=torch.bool)
    dropped[pos] = True
    assert _within(int((dropped[1:] & dropped[:-1]).sum()), n - 1, p * p, sigmas=6.0)
    firsts = sum(int(dropped_positions(50, p, draws=draws, generator=g)[:1].eq(0).sum()) for _ in range(2000))
    assert _within(firsts, 2000, p)


def test_positions_end_at_n_whatever_the_draws():
    """The extended draws cover the whole range: the last dropped position lies near n, not
    where the first few gaps ended."""
    pos = dropped_positions(100_000, 0.05, draws=3, generator=torch.Generator().manual_seed(1))
    assert int(pos[-1]) > 100_000 - 400 and _within(pos.numel(), 100_000, 0.05)
    assert dropped_positions(0, 0.05).numel() == 0
    with pytest.raises(ValueError, match="0 < p < 1"):
        dropped_positions(10, 0.0)


def test_sparse_dropout_matches_torch_dropout_in_distribution_and_gradient():
    """Kept elements scaled by 1/(1-p) in the input's dtype, dropped ones zero, the share
    dropped as torch's (both within the binomial bounds), and the gradient the mask itself."""
    p = 0.05
    x = torch.randn(300, 400, requires_grad=True)
    y = sparse_dropout(x, p, generator=torch.Generator().manual_seed(2))
    kept = y != 0
    torch.testing.assert_close(y[kept], (x * (1.0 / (1.0 - p)))[kept], rtol=0, atol=0)
    assert _within(int((~kept).sum()), x.numel(), p)
    assert _within(int((F.dropout(x, p, training=True) == 0).sum()), x.numel(), p)
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / (1.0 - p), rtol=0, atol=0)
    half = sparse_dropout(x.detach().bfloat16(), p)
    assert half.dtype == torch.bfloat16 and half.shape == x.shape
    xt = x.detach().t().requires_grad_(True)  # a transposed view: dropped over its elements alike
    yt = sparse_dropout(xt, p)
    yt.backward(torch.ones_like(yt))
    assert yt.shape == xt.shape and torch.equal(xt.grad == 0, yt == 0)
    torch.testing.assert_close(yt[yt != 0], (xt * (1.0 / (1.0 - p)))[yt != 0], rtol=0, atol=0)


def test_module_is_dropout_in_train_mode_only():
    """Eval mode, p = 0 and empty inputs pass through; above MAX_SPARSE_P torch's dropout
    runs; the same seed gives the same mask (the trainer's seeded runs repeat)."""
    x = torch.randn(64, 32)
    drop = SparseDropout(0.05)
    assert drop.eval()(x) is x and SparseDropout(0.0).train()(x) is x
    drop.train()
    torch.manual_seed(3)
    a = drop(x)
    torch.manual_seed(3)
    torch.testing.assert_close(drop(x), a, rtol=0, atol=0)
    assert bool((a == 0).any()) and not torch.equal(a, x)
    wide = SparseDropout(MAX_SPARSE_P + 0.2).train()(torch.ones(10_000))
    assert _within(int((wide == 0).sum()), 10_000, MAX_SPARSE_P + 0.2)
    assert SparseDropout(0.05).train()(torch.zeros(0, 4)).shape == (0, 4)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        SparseDropout(1.0)


def test_load_policy_swaps_peft_dropout_on_cpu(tiny_llama_dir, tmp_path):
    """Through the trainer's loader: every LoRA branch of a CPU policy with dropout gets the
    sparse module of the same rate, the update's forward and backward run with it, and the
    saved adapter still says peft's rate; a policy without dropout keeps peft's identity."""
    from peft import LoraConfig

    from mrtpo.harness.policy import load_policy

    policy = load_policy(str(tiny_llama_dir), lora=True, lora_r=4, lora_dropout=0.05, device="cpu")
    drops = [m for m in policy.model.modules() if isinstance(m, SparseDropout)]
    assert drops and all(d.p == 0.05 for d in drops)
    assert not any(type(m) is torch.nn.Dropout for m in policy.model.modules())
    assert use_sparse_dropout(policy.model) == 0  # nothing left to swap
    policy.model.train()
    ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
    loss = policy.model(input_ids=ids, labels=ids).loss
    loss.backward()
    grads = [p.grad for p in policy.trainable_parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    policy.model.save_pretrained(tmp_path / "adapter")
    assert LoraConfig.from_pretrained(tmp_path / "adapter").lora_dropout == 0.05
    plain = load_policy(str(tiny_llama_dir), lora=True, lora_r=4, lora_dropout=0.0, device="cpu")
    assert not any(isinstance(m, SparseDropout) for m in plain.model.modules())
    peft_own = load_policy(str(tiny_llama_dir), lora=True, lora_r=4, lora_dropout=0.05, device="cpu",
                           sparse_dropout=False)
    assert not any(isinstance(m, SparseDropout) for m in peft_own.model.modules())
    assert any(type(m) is torch.nn.Dropout for m in peft_own.model.modules())
