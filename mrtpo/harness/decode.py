"""Decoding on CPU without transformers' `generate`, for Llama-shaped decoders.

On 2 CPU cores a decoding step of SmolLM2 (8 rows) took 75 ms through `generate` and the
model's forward, of which the 210 matrix products of the layers take about 32 ms and the
head 6 ms: the rest is Python and small tensor operations (the attention mask and positions
rebuilt at every step, the cache classes, keyword plumbing through 30 layers, the stopping
criteria). `decode` runs the same computation with the model's own modules (its norms, its
projections, its rotary embedding and `apply_rotary_pos_emb`; a LoRA projection whose adapter
is folded in is its base layer, as peft computes it then), so each token's logits are the
model's own to float rounding, and draws each token with the same logits processors as
`generate` does: 0.80-0.90x of the rollout's time on SmolLM2 (text2sql, 2 x 4, 64 new
tokens, 2 threads; `benchmarks/speed/step.py` measures it with the other fast paths). It keeps

- each prompt's keys and values once, [B, K, W, d], as `prefix.encode_prompts` encoded
  them (its layout: common beginning, padding, the prompt's rest), read by the G rows of
  the prompt together (`cascade.two_part_attention`);
- each row's own keys and values (its prompt's last token, then its new tokens) in a buffer
  of max_new_tokens columns written in place, read up to the current step (no mask:
  every row is at the same step).

Only decoders it knows the layer of (`supports`: Llama and Qwen2 configurations with full
attention, on CPU, whose generation config adds no logits processor) and a processor that
draws each row's token (`draws_tokens`, the trainer's RowSeededSampling) or greedy decoding
take this path; `rollout.sample` sends the rest through `generate`.
"""
from __future__ import annotations

import sys

import torch

from mrtpo.harness.cascade import additive, two_part_attention

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
           stops: list[int], pad_id: int, processors: list) -> torch.Tensor:
    """Decode N = B x G rows from B encoded prompts -> their new tokens [N, <= max_new_tokens].

    `encoded`: `prefix.encode_prompts` of the B prompts without their last token (its cache
    of B rows and width W, its mask [B, W]); `last_ids` [N]: each row's last prompt token;
    `input_ids` [N, W + 1]: the rows as `generate` would hold them (what processors see);
    `group` = G. Each step feeds every row one token, lets `processors` turn its float32
    logits into scores and takes their argmax; a row that has drawn a stop token gets
    `pad_id` from then on; decoding ends when every row has stopped or after max_new_tokens
    (as `generate` with those stop ids and greedy decoding after the processors)."""
    body = model.get_decoder()
    head = model.get_output_embeddings()
    layers = list(body.layers)
    attention = layers[0].self_attn
    rope = sys.modules[type(attention).__module__].apply_rotary_pos_emb
    d = attention.head_dim
    n = last_ids.shape[0]
    prompt_k = [x.keys for x in encoded.cache.layers]  # per layer [B, K, W, d]
    prompt_v = [x.values for x in encoded.cache.layers]
    kv_heads, dtype, device = prompt_k[0].shape[1], prompt_k[0].dtype, last_ids.device
    prompt_mask = additive(encoded.mask.bool()[:, None, None, :], dtype)  # [B, 1, 1, W]
    own_k = [torch.zeros(n, kv_heads, max_new_tokens, d, dtype=dtype, device=device) for _ in layers]
    own_v = [torch.zeros_like(x) for x in own_k]
    position = encoded.mask.sum(-1).repeat_interleave(group)  # [N] the last prompt token's position
    scale, act = attention.scaling, layers[0].mlp.act_fn
    linears = [tuple(_product(m) for m in (x.self_attn.q_proj, x.self_attn.k_proj, x.self_attn.v_proj,
                                            x.self_attn.o_proj, x.mlp.gate_proj, x.mlp.up_proj, x.mlp.down_proj))
               for x in layers]
    stop = torch.tensor(stops, dtype=torch.long, device=device)
    running = torch.ones(n, dtype=torch.bool, device=device)  # [N]
    token, sequence, new = last_ids, input_ids, []
    for t in range(max_new_tokens):
        h = body.embed_tokens(token[:, None])  # [N, 1, H]
        cos, sin = body.rotary_emb(h, (position + t)[:, None])  # [N, 1, d] each
        for i, (layer, (q_proj, k_proj, v_proj, o_proj, gate, up, down)) in enumerate(zip(layers, linears)):
            x = layer.input_layernorm(h)
            q = q_proj(x).view(n, 1, -1, d).transpose(1, 2)  # [N, heads, 1, d]
            k = k_proj(x).view(n, 1, -1, d).transpose(1, 2)  # [N, K, 1, d]
            v = v_proj(x).view(n, 1, -1, d).transpose(1, 2)  # [N, K, 1, d]
            q, k = rope(q, k, cos, sin)
            own_k[i][:, :, t] = k[:, :, 0]
            own_v[i][:, :, t] = v[:, :, 0]
            out = two_part_attention(q, prompt_k[i], prompt_v[i], prompt_mask, own_k[i][:, :, :t + 1],
                                     own_v[i][:, :, :t + 1], None, scale)  # [N, 1, heads, d]
            h = h + o_proj(out.reshape(n, 1, -1))
            x = layer.post_attention_layernorm(h)
            h = h + down(act(gate(x)) * up(x))  # the gated MLP, as LlamaMLP computes it
        logits = head(body.norm(h)[:, -1]).to(dtype=torch.float32, copy=True)  # [N, V]
        scores = logits
        for proc in processors:
            scores = proc(sequence, scores)
        token = torch.where(running, scores.argmax(-1), pad_id)  # [N]
        new.append(token)
        sequence = torch.cat([sequence, token[:, None]], 1)  # [N, W + 1 + t + 1]
        running &= ~torch.isin(token, stop)
        if not running.any():
            break
    return torch.stack(new, 1)  # [N, steps]


def _product(module):
    """What multiplies by the projection `module`: its base layer when it is a LoRA layer whose
    adapter is folded into that layer's weight (peft then calls the base layer alone, after
    checks on every call), else the module itself."""
    base = getattr(module, "base_layer", None)
    if base is not None and getattr(module, "merged", False) and not getattr(module, "disable_adapters", True):
        return base
    return module
