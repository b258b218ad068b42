"""The policy-gradient loss: clipped surrogate, KL to the base, aggregation.

Pure tensor functions on per-token log-probs (`forward.token_logps`); `update.py` calls them on
micro-batches. Definitions follow TRL's
GRPOTrainer so numbers carry over:

- ratio r_t = exp(logp_t - old_logp_t); per-token loss
  l_t = -min(r_t A_t, clip(r_t, 1 - eps, 1 + eps_high) A_t) + beta * kl_t,
  with kl_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1 (the k3 estimator, >= 0).
- A_t is a token-level advantage [N, T] (MRTPO places credit per token; the plain
  estimators repeat the response's advantage on every token).
- aggregation over the whole generation batch (so micro-batching gives the same gradient):
  dapo: sum_t l m / (tokens in the batch); grpo: mean over sequences of sum_t l m / sum_t m;
  dr_grpo: sum_t l m / (N * max_completion_length).
"""
from __future__ import annotations

from typing import Literal, NamedTuple

import torch

LossType = Literal["dapo", "grpo", "dr_grpo"]

def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(policy || reference), k3 estimator (Schulman): >= 0, unbiased -> [N, T]."""
    d = ref_logp - logp  # [N, T]
    return torch.exp(d) - d - 1.0  # [N, T]


IS_MODES = ("sequence_mask", "sequence_truncate", "token_mask", "token_truncate")


def sampling_correction(old_logp: torch.Tensor, sampling_logp: torch.Tensor, mask: torch.Tensor,
                        mode: str = "sequence_mask", clip_max: float = 3.0) -> torch.Tensor:
    """Importance weights for tokens sampled from another model than the trained one
    (--rollout-dtype bfloat16, --low-precision-fold), as TRL's vllm_importance_sampling_correction
    -> [n, T].

    The ratio is exp(old - sampling) per token (`token_*`) or exp of its sum over the
    completion (`sequence_*`, the same weight on each of its tokens); `*_truncate` caps it at
    `clip_max`, `*_mask` sets ratios above `clip_max` to 0 (the completion or token leaves
    the loss). It multiplies the clipped surrogate of each token; it carries no gradient."""
    m = mask.to(old_logp.dtype)  # [n, T]
    diff = ((old_logp - sampling_logp) * m).detach()  # [n, T]
    if mode.startswith("sequence"):
        diff = diff.sum(-1, keepdim=True)  # [n, 1]
    ratio = torch.exp(diff)  # [n, T] or [n, 1]
    if mode.endswith("truncate"):
        ratio = ratio.clamp(max=clip_max)
    elif mode.endswith("mask"):
        ratio = ratio.masked_fill(ratio > clip_max, 0.0)
    else:
        raise ValueError(f"importance sampling mode must be one of {', '.join(IS_MODES)}, got {mode!r}")
    return ratio.expand_as(m) * m  # [n, T]


class LossParts(NamedTuple):
    """Token-level sums for logging (divide by `tokens` for means)."""

    tokens: float  # response tokens in the micro-batch (mask sum)
    clip_low: float  # tokens clipped at 1 - eps with A < 0
    clip_high: float  # tokens clipped at 1 + eps_high with A > 0
    kl: float  # sum of per-token KL (0 when beta == 0)
    # TRL's clip_ratio/low_min and high_max: over the sequences with tokens, the smallest share
    # of a sequence's tokens clipped low, the largest clipped high (NaN: no such sequence)
    clip_low_min: float = float("nan")
    clip_high_max: float = float("nan")


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, loss_type: LossType, *,
              num_sequences: int, num_tokens: float, max_completion_length: int) -> torch.Tensor:
    """Sum a micro-batch's per-token loss [n, T] with the normaliser of the whole batch -> []."""
    m = mask.to(per_token.dtype)  # [n, T]
    if loss_type == "dapo":
        return (per_token * m).sum() / max(num_tokens, 1.0)
    if loss_type == "grpo":
        per_seq = (per_token * m).sum(-1) / m.sum(-1).clamp(min=1.0)  # [n]
        return per_seq.sum() / num_sequences
    if loss_type == "dr_grpo":
        return (per_token * m).sum() / (num_sequences * max_completion_length)
    raise ValueError(f"loss_type must be 'dapo', 'grpo' or 'dr_grpo', got {loss_type!r}")


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, *, ref_logp: torch.Tensor | None = None, beta: float = 0.0,
                epsilon: float = 0.2, epsilon_high: float | None = None, loss_type: LossType = "dapo",
                num_sequences: int, num_tokens: float, max_completion_length: int,
                is_ratio: torch.Tensor | None = None) -> tuple[torch.Tensor, LossParts]:
    """Clipped surrogate (+ beta KL) for a micro-batch, normalised over the whole batch -> ([], parts).

    `is_ratio` [n, T] (`sampling_correction`): weights the surrogate of each token, not the KL
    term, as TRL weights it."""
    eps_high = epsilon if epsilon_high is None else epsilon_high
    if advantages.shape != logp.shape:
        raise ValueError(f"advantages {tuple(advantages.shape)} must match log-probs {tuple(logp.shape)}")
    ratio = torch.exp(logp - old_logp)  # [n, T]
    clipped = torch.clamp(ratio, 1.0 - epsilon, 1.0 + eps_high)  # [n, T]
    per_token = -torch.min(ratio * advantages, clipped * advantages)  # [n, T]
    if is_ratio is not None:
        per_token = per_token * is_ratio
    kl = None
    if beta != 0.0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs the reference log-probs")
        kl = kl_k3(logp, ref_logp)  # [n, T]
        per_token = per_token + beta * kl
    assert per_token.shape == logp.shape  # a [B, T] advantage must not broadcast to [B, B, T]
    loss = aggregate(per_token, mask, loss_type, num_sequences=num_sequences,
                     num_tokens=num_tokens, max_completion_length=max_completion_length)
    with torch.no_grad():
        m = mask.to(ratio.dtype)  # [n, T]
        low = ((ratio < 1.0 - epsilon) & (advantages < 0)).to(m.dtype) * m  # [n, T]
        high = ((ratio > 1.0 + eps_high) & (advantages > 0)).to(m.dtype) * m  # [n, T]
        seq_tokens = m.sum(-1)  # [n]
        has = seq_tokens > 0  # [n]
        low_seq = low.sum(-1)[has] / seq_tokens[has]  # [n_s]
        high_seq = high.sum(-1)[has] / seq_tokens[has]  # [n_s]
        parts = LossParts(float(m.sum()), float(low.sum()), float(high.sum()),
                          float((kl * m).sum()) if kl is not None else 0.0,
                          float(low_seq.min()) if has.any() else float("nan"),
                          float(high_seq.max()) if has.any() else float("nan"))
    return loss, parts
