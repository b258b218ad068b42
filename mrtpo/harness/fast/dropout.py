"""LoRA dropout on CPU that draws only the positions it drops: torch's distribution, fewer draws.

peft puts `nn.Dropout(p)` on the input of every LoRA branch (x -> B A dropout(x)). On CPU,
torch's dropout draws one uniform number per element, then divides and multiplies: in
SmolLM2's update (text2sql with the worked example, 2 x 4 completions, about 900 tokens
through 210 LoRA projections) that is about 130 million draws, a second or more of the
forward on 2 cores, where the products it feeds take little more.

With TRL's p = 0.05, a mask drops one element in twenty. `SparseDropout` draws the gaps
between dropped elements instead: a gap is geometric with success probability p, so the
dropped positions form a Bernoulli(p) process over the flattened input, each element dropped
independently with probability p, exactly as torch's mask drops it. The kept elements are
scaled by 1/(1 - p) in the input's dtype, as torch scales them, and the gradient is the
upstream one times the same mask. Only the random stream differs: a seeded run draws other
masks than peft's dropout would (the same distribution), as the update's token tries already
draw one mask per trie node rather than per padded row (`forward.response_trie_hidden`).

`use_sparse_dropout` swaps it in for peft's dropout modules of a policy on CPU
(`policy.load_policy`); on a GPU torch's dropout is one fused kernel, and this module's
host-side count of the draws would wait on the device at every call, so GPU policies keep
peft's. Above MAX_SPARSE_P a mask drops too many elements for gaps to pay, and the module
calls torch's dropout.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

#: dropout rates up to this draw the dropped positions (`dropped_positions`); above it, torch's
#: dropout (a gap per dropped element costs more than a draw per element once a third drop)
MAX_SPARSE_P = 0.25


def dropped_positions(n: int, p: float, draws: int | None = None,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """The positions in [0, n) that a Bernoulli(p) mask drops, increasing -> [k] int64.

    Gaps between successive dropped positions (and from -1 to the first) are geometric on
    {1, 2, ...} with success probability p: floor(log(u) / log(1 - p)) + 1 for u uniform in
    (0, 1]. Their running sum is the dropped positions' 1-based index; the first `draws`
    gaps (default: the expected count plus six standard deviations) nearly always pass n,
    and more are drawn until they do. `generator`: torch's default one when None."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"dropped_positions needs 0 < p < 1, got {p}")
    if n <= 0:
        return torch.zeros(0, dtype=torch.long)
    if draws is None:
        draws = int(n * p + 6.0 * math.sqrt(n * p * (1.0 - p))) + 16
    log_keep = math.log1p(-p)

    def gaps(count: int) -> torch.Tensor:  # [count] float64, each >= 1: log(1 - u) for u in [0, 1)
        u = torch.rand(count, dtype=torch.float64, generator=generator)
        return u.neg_().log1p_().div_(log_keep).floor_().add_(1.0)

    ends = gaps(draws).cumsum_(0)  # [draws] 1-based positions of the dropped elements
    while float(ends[-1]) <= n:  # the draws fell short of n: continue the same process
        ends = torch.cat([ends, gaps(draws).cumsum_(0) + ends[-1]])
    inside = int(torch.searchsorted(ends, float(n), right=True))  # how many are <= n
    return ends[:inside].long() - 1  # [k]


class _Drop(torch.autograd.Function):
    """y = x / (1 - p) with the flat positions `dropped` zeroed; the gradient likewise (one
    pass over the elements each way, no mask tensor kept)."""

    @staticmethod
    def forward(ctx, x, dropped, scale):
        ctx.save_for_backward(dropped)
        ctx.scale = scale
        return _scaled_without(x, dropped, scale)

    @staticmethod
    def backward(ctx, grad):
        (dropped,) = ctx.saved_tensors
        return _scaled_without(grad, dropped, ctx.scale), None, None


def _scaled_without(x: torch.Tensor, dropped: torch.Tensor, scale: float) -> torch.Tensor:
    """x * scale, contiguous, with the flat positions `dropped` [k] set to zero."""
    out = torch.mul(x, scale).contiguous()  # a new tensor: x is never written
    out.view(-1).index_fill_(0, dropped, 0.0)
    return out


def sparse_dropout(x: torch.Tensor, p: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """x with each element dropped (zero) with probability p and the rest scaled by 1/(1-p),
    as `F.dropout(x, p, training=True)` does, the mask drawn as `dropped_positions` (over x's
    elements in row-major order) -> x's shape, contiguous."""
    dropped = dropped_positions(x.numel(), p, generator=generator).to(x.device)  # [k]
    return _Drop.apply(x, dropped, 1.0 / (1.0 - p))


class SparseDropout(torch.nn.Module):
    """`nn.Dropout(p)` with the mask drawn as `dropped_positions` (module doc); the identity
    in eval mode or at p = 0, torch's dropout above MAX_SPARSE_P."""

    def __init__(self, p: float):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout rate must be in [0, 1), got {p}")
        self.p = float(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0 or x.numel() == 0:
            return x
        if self.p > MAX_SPARSE_P:
            return F.dropout(x, self.p, training=True)
        return sparse_dropout(x, self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def use_sparse_dropout(model: torch.nn.Module) -> int:
    """Replace each peft LoRA layer's `nn.Dropout` (0 < p <= MAX_SPARSE_P) of `model` by
    `SparseDropout` of the same rate, when the model is on CPU -> how many were replaced.
    The adapter's weights, config and saved files do not change (dropout has no weights)."""
    param = next(model.parameters(), None)
    if param is None or param.device.type != "cpu":
        return 0
    swapped = 0
    for module in model.modules():
        table = getattr(module, "lora_dropout", None)
        if not isinstance(table, torch.nn.ModuleDict):
            continue
        for name, drop in list(table.items()):
            if type(drop) is torch.nn.Dropout and 0.0 < drop.p <= MAX_SPARSE_P:
                table[name] = SparseDropout(drop.p).train(drop.training)
                swapped += 1
    return swapped
