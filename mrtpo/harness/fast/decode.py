"""Decoding on CPU without transformers' `generate`, for Llama-shaped decoders.

On 2 CPU cores a decoding step of SmolLM2 (8 rows) took 75 ms through `generate` and the
model's forward, of which the 210 matrix products of the layers take about 32 ms and the
head 6 ms: the rest is Python and small tensor operations (the attention mask and positions
rebuilt at every step, the cache classes, keyword plumbing through 30 layers, the stopping
criteria). `decode` runs the same computation with the model's own weights and Llama's
arithmetic (its RMS norm as torch's fused `rms_norm` in float32; its rotary embedding, applied
to a layer's queries and keys together; a LoRA projection whose adapter is folded in is its
base layer, as peft computes it then), so each token's logits are the model's own to float
rounding, and draws each token with the same logits processors as `generate` does: 0.80-0.90x
of the rollout's time on SmolLM2 (text2sql, 2 x 4, 64 new tokens, 2 threads;
`benchmarks/speed/step.py` measures it with the other fast paths). The projections of one
input are one product (q, k and v; gate and up), with the weights stacked and packed once per
decoding (`packed.packed_linear`: for MKL or oneDNN, by the CPU): 0.85x of this path's time at
2 threads and 0.79x at 1 (the same completions). It keeps

- each prompt's keys and values once, [B, K, W, d], as `prefix.encode_prompts` encoded
  them (its layout: common beginning, padding, the prompt's rest), read by the G rows of
  the prompt together (`cascade.two_part_attention`);
- each row's own keys and values (its prompt's last token, then its new tokens) in a buffer
  of max_new_tokens columns written in place, read up to the current step (no mask:
  every row is at the same step);
- only the rows still running in the products: the G completions of a prompt end at
  different lengths (SmolLM2 on text2sql: 13 to 64 tokens), and a stopped row's share of
  each later product is saved. That is on the CPUs whose packing library serves any row
  count (oneDNN's, a row's output the same bitwise): on a 2-core AMD EPYC (AVX2) 0.89x of
  the rollout's time (medians of 10 alternated rounds, 15.6 against 13.8 s, the same
  completions). MKL's packed weights take only the row count they were packed for (fewer
  rows fall back to unpacked products, slower), so on Intel CPUs every row stays in.

Only decoders it knows the layer of (`supports`: Llama and Qwen2 configurations with full
attention, on CPU, whose generation config adds no logits processor) and a processor that
draws each row's token (`draws_tokens`, the trainer's RowSeededSampling) or greedy decoding
take this path (`decode_prompts`): `rollout.sample` sends the rest through `generate`, and
the evaluation's greedy generation (`evaluation.generate`, held-out measurements included) takes
it for the models it supports.
"""
from __future__ import annotations

import contextlib
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

from mrtpo.harness.fast.cascade import additive, two_part_attention

#: model types whose decoder layer is Llama's: norm, attention (q/k/v/o projections, rotary,
#: grouped key/value heads), residual, norm, gated MLP, residual
LAYER_SHAPES = ("llama", "qwen2")
#: settings a model's own generation config may hold without changing greedy decoding's scores;
#: `generate` fills what the caller left unset from that config, so any other setting (a
#: repetition penalty, suppressed tokens, a minimum length) sends the rollout through it
NEUTRAL_SETTINGS = {"bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "use_cache",
                    "output_attentions", "output_hidden_states", "output_scores", "output_logits",
                    "return_dict_in_generate", "transformers_version", "_from_model_config", "do_sample",
                    "temperature", "top_p", "top_k", "min_p", "typical_p", "max_length", "max_new_tokens",
                    "cache_implementation"}


