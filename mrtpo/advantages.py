"""Advantage estimators as per-reward credit, MRTPO token placement (and the JS distance, re-exported).

Pure torch, no I/O. Scores arrive as `[N, K]` floats: groups of `group_size` consecutive rows
share a prompt; NaN marks a reward that does not apply (instruction following has one reward
per constraint, so K varies per prompt). Every estimator returns `Credit(per_reward [N, K],
offset [N])` whose `per_reward.sum(-1) + offset` is the estimator's response-level advantage;
absent rewards get 0 credit (their share, if any, goes to `offset`). MRTPO's `place` then
puts each reward's credit on the tokens its distances point at, keeping the per-response
mean equal to the response-level advantage.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import torch


EPS = 1e-4  # TRL's and trl-GDPO's epsilon in the std denominators
CV_EPS = 1e-8  # SAW's epsilon (released code)


@dataclass(frozen=True)
class Credit:
    """Per-reward credit: `per_reward.sum(-1) + offset` is the response-level advantage."""

    per_reward: torch.Tensor  # [N, K]
    offset: torch.Tensor  # [N]
    #: the reward weights the estimator used [K]: the task's times SAW's when SAW is on (what the
    #: completions log shows as `reward_weights`); None for credit built by hand
    weights: torch.Tensor | None = None

    @property
    def total(self) -> torch.Tensor:
        return self.per_reward.sum(-1) + self.offset  # [N]


def _check(scores: torch.Tensor, group_size: int) -> torch.Tensor:
    if scores.dim() != 2:
        raise ValueError(f"scores must be [N, K], got shape {tuple(scores.shape)}")
    if group_size < 1 or scores.shape[0] % group_size:
        raise ValueError(f"N={scores.shape[0]} rows are not whole groups of group_size={group_size}")
    if torch.isinf(scores).any():
        raise ValueError("scores contain inf; a reward function returned a non-finite value")
    return scores.float()


def _weights(weights, k: int, like: torch.Tensor) -> torch.Tensor:
    if weights is None:
        return torch.ones(k, dtype=like.dtype, device=like.device)
    w = torch.as_tensor(weights, dtype=like.dtype, device=like.device)
    if w.shape != (k,):
        raise ValueError(f"weights must have K={k} entries, got shape {tuple(w.shape)}")
    return w


def _nanstd(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Unbiased std ignoring NaN; 0 where fewer than two values (never NaN)."""
    mask = ~torch.isnan(x)
    n = mask.sum(dim, keepdim=True)
    mean = torch.nansum(x, dim, keepdim=True) / n.clamp(min=1)
    var = torch.where(mask, (x - mean) ** 2, torch.zeros_like(x)).sum(dim, keepdim=True) / (n - 1).clamp(min=1)
    return torch.where(n > 1, var.sqrt(), torch.zeros_like(var)).squeeze(dim)


def _nanmean(x: torch.Tensor, dim: int) -> torch.Tensor:
    n = (~torch.isnan(x)).sum(dim)
    return torch.where(n > 0, torch.nansum(x, dim) / n.clamp(min=1), torch.zeros_like(n, dtype=x.dtype))


