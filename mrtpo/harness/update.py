"""One policy update on a generation batch: micro-batches, backward, clip, AdamW step.

The batch's B*G completions are split into `grad_accum` micro-batches whose losses are
normalised over the whole batch (loss.aggregate), so accumulation gives the gradient of the
full batch. The log-probs of the first pass are the "old" ones (the model has not moved yet,
so the ratio starts at exactly 1); with `num_iterations > 1` later passes reuse them and the
clip starts to bite. The KL reference log-probs are computed once, without gradients.
Every pass encodes each distinct prompt of a micro-batch once (forward.shared_prompt_hidden):
the G completions of a prompt share its keys and values, and the beginning all the prompts
share (system text, worked example) is encoded once for all of them (harness.prefix).

Rows without a gradient are not differentiated (`skip_zero_rows`, on): with beta = 0 a row
whose advantage is 0 on every response token has a surrogate of exactly 0 whatever its ratio, so
its gradient is exactly 0. Such a row (a group whose rewards were all alike: GRPO and GDPO give
it 0) is run once without gradients, for the entropy and the statistics, and no more; the other
rows' gradient is the same to float rounding (their forward runs in a smaller batch), and the
statistics are the same. A pass with no such row computes exactly what it did before; a pass
where every row is one steps the optimizer with zero gradients, as backward would have left.

A pass whose loss or gradient norm is not finite raises `NonFiniteError` before the optimizer
steps, and so does a step that leaves a weight non-finite (an update too large for the weights):
the weights are never saved that way (the loop checkpoints only after `update` returns).
"""
from __future__ import annotations

import contextlib
import math

import torch

from mrtpo.harness.forward import token_logps
from mrtpo.harness.loss import policy_loss, sampling_correction
from mrtpo.harness.rollout import Batch


class NonFiniteError(RuntimeError):
    """A training step's loss, gradient or updated weights are not finite numbers; the message
    says which (the training loop adds the step and what to change)."""


def _all_finite(tensors) -> bool:
    """Whether every element of every tensor is finite (one device sync, not one per tensor)."""
    flags = [torch.isfinite(t.detach()).all() for t in tensors]
    return bool(torch.stack([f.to(flags[0].device) for f in flags]).all()) if flags else True


def check_finite(loss: float, grad_norm: float, dist=None) -> None:
    """Raise NonFiniteError when a pass's loss or gradient norm is nan or infinite. Under
    data parallelism every process agrees (the loss is per process, the norm is not), so all
    of them stop together instead of one waiting for the others in a collective."""
    bad = [f"{what} is {v}" for what, v in (("the loss", loss), ("the gradient norm", grad_norm))
           if not math.isfinite(v)]
    if dist is not None and dist.sum(float(bool(bad))) > 0 and not bad:
        bad = ["the loss or the gradient norm of another process is not finite"]
    if bad:
        raise NonFiniteError(" and ".join(bad))


