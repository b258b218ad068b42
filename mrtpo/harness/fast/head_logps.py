"""Log-probabilities of chosen tokens through the vocabulary head, without [M, V] logits.

The update needs log p(token) at each response position: logits = hidden @ W^T over the whole
vocabulary (SmolLM2: 49,152 words), divided by the sampling temperature, minus their
logsumexp. Computed plainly, the logits and the softmax's temporaries are [M, V] float32
tensors (100 MB each for 8 x 64 response tokens), written and read by half a dozen
elementwise passes in forward and backward, which on CPU took about as long as the head's
matrix products themselves.

`chosen_logps` walks the vocabulary in slices of `slice_width` words instead ([M, Vs] at a
time, small enough to stay in cache), keeping a running max, sum and (for the entropy)
weighted sum, as flash attention does over keys. Backward walks the slices again, recomputing
each slice's logits (one more head product) rather than keeping them:

    d logp_m / d s_mv = [v = target_m] - softmax(s_m)_v,   s = hidden @ W^T / temperature

so grad_hidden = sum over slices of (g * (onehot - p) / temperature) @ W_slice, and W's own
gradient (when it is trained) the transposed products.

Positions that read the same hidden state (`rows`: the update's trie nodes that several
responses share, and the zero state of every position past a response's end) go through the
head once: their log-normaliser is one row's, and the backward sums their g into that row.
The values and gradients are those of the plain computation to float rounding (tested).
"""
from __future__ import annotations

import torch

SLICE_WIDTH = 4096  # vocabulary words per slice: [M, 4096] float32 is 8 MB at M = 512


class _ChosenLogps(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, rows, targets, temperature, slice_width, with_entropy):
        # hidden [M, H], weight [V, H], rows [P] (the hidden row each target's position reads), targets [P]
        m_rows, v = hidden.shape[0], weight.shape[0]
        run_max = torch.full((m_rows,), float("-inf"), device=hidden.device)  # [M]
        run_sum = torch.zeros(m_rows, device=hidden.device)  # [M] sum exp(s - run_max)
        run_dot = torch.zeros(m_rows, device=hidden.device) if with_entropy else None  # [M] sum exp(s - max) s
        chosen = torch.zeros(targets.shape[0], device=hidden.device)  # [P] s at the target
        for lo in range(0, v, slice_width):
            s = _slice_logits(hidden, weight, lo, slice_width, temperature)  # [M, Vs]
            new_max = torch.maximum(run_max, s.amax(-1))  # [M]
            scale = torch.exp(run_max - new_max)  # [M]
            e = torch.sub(s, new_max[:, None]).exp_()  # [M, Vs]
            run_sum = run_sum * scale + e.sum(-1)
            if with_entropy:
                run_dot = run_dot * scale + (e * s).sum(-1)
            run_max = new_max
            inside = (targets >= lo) & (targets < lo + s.shape[1])  # [P]
            picked = s[rows, (targets - lo).clamp(0, s.shape[1] - 1)]  # [P]
            chosen = torch.where(inside, picked, chosen)
        logz = run_max + torch.log(run_sum)  # [M]
        ctx.save_for_backward(hidden, weight, rows, targets, logz)
        ctx.temperature, ctx.slice_width = temperature, slice_width
        entropy = (logz - run_dot / run_sum)[rows] if with_entropy else None  # [P]
        ctx.mark_non_differentiable(*([entropy] if entropy is not None else []))
        return chosen - logz[rows], entropy

    @staticmethod
    def backward(ctx, grad, _grad_entropy):
        hidden, weight, rows, targets, logz = ctx.saved_tensors
        t, width = ctx.temperature, ctx.slice_width
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_h = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device) if need_h else None  # [M, H]
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None  # [V, H]
        g = grad.float()  # [P]
        g_rows = torch.zeros(hidden.shape[0], device=hidden.device).index_add_(0, rows, g)  # [M] summed per row
        for lo in range(0, weight.shape[0], width):
            s = _slice_logits(hidden, weight, lo, width, t)  # [M, Vs]
            gs = torch.sub(s, logz[:, None]).exp_().mul_(-g_rows[:, None])  # [M, Vs] -g p
            at = ((targets >= lo) & (targets < lo + s.shape[1])).nonzero()[:, 0]  # targets in this slice
            gs.index_put_((rows[at], targets[at] - lo), g[at], accumulate=True)  # two positions may share both
            gs = gs.div_(t).to(hidden.dtype)  # d loss / d (hidden @ W_slice^T)
            w = weight[lo:lo + s.shape[1]]  # [Vs, H]
            if need_h:
                grad_h += gs @ w
            if need_w:
                grad_w[lo:lo + s.shape[1]] = gs.t() @ hidden
        return (grad_h.to(hidden.dtype) if need_h else None, grad_w.to(weight.dtype) if need_w else None,
                None, None, None, None, None)


def _slice_logits(hidden, weight, lo: int, width: int, temperature: float) -> torch.Tensor:
    """hidden [M, H] against words lo .. lo + width -> float32 logits / temperature [M, Vs]."""
    s = (hidden @ weight[lo:lo + width].t()).float()  # [M, Vs]
    return s.div_(temperature) if temperature != 1.0 else s  # s is the product's own output


def chosen_logps(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                 with_entropy: bool = False, slice_width: int = SLICE_WIDTH, rows: torch.Tensor | None = None,
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(hidden @ weight^T / temperature) at `targets` -> ([...], entropy [...] or None).

    hidden [..., H], weight [V, H] (a bias-free head), targets [...]. `rows` (the targets'
    shape): the row of hidden [M, H] that each target's position reads, so that positions
    sharing a hidden state (a token trie's shared node, the zero state of padding) go
    through the head once; None: hidden has the targets' shape plus [H], a row each. The
    entropy of each row's distribution comes without gradient, as `forward.token_logps` reports it."""
    lead = targets.shape
    flat_h = hidden.reshape(-1, hidden.shape[-1])  # [M, H]
    flat_t = targets.reshape(-1)  # [P]
    index = (torch.arange(flat_t.shape[0], device=flat_t.device) if rows is None
             else rows.reshape(-1).to(flat_t.device))  # [P]
    logp, entropy = _ChosenLogps.apply(flat_h, weight, index, flat_t, float(temperature), int(slice_width),
                                       bool(with_entropy))
    return logp.reshape(lead), (entropy.reshape(lead) if entropy is not None else None)