def supports(model) -> bool:
    """Whether `decode` can run `model`: a Llama-shaped causal LM on CPU with full attention in
    every layer, no extras on the attention (sliding windows, logit soft-capping), and no
    setting in its own generation config that `generate` would turn into a logits processor."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) not in LAYER_SHAPES:
        return False
    own = getattr(model, "generation_config", None)
    if own is not None:
        from transformers import GenerationConfig

        plain = GenerationConfig()
        default = {**plain.to_dict(), **getattr(plain, "_get_default_generation_params", dict)()}  # 5.x: None, filled
        if any(k not in NEUTRAL_SETTINGS and v is not None and v != default.get(k)
               for k, v in own.to_diff_dict().items()):
            return False
    if next(model.parameters()).device.type != "cpu":
        return False
    if getattr(config, "use_sliding_window", False) or any(
            t != "full_attention" for t in getattr(config, "layer_types", None) or []):
        return False
    if getattr(config, "hidden_act", None) != "silu" or getattr(config, "final_logit_softcapping", None):
        return False
    from mrtpo.replay.plumbing import decoder_of, logit_transforms

    body = decoder_of(model)
    return not any(logit_transforms(config)) and all(
        hasattr(body, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb"))


@torch.no_grad()
def decode(model, encoded, last_ids: torch.Tensor, input_ids: torch.Tensor, group: int, max_new_tokens: int,
           stops: list[int], pad_id: int, processors: list, packed: bool = True) -> torch.Tensor:
    """Decode N = B x G rows from B encoded prompts -> their new tokens [N, <= max_new_tokens].

    `encoded`: `prefix.encode_prompts` of the B prompts without their last token (its cache
    of B rows and width W, its mask [B, W]); `last_ids` [N]: each row's last prompt token;
    `input_ids` [N, W + 1]: the rows as `generate` would hold them (what processors see);
    `group` = G. Each step feeds every running row one token, lets `processors` turn the
    float32 logits into scores and takes their argmax; a row that has drawn a stop token gets
    `pad_id` from then on; decoding ends when every row has stopped or after max_new_tokens
    (as `generate` with those stop ids and greedy decoding after the processors). A stopped
    row leaves the products (its scores are zeros; its token is padding whatever they are),
    unless `packed` products are MKL's, packed for the full row count. `packed`: the layers'
    projections multiply by weights packed once (`packed.packed_linear`)."""
    from mrtpo.harness.fast.packed import packs_any_rows

    body = model.get_decoder()
    head = model.get_output_embeddings()
    attention = body.layers[0].self_attn
    d, half = attention.head_dim, attention.head_dim // 2
    n = last_ids.shape[0]
    layers = [_parts(x, n, packed) for x in body.layers]
    prompt_k = [x.keys for x in encoded.cache.layers]  # per layer [B, K, W, d]
    prompt_v = [x.values for x in encoded.cache.layers]
    kv_heads, dtype, device = prompt_k[0].shape[1], prompt_k[0].dtype, last_ids.device
    heads = model.config.num_attention_heads
    rotated = (heads + kv_heads) * d  # the queries' and keys' columns of a layer's qkv product
    prompt_mask = additive(encoded.mask.bool()[:, None, None, :], dtype)  # [B, 1, 1, W]
    some_empty = bool(torch.isneginf(prompt_mask).all(-1).any())  # a one-token prompt: no cached column
    own_k = [torch.zeros(n, kv_heads, max_new_tokens, d, dtype=dtype, device=device) for _ in layers]
    own_v = [torch.zeros_like(x) for x in own_k]
    position = encoded.mask.sum(-1).repeat_interleave(group)  # [N] the last prompt token's position
    scale = attention.scaling
    final_norm = _norm(body.norm)
    stop = torch.tensor(stops, dtype=torch.long, device=device)
    running = torch.ones(n, dtype=torch.bool, device=device)  # [N]
    # stopped rows leave the products (R running rows of N) unless the packed products take a
    # fixed row count (MKL's: fewer rows would fall back to unpacked products, slower)
    drop_stopped = not packed or packs_any_rows()
    keep = slice(None)  # the running rows: all N, then [R] indices once some have stopped
    token, sequence, new = last_ids, input_ids, []
    for t in range(max_new_tokens):
        rows = token[keep]  # [R]
        r = rows.shape[0]
        h = body.embed_tokens(rows[:, None])  # [R, 1, H]
        cos, sin = body.rotary_emb(h, (position[keep] + t)[:, None])  # [R, 1, d] each: every head alike
        for i, x in enumerate(layers):
            qkv = x.qkv(x.norm_in(h))  # [R, 1, (heads + 2K) d]
            qk = qkv[:, 0, :rotated].view(r, -1, d)  # [R, heads + K, d]
            qk = qk * cos + torch.cat((-qk[..., half:], qk[..., :half]), -1) * sin  # Llama's rotary embedding
            own_k[i][keep, :, t] = qk[:, heads:]
            own_v[i][keep, :, t] = qkv[:, 0, rotated:].view(r, kv_heads, d)
            q = qk[:, :heads, None]  # [R, heads, 1, d]
            if r < n:  # the attention runs on all N rows (a prompt's G rows together), stopped ones on zeros
                q = q.new_zeros(n, heads, 1, d).index_copy_(0, keep, q)  # [N, heads, 1, d]
            out = two_part_attention(q, prompt_k[i], prompt_v[i], prompt_mask,
                                     own_k[i][:, :, :t + 1], own_v[i][:, :, :t + 1], None, scale,
                                     some_empty)[keep]  # [R, 1, heads, d]
            h = h + x.o(out.reshape(r, 1, -1))
            gate, up = x.gate_up(x.norm_post(h)).split(x.width, -1)  # [R, 1, I] each
            h = h + x.down(x.act(gate) * up)  # the gated MLP, as LlamaMLP computes it
        logits = head(final_norm(h)[:, -1]).to(dtype=torch.float32, copy=True)  # [R, V]
        if r < n:  # stopped rows: any scores (their token is padding)
            logits = logits.new_zeros(n, logits.shape[1]).index_copy_(0, keep, logits)  # [N, V]
        scores = logits
        for proc in processors:
            scores = proc(sequence, scores)
        token = torch.where(running, scores.argmax(-1), pad_id)  # [N]
        new.append(token)
        sequence = torch.cat([sequence, token[:, None]], 1)  # [N, W + 1 + t + 1]
        running &= ~torch.isin(token, stop)
        if not running.any():
            break
        if drop_stopped and int(running.sum()) < r:
            keep = running.nonzero().squeeze(1)  # [R]
    return torch.stack(new, 1)  # [N, steps]


def decode_prompts(model, ids: list[list[int]], group: int, max_new_tokens: int, stops: list[int], pad_id: int,
                   processors: list = (), common_prefix: bool = True, packed: bool = True):
    """(new tokens per row [B*G][<= max_new_tokens], the prompts' encoded start) for B prompts'
    token ids (the longest longer than one token), G rows each, through `decode`: the prompts encoded
    once without their last token, as `rollout.prompt_cache` does (with `common_prefix`, the
    beginning they share once), their rows not repeated; the vocabulary head packed once for
    the rows with `packed`. A stopped row's tokens after its stop are `pad_id`. The one
    entry of the trainer's rollout and of the evaluation's greedy generation
    (`evaluation.generate`) into this path."""
    from mrtpo.harness.fast.packed import packed_head
    from mrtpo.harness.fast.prefix import encode_prompts, prefix_layout
    from mrtpo.replay.plumbing import cache_kwarg, decoder_of, device_of

    device, decoder = device_of(model), decoder_of(model)
    enc = encode_prompts(decoder, [x[:-1] for x in ids], device, cache_kwarg(decoder), share_common=common_prefix,
                         keep_start=model)
    input_ids, _ = prefix_layout(ids, pad_id, enc.common, enc.width + 1)  # [B, P]
    input_ids = input_ids.to(device).repeat_interleave(group, 0)  # [B*G, P] what processors see
    last = torch.tensor([x[-1] for x in ids], dtype=torch.long, device=device).repeat_interleave(group)  # [B*G]
    with packed_head(model, last.shape[0]) if packed else contextlib.nullcontext():
        new = decode(model, enc, last, input_ids, group, max_new_tokens, stops, pad_id, list(processors),
                     packed)  # [B*G, steps]
    return new.tolist(), enc.start


class _Parts(NamedTuple):
    """What one decoder layer computes with, as plain callables (no module call per use)."""
    norm_in: Callable
    qkv: Callable  # [N, 1, H] -> [N, 1, (heads + 2K) d]: queries, keys, values
    o: Callable
    norm_post: Callable
    gate_up: Callable  # [N, 1, H] -> [N, 1, 2I]: the gate's, then the up projection's
    width: int  # I
    down: Callable
    act: Callable


def _parts(layer, rows: int, packed: bool) -> _Parts:
    """`layer`'s norms, activation and projections (`_product`), those of one input as one
    product: packed (MKL or oneDNN) when `packed` and the library can take them, else one call
    each, joined."""
    from mrtpo.harness.fast.packed import packed_linear

    attn, mlp = layer.self_attn, layer.mlp

    def joined(modules):
        products = [_product(m) for m in modules]
        fused = packed_linear(products, rows) if packed else None
        if fused is not None:
            return fused
        if len(products) == 1:
            return products[0]
        return lambda x: torch.cat([p(x) for p in products], -1)

    return _Parts(_norm(layer.input_layernorm), joined([attn.q_proj, attn.k_proj, attn.v_proj]),
                  joined([attn.o_proj]), _norm(layer.post_attention_layernorm),
                  joined([mlp.gate_proj, mlp.up_proj]), mlp.intermediate_size, joined([mlp.down_proj]), mlp.act_fn)


def _norm(module) -> Callable:
    """An RMS norm of Llama's kind (the float32 variance, then the weight) as torch's fused
    `rms_norm` when its weight is float32 (the same arithmetic in one call: one op instead of
    six, equal on SmolLM2's hidden states; tested against `generate`), else the module."""
    weight, eps = getattr(module, "weight", None), getattr(module, "variance_epsilon", None)
    if weight is None or eps is None or weight.dtype != torch.float32:
        return module
    shape = (weight.shape[-1],)
    return lambda x: F.rms_norm(x, shape, weight, eps) if x.dtype == torch.float32 else module(x)


def _product(module):
    """What multiplies by the projection `module`: its base layer when it is a LoRA layer whose
    adapter is folded into that layer's weight (peft then calls the base layer alone, after
    checks on every call), else the module itself."""
    base = getattr(module, "base_layer", None)
    if base is not None and getattr(module, "merged", False) and not getattr(module, "disable_adapters", True):
        return base
    return module