def micro_batches(n: int, parts: int) -> list[slice]:
    size = -(-n // parts)
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def row_groups(mb: slice, live: torch.Tensor | None) -> list[tuple[slice | torch.Tensor, bool]]:
    """A micro-batch's rows as (rows, with gradient): the slice itself when every row has a
    gradient (`live` None or all true), else the rows with one and the rows without, as index
    tensors (an empty group left out)."""
    if live is None or bool(live[mb].all()):
        return [(mb, True)]
    index = torch.arange(mb.start, mb.stop, device=live.device)  # [n]
    groups = [(index[live[mb]], True), (index[~live[mb]], False)]
    return [(rows, grad) for rows, grad in groups if rows.numel()]


@torch.no_grad()
def reference_logps(policy, batch: Batch, temperature: float, parts: int) -> torch.Tensor:
    t = batch.response_mask.shape[1]
    out = []
    with policy.reference() as ref:
        was_training = ref.training
        ref.eval()  # the base model as it is served: no dropout
        try:
            for mb in micro_batches(batch.input_ids.shape[0], parts):
                b = batch.rows(mb)
                out.append(token_logps(ref, b.input_ids, b.attention_mask, b.position_ids, t, temperature,
                                       share_prompts=True)[0])
        finally:
            ref.train(was_training)
    return torch.cat(out)  # [N, T]


def update(policy, optimizer: torch.optim.Optimizer, batch: Batch, advantages: torch.Tensor, *,
           temperature: float, loss_type: str, epsilon: float, epsilon_high: float | None,
           beta: float, num_iterations: int, grad_accum: int, max_grad_norm: float,
           max_completion_length: int, loss_mask: torch.Tensor | None = None,
           sampling_logps: torch.Tensor | None = None, is_mode: str | None = "sequence_mask",
           is_clip_max: float = 3.0, dist=None, skip_zero_rows: bool = True) -> dict[str, float]:
    """Run `num_iterations` optimizer steps on the batch; return TRL-named statistics.

    `sampling_logps` [N, T]: the tokens' log-probs under the model that sampled them, when it
    was not these weights (--rollout-dtype); the first pass's log-probs are compared with
    them (TRL's sampling/* statistics) and, unless `is_mode` is None, weight each token's
    surrogate by `loss.sampling_correction` (TRL's vllm_importance_sampling_correction).

    `dist` (mrtpo.harness.distributed.Distributed): this process holds one share of a
    data-parallel batch; losses are normalised by the whole batch, gradients averaged over
    processes before clipping (as DDP does), statistics reduced over the whole batch.

    `skip_zero_rows`: rows with no gradient (module doc) skip the backward; off, every row is
    differentiated (tests compare the two).
    """
    model = policy.model
    params = policy.trainable_parameters()
    n, t = batch.response_mask.shape
    mask = batch.response_mask.float() if loss_mask is None else loss_mask.to(batch.response_mask.device).float()  # [N, T]
    adv = advantages.to(mask.device, torch.float32)  # [N, T]
    num_tokens = float(mask.sum())
    if dist is not None:  # each process's share of the whole batch's tokens: the dapo normaliser
        num_tokens = dist.mean(num_tokens)
    ref = reference_logps(policy, batch, temperature, grad_accum) if beta != 0.0 else None  # [N, T]
    old = torch.zeros(n, t, device=mask.device)  # [N, T] filled on the first pass
    is_ratio = None if sampling_logps is None or is_mode is None else torch.ones(n, t, device=mask.device)  # [N, T]
    model.train()
    sums = dict(loss=0.0, tokens=0.0, clip_low=0.0, clip_high=0.0, kl=0.0, entropy=0.0, grad_norm=0.0)
    extremes: list[tuple[float, float]] = []  # per iteration: (clip_ratio/low_min, clip_ratio/high_max)
    # [N] rows whose surrogate has a gradient (all of them with a KL term or skip_zero_rows off)
    live = ((adv != 0) & (mask > 0)).any(1) if beta == 0.0 and skip_zero_rows else None
    for it in range(num_iterations):
        optimizer.zero_grad(set_to_none=True)
        low_min, high_max = [], []
        pass_loss = 0.0
        backward = False
        for mb in micro_batches(n, grad_accum):
            for rows, grad in row_groups(mb, live):
                b = batch.rows(rows)
                if grad or it == 0:
                    with contextlib.nullcontext() if grad else torch.no_grad():
                        logp, entropy = token_logps(model, b.input_ids, b.attention_mask, b.position_ids, t,
                                                    temperature, with_entropy=it == 0, share_prompts=True)  # [n, T]
                else:  # no gradient and no entropy to take: its loss is 0 at any ratio
                    logp = old[rows]
                if it == 0:
                    old[rows] = logp.detach()
                    sums["entropy"] += float((entropy * mask[rows]).sum())
                    if is_ratio is not None:
                        is_ratio[rows] = sampling_correction(old[rows], sampling_logps[rows].to(old.device),
                                                             mask[rows], is_mode, is_clip_max)
                loss, parts = policy_loss(
                    logp, old[rows], adv[rows], mask[rows], ref_logp=None if ref is None else ref[rows],
                    beta=beta, epsilon=epsilon, epsilon_high=epsilon_high, loss_type=loss_type,
                    num_sequences=n, num_tokens=num_tokens, max_completion_length=max_completion_length,
                    is_ratio=None if is_ratio is None else is_ratio[rows])
                if grad:
                    loss.backward()
                    backward = True
                pass_loss += float(loss.detach())
                for key in ("tokens", "clip_low", "clip_high", "kl"):
                    sums[key] += getattr(parts, key)
                low_min.append(parts.clip_low_min)
                high_max.append(parts.clip_high_max)
        if not backward:  # every row without gradient: the zero gradients backward would have left
            for p in params:
                p.grad = torch.zeros_like(p)
        extremes.append(_extremes(low_min, high_max, dist))
        if dist is not None:
            dist.average_gradients(params)  # every process steps with the whole batch's gradient
        norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm > 0 else float("inf"))
        check_finite(pass_loss, float(norm), dist)  # before the step: the weights are still sound
        sums["loss"] += pass_loss
        sums["grad_norm"] += float(norm)
        optimizer.step()
        if not _all_finite(params):  # finite gradients, but a step (lr, alpha) too large for them
            raise NonFiniteError(f"the optimizer step made weights non-finite (from finite loss {pass_loss} "
                                 f"and gradient norm {float(norm)})")
    optimizer.zero_grad(set_to_none=True)
    if dist is not None:  # whole-batch statistics: counts add up, per-process losses average
        sums = {k: dist.sum(v) / (dist.world_size if k in ("loss", "entropy", "grad_norm") else 1)
                for k, v in sums.items()}
    tok = max(sums["tokens"], 1.0)
    stats = {
        "loss": sums["loss"] / num_iterations,
        "grad_norm": sums["grad_norm"] / num_iterations,
        "entropy": sums["entropy"] / max(num_tokens, 1.0),
        "clip_ratio/low_mean": sums["clip_low"] / tok,
        "clip_ratio/high_mean": sums["clip_high"] / tok,
        "clip_ratio/region_mean": (sums["clip_low"] + sums["clip_high"]) / tok,
    }
    stats["clip_ratio"] = stats["clip_ratio/region_mean"]
    stats["clip_ratio/low_min"] = sum(e[0] for e in extremes) / len(extremes)
    stats["clip_ratio/high_max"] = sum(e[1] for e in extremes) / len(extremes)
    if beta != 0.0:
        stats["kl"] = sums["kl"] / tok
    if sampling_logps is not None:
        stats.update(sampling_stats(old, sampling_logps.to(old.device), mask, is_ratio, dist))
    return stats