def _all_equal(x: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """True where all non-NaN values along `dim` are equal (up to float rounding).

    Centring such values gives rounding noise (1e-7) instead of 0, which a 1e-4 denominator
    would blow up; the estimators set those entries to exactly 0.
    """
    hi = torch.nan_to_num(x, nan=-float("inf")).amax(dim, keepdim=keepdim)
    lo = torch.nan_to_num(x, nan=float("inf")).amin(dim, keepdim=keepdim)
    scale = torch.nan_to_num(x.abs(), nan=0.0).amax(dim, keepdim=keepdim).clamp(min=1.0)
    return ~((hi - lo) > 1e-6 * scale)  # all-NaN slices (hi < lo) count as equal


def grpo(scores: torch.Tensor, group_size: int, weights=None,
         scale: Literal["group", "batch", "none"] = "group") -> Credit:
    """GRPO: weighted sum of rewards, then group z-score (TRL's `scale_rewards`).

    A = (r - mean_g r) / (std + 1e-4) with r = sum_k w_k s_k (absent rewards count 0) and std
    the unbiased std of r within the group ("group"), over the batch ("batch"), or 1 ("none").
    Linear decomposition: credit_k = w_k (s_k - mean_g s_k) / (std + eps). Where the totals
    being scaled are all equal (std 0) every credit is 0, as the advantage is: otherwise a
    group trading one reward for another, (1, 0) and (0, 1), would get per-reward credit of
    +-0.5 / 1e-4 that cancels in the sum but not once MRTPO puts it on different tokens.
    """
    s = _check(scores, group_size)
    n, k = s.shape
    w = _weights(weights, k, s)
    absent = torch.isnan(s)  # [N, K]
    ws = torch.nan_to_num(s, nan=0.0) * w  # [N, K]
    r = ws.sum(-1)  # [N]
    g = ws.view(-1, group_size, k)  # [N/G, G, K]
    centred = torch.where(_all_equal(g, 1, keepdim=True), torch.zeros_like(g),
                          g - g.mean(1, keepdim=True)).view(n, k)  # [N, K]
    rg = r.view(-1, group_size)  # [N/G, G]
    if scale == "group":
        std = rg.std(1, unbiased=True) if group_size > 1 else torch.zeros(n // group_size)
        std = torch.nan_to_num(std, nan=0.0).repeat_interleave(group_size)  # [N]
        flat = _all_equal(rg, 1).repeat_interleave(group_size)  # [N]
    elif scale == "batch":
        std = torch.nan_to_num(r.std(unbiased=True), nan=0.0).expand(n) if n > 1 else torch.zeros(n)
        flat = _all_equal(r, 0).expand(n)  # [N]
    elif scale == "none":
        std = torch.full((n,), 1.0 - EPS)
        flat = torch.zeros(n, dtype=torch.bool)
    else:
        raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")
    per = centred / (std.to(s) + EPS).unsqueeze(-1)  # [N, K]
    per = torch.where(flat.to(per.device).unsqueeze(-1), torch.zeros_like(per), per)  # [N, K]
    return _absent_to_offset(per, torch.zeros(n, dtype=s.dtype, device=s.device), absent)


def gdpo(scores: torch.Tensor, group_size: int, weights=None) -> Credit:
    """GDPO (TRL's `normalize_then_sum`): per-reward group z-score, weighted sum, batch z-score.

    z_k = (s_k - mean_g s_k) / (std_g s_k + 1e-4) (unbiased; NaN rewards skipped),
    pre = sum_k w_k z_k, A = (pre - mean_B pre) / (std_B pre + 1e-4), one value per completion.
    Credit: w_k z_k / (std_B + eps) per reward, offset -mean_B / (std_B + eps).
    As in TRL for every K, one reward included: with K == 1 the batch z-score still follows
    the group z-score (so it is not GRPO, whose group z-score is the advantage). A row where
    no reward applies (TRL's "unscorable") is left out of the batch statistics and gets 0.
    Where the batch's totals `pre` are all equal (up to the rounding of their terms) every
    credit is 0, as the advantage is (TRL's is 0 up to rounding): a group whose rewards trade
    off, (1, 0) and (0, 1), in a batch with no other spread would otherwise get per-reward
    credit of +-0.87 / 1e-4, which cancels in the sum but not once MRTPO puts it on different
    tokens (grpo's flat case, at the batch's scale; instruct's MRTPO seed 0 took 3 such steps,
    gradient norms of 2,100-2,600 before clipping against a median of 0.74).
    """
    s = _check(scores, group_size)
    n, k = s.shape
    w = _weights(weights, k, s)
    absent = torch.isnan(s)  # [N, K]
    g = s.view(-1, group_size, k)  # [N/G, G, K]
    mean = _nanmean(g, 1).unsqueeze(1)  # [N/G, 1, K]
    std = _nanstd(g, 1).unsqueeze(1)  # [N/G, 1, K]
    z = torch.where(_all_equal(g, 1, keepdim=True) & ~torch.isnan(g), torch.zeros_like(g),
                    (g - mean) / (std + EPS)).view(n, k)  # [N, K], NaN where absent
    wz = torch.nan_to_num(z, nan=0.0) * w  # [N, K]
    pre = wz.sum(-1)  # [N]
    scorable = ~absent.all(-1)  # [N]
    seen = pre[scorable]  # [n_s]
    b_mean = seen.mean() if seen.numel() else pre.new_zeros(())
    b_std = torch.nan_to_num(seen.std(unbiased=True), nan=0.0) if seen.numel() > 1 else pre.new_zeros(())
    denom = b_std + EPS
    per = wz / denom  # [N, K]
    offset = torch.where(scorable, -b_mean / denom, torch.zeros_like(pre))  # [N]
    if seen.numel() and _flat_sum(seen, wz[scorable]):  # the batch's totals are flat: no credit at all
        per, offset = torch.zeros_like(per), torch.zeros_like(offset)
    return _absent_to_offset(per, offset, absent)


def _flat_sum(sums: torch.Tensor, terms: torch.Tensor) -> bool:
    """True when the sums [n] of `terms` [n, K] are all equal up to the rounding of adding
    the terms up: a spread within 1e-6 of the largest row's sum of |terms| (at least 1). Terms
    that cancel (a reward and its mirror 1 - s) leave rounding that grows with the terms, not
    with the sums, which are about 0 there."""
    size = terms.abs().sum(-1).max().clamp(min=1.0)
    return bool(sums.max() - sums.min() <= 1e-6 * size)


def _absent_to_offset(per: torch.Tensor, offset: torch.Tensor, absent: torch.Tensor) -> Credit:
    """Absent rewards get 0 credit; anything they carried moves to the offset (sum unchanged)."""
    moved = torch.where(absent, per, torch.zeros_like(per)).sum(-1)  # [N]
    return Credit(torch.where(absent, torch.zeros_like(per), per), offset + moved)


def saw_weights(scores: torch.Tensor, floors=None) -> torch.Tensor:
    """SAW's per-reward weights `K * CV_k / (sum_j CV_j + 1e-8)` over the batch -> [K].

    CV_k = std_B(s_k - floor_k) / (|mean_B(s_k - floor_k)| + 1e-8), unbiased std, NaN skipped;
    K counts the rewards present in the batch. A saturated reward (std 0) gets weight 0.
    Under GRPO the weights multiply rewards ("reward" level); under GDPO they multiply the
    per-reward advantages ("advantage" level): both are `weights=` of the estimator.
    """
    s = scores.float()
    k = s.shape[1]
    f = torch.zeros(k) if floors is None else torch.as_tensor(floors, dtype=s.dtype)
    shifted = s - f.to(s)  # [N, K]
    mean = _nanmean(shifted, 0)  # [K]
    std = _nanstd(shifted, 0)  # [K]
    cv = std / (mean.abs() + CV_EPS)  # [K]
    present = (~torch.isnan(s)).any(0)  # [K]
    cv = torch.where(present, cv, torch.zeros_like(cv))
    return int(present.sum()) * cv / (cv.sum() + CV_EPS)  # [K]


def estimate(scores: torch.Tensor, group_size: int, estimator: Literal["grpo", "gdpo"] = "gdpo",
             weights=None, saw: Literal["off", "reward", "advantage"] = "off", floors=None,
             scale: Literal["group", "batch", "none"] = "group") -> Credit:
    """One entry point for the trainer: GRPO or GDPO credit, optionally SAW-weighted.

    `saw="reward"` scales rewards before GRPO's sum; `saw="advantage"` scales GDPO's per-reward
    advantages; the SAW paper pairs them that way (GRPO-h / GDPO-h), and either pairing is
    allowed here since both are a reweighting of the estimator's `weights`.
    """
    k = scores.shape[1]
    w = _weights(weights, k, scores.float())
    if saw != "off":
        if saw not in ("reward", "advantage"):
            raise ValueError(f"saw must be 'off', 'reward' or 'advantage', got {saw!r}")
        w = w * saw_weights(scores, floors).to(w)
    if estimator == "grpo":
        return dataclasses.replace(grpo(scores, group_size, w, scale=scale), weights=w)
    if estimator == "gdpo":
        return dataclasses.replace(gdpo(scores, group_size, w), weights=w)
    raise ValueError(f"estimator must be 'grpo' or 'gdpo', got {estimator!r}")


def token_weights(distances: torch.Tensor, mask: torch.Tensor, lam: float = 1.0) -> torch.Tensor:
    """MRTPO weights `(1 - lam) + lam * q / mean_t(q)` per response and reward -> [N, K, T].

    The mean is over the mask's tokens, so weights average exactly 1 there; a reward whose
    distances are all zero on a response (e.g. an empty block) gets weight 1 everywhere.
    Padding gets weight 0.
    """
    q = distances.float()  # [N, K, T]
    m = mask.to(q.dtype).unsqueeze(1)  # [N, 1, T]
    if q.shape[0] != m.shape[0] or q.shape[-1] != m.shape[-1]:
        raise ValueError(f"distances {tuple(q.shape)} and mask {tuple(mask.shape)} disagree")
    n_tok = m.sum(-1).clamp(min=1)  # [N, 1]
    mean_q = (q * m).sum(-1) / n_tok  # [N, K]
    ratio = torch.where(mean_q.unsqueeze(-1) > 0, q / mean_q.clamp(min=1e-30).unsqueeze(-1),
                        torch.ones_like(q))  # [N, K, T]
    return ((1.0 - lam) + lam * ratio) * m  # [N, K, T]


def place(credit: Credit, distances: torch.Tensor | None = None, mask: torch.Tensor | None = None,
          lam: float = 1.0) -> torch.Tensor:
    """MRTPO token advantages `A[n, t] = sum_k w[n, k, t] credit[n, k] + offset[n]` -> [N, T].

    With `distances=None` every token of a response gets its response-level advantage (the
    plain estimator). The mean of A over a response's mask tokens equals `credit.total`.
    """
    if mask is None:
        if distances is None:
            raise ValueError("place needs a mask [N, T] (or distances to take T from)")
        mask = torch.ones(distances.shape[0], distances.shape[-1], dtype=torch.bool)
    m = mask.to(credit.per_reward.dtype)  # [N, T]
    if distances is None:
        return credit.total.unsqueeze(-1) * m  # [N, T]
    w = token_weights(distances, mask, lam)  # [N, K, T]
    if w.shape[1] != credit.per_reward.shape[1]:
        raise ValueError(f"distances have K={w.shape[1]} rewards, credit has {credit.per_reward.shape[1]}")
    a = torch.einsum("nkt,nk->nt", w, credit.per_reward.to(w))  # [N, T]
    return (a + credit.offset.unsqueeze(-1)) * m  # [N, T]


def shuffle_within(distances: torch.Tensor, mask: torch.Tensor,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """The distances [N, K, T] with each (response, reward)'s values permuted among that
    response's own tokens (the mask's) -> [N, K, T]; padding stays as it was.

    A control for MRTPO's placement: `token_weights` of the result has, per response and
    reward, exactly the weights of the original (same mean, same spread) on randomly chosen
    tokens. If the shuffled weights train as well as the real ones, the placement carries no
    usable information and only the reweighting does anything."""
    q = distances.clone()  # [N, K, T]
    n, k, _ = q.shape
    for i in range(n):
        idx = mask[i].nonzero().squeeze(-1)  # [L] this response's token positions
        if idx.numel() < 2:
            continue
        for j in range(k):
            perm = torch.randperm(idx.numel(), generator=generator)  # [L]
            q[i, j, idx] = distances[i, j, idx[perm]]
    return q
