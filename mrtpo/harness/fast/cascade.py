"""Decoding attention that reads each prompt's keys and values once for its G completions.

While the rollout decodes, row i of the batch is completion i % G of prompt i // G, and the KV
cache holds, per row, the prompt's columns then the row's own tokens. The G rows of a prompt
hold the same prompt columns, yet plain attention reads them once per row: for SmolLM2 on
text2sql, 8 rows x ~520 prompt columns x 30 layers at every new token, about a fifth of a
decoding step on 2 cores.

`cascade_attention` splits each decoding step's attention in two (as FlashInfer's cascade
attention and Hydragen do):

- the prompt's columns, one copy per prompt, attended by the G rows' queries together
  ([B, kv heads, G x query heads per kv head, W]: a product with G times the rows, reading the
  columns once);
- each row's own columns (the tokens it has decoded, and the empty room after them, masked);

and merges the two softmax-weighted sums by their log-sum-exps, which is exact: the same
output as one softmax over all columns, to float rounding (tested). On CPU each part is
torch's flash kernel, which also returns the log-sum-exp. Measured on SmolLM2's rollout
(text2sql, 2 x 4, 64 new tokens): 0.93x of the rollout at 1 thread and at 2, the same
completions. It runs only inside `shared_prompt_attention(G, W)` on CPU, and only for
one-token queries with a boolean mask; every other call (the prefill, training, the replay)
is transformers' own SDPA attention.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

import torch

NAME = "mrtpo_cascade"
# (G, W, memo) while `shared_prompt_attention` is on: rows g*G .. g*G+G-1 share the cache's first W columns
_PLAN: contextvars.ContextVar[tuple[int, int, list] | None] = contextvars.ContextVar("mrtpo_cascade_plan",
                                                                                     default=None)


def _sdpa(*args, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(*args, **kwargs)


def additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask (True: attend) as the additive one torch's CPU flash kernel takes."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))


def _part(query, key, value, mask, scale, use_kernel: bool = True):
    """Softmax attention of `query` [R, K, L, d] over `key`/`value` [R, K, S, d] with the
    additive `mask` [R, 1, 1, S] (None: every column) -> (output [R, K, L, d], log-sum-exp of
    the masked, scaled scores [R, K, L]). torch's CPU flash kernel returns both (and reads
    strided keys in place); elsewhere, or without it, the same in plain products."""
    flash = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if use_kernel and flash is not None and query.device.type == "cpu":
        return flash(query, key, value, attn_mask=mask, scale=scale)
    scores = torch.matmul(query, key.transpose(-1, -2)).mul_(scale)  # [R, K, L, S]
    if mask is not None:
        scores.add_(mask)
    lse = torch.logsumexp(scores, -1)  # [R, K, L]
    return torch.matmul(torch.exp(scores.sub_(lse[..., None])), value), lse  # [R, K, L, d]


def two_part_attention(query, prompt_keys, prompt_values, prompt_mask, own_keys, own_values, own_mask,
                       scale: float, some_empty: bool = True) -> torch.Tensor:
    """One decoding step's attention in two parts (module doc), merged by their log-sum-exps.

    query [N, H, 1, d] for N = B x G rows, row i completion i % G of prompt i // G;
    prompt_keys/values [B, K, W, d] with the additive prompt_mask [B, 1, 1, W]: each prompt's
    columns once; own_keys/values [N, K, S, d] with the additive own_mask [N, 1, 1, S] (None:
    every column): each row's own -> [N, 1, H, d] in the query's dtype. `some_empty`: whether
    a prompt may have no column (all of its mask -inf); False, when the caller knows, saves
    the check (a decoding step's layers share one mask)."""
    n, h, _, d = query.shape
    b, kv_heads = prompt_keys.shape[:2]
    g, rep = n // b, h // kv_heads
    # the prompt's columns, once per prompt, for the G rows' queries together
    q_prompt = query.reshape(b, g, kv_heads, rep, d).transpose(1, 2).reshape(b, kv_heads, g * rep, d)  # [B, K, G*rep, d]
    out_p, lse_p = _part(q_prompt, prompt_keys, prompt_values, prompt_mask, scale)
    empty = torch.isneginf(prompt_mask).all(-1).reshape(b, 1, 1) if some_empty else None  # [B, 1, 1]
    # a prompt with no column (one token): the flash kernel gives its rows a log-sum-exp of 0,
    # not -inf, so they would merge an output of nothing
    if empty is not None and bool(empty.any()):
        lse_p = lse_p.masked_fill(empty, float("-inf"))
        out_p = out_p.masked_fill(empty[..., None], 0.0)
    out_p = out_p.reshape(b, kv_heads, g, rep, d).transpose(1, 2).reshape(n, kv_heads, rep, d)  # [N, K, rep, d]
    lse_p = lse_p.reshape(b, kv_heads, g, rep).transpose(1, 2).reshape(n, kv_heads, rep)  # [N, K, rep]
    # each row's own columns
    out_s, lse_s = _part(query.reshape(n, kv_heads, rep, d), own_keys, own_values, own_mask,
                         scale)  # [N, K, rep, d], [N, K, rep]
    lse = torch.logaddexp(lse_p.float(), lse_s.float())  # [N, K, rep]
    out = (out_p * torch.exp(lse_p - lse)[..., None].to(out_p.dtype)
           + out_s * torch.exp(lse_s - lse)[..., None].to(out_s.dtype))  # [N, K, rep, d]
    return out.reshape(n, 1, h, d).to(query.dtype)  # [N, 1, H, d]


def cascade_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                      scaling: float | None = None, **kwargs):
    """transformers' attention interface: query [N, H, q, d], key/value [N, K, S, d] ->
    ([N, q, H, d], None). One-token queries inside `shared_prompt_attention` take the two-part
    path (module doc); anything else goes to SDPA."""
    plan = _PLAN.get()
    n, h, q_len, d = query.shape
    kv_heads, columns = key.shape[1], key.shape[2]
    if (plan is None or q_len != 1 or dropout or attention_mask is None or attention_mask.dtype != torch.bool
            or attention_mask.dim() != 4 or attention_mask.shape[1] != 1 or kwargs.get("position_bias") is not None
            or kwargs.get("softcap") is not None or kwargs.get("sinks") is not None or h % kv_heads
            or n % plan[0] or not 0 < plan[1] < columns):
        return _sdpa(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    g, w, memo = plan
    scale = scaling if scaling is not None else d ** -0.5
    if not memo or memo[0] is not attention_mask or memo[1] != query.dtype:  # one step's mask serves every layer
        mask_p = additive(attention_mask[::g, :, :, :w], query.dtype)
        memo[:] = [attention_mask, query.dtype, mask_p, additive(attention_mask[:, :, :, w:], query.dtype),
                   bool(torch.isneginf(mask_p).all(-1).any())]
    mask_p, mask_s, some_empty = memo[2:]  # [B, 1, 1, W], [N, 1, 1, S - W], a prompt with no column
    return two_part_attention(query, key[::g, :, :w], value[::g, :, :w], mask_p, key[:, :, w:], value[:, :, w:],
                              mask_s, scale, some_empty), None  # [N, 1, H, d]


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(NAME, cascade_attention)
    AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


@contextlib.contextmanager
def shared_prompt_attention(model, group: int, width: int) -> Iterator[bool]:
    """Within the block, `model` (a transformers model using SDPA attention) decodes with
    `cascade_attention`, rows `g*group .. g*group + group - 1` sharing the KV cache's first
    `width` columns; yields whether it does (models on other attention implementations or
    off the CPU, and a group of 1, are left alone). The model's attention implementation is
    restored after."""
    config = getattr(model, "config", None)
    before = getattr(config, "_attn_implementation", None)
    on_cpu = next(model.parameters()).device.type == "cpu"  # GPUs: a dozen more kernel launches per layer, unmeasured
    if group < 2 or width < 1 or before != "sdpa" or not on_cpu:
        yield False
        return
    _register()
    token = _PLAN.set((group, width, []))  # the list: the last step's mask, as the kernel takes it
    model.set_attn_implementation(NAME)
    try:
        yield True
    finally:
        model.set_attn_implementation(before)
        _PLAN.reset(token)