def sampling_stats(old: torch.Tensor, sampling: torch.Tensor, mask: torch.Tensor,
                   is_ratio: torch.Tensor | None, dist=None) -> dict[str, float]:
    """TRL's sampling/* statistics over the batch's response tokens: |old - sampling| mean and
    max, and the importance weights' min, mean and max (when the correction is on)."""
    m = mask > 0  # [N, T]
    delta = (old - sampling).abs()[m]  # [tokens]
    parts = {"sum": float(delta.sum()), "n": float(delta.numel()), "max": float(delta.max()) if delta.numel() else 0.0}
    w = is_ratio[m] if is_ratio is not None else None  # [tokens]
    if w is not None:
        parts.update(w_sum=float(w.sum()), w_min=float(w.min()) if w.numel() else 1.0,
                     w_max=float(w.max()) if w.numel() else 1.0)
    if dist is not None and dist.active:
        every = dist.gather_objects([parts])
        parts = {k: (sum if k in ("sum", "n", "w_sum") else min if k == "w_min" else max)(p[k] for p in every)
                 for k in parts}
    n = max(parts["n"], 1.0)
    out = {"sampling/sampling_logp_difference/mean": parts["sum"] / n,
           "sampling/sampling_logp_difference/max": parts["max"]}
    if w is not None:
        out.update({"sampling/importance_sampling_ratio/min": parts["w_min"],
                    "sampling/importance_sampling_ratio/mean": parts["w_sum"] / n,
                    "sampling/importance_sampling_ratio/max": parts["w_max"]})
    return out


def _extremes(low_min: list[float], high_max: list[float], dist=None) -> tuple[float, float]:
    """One iteration's min of the per-sequence low-clip shares and max of the high-clip ones,
    over every micro-batch (and process); NaN entries (no tokens) skipped, 0.0 if all are."""
    if dist is not None and dist.active:
        low_min, high_max = dist.gather_objects(low_min), dist.gather_objects(high_max)
    lows = [v for v in low_min if v == v]
    highs = [v for v in high_max if v == v]
    return (min(lows) if lows else 0.0), (max(highs) if highs else 0.0)
