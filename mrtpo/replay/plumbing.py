"""transformers plumbing the replay (and `mrtpo.harness`) relies on.

The decoder body and the vocabulary head of a causal LM, the name of the KV-cache argument
and where a forward returns its cache (they changed in transformers 5), copies of a cache
repeated over rows, padded rows of token ids, and a beginning's KV kept for reuse under the same
weights (`EncodedStart`).
"""
from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Literal, Sequence

import torch

PaddingSide = Literal["left", "right"]


def device_of(model) -> torch.device:
    """The device of the model's (first) parameters."""
    return next(model.parameters()).device


def decoder_of(model):
    """The transformer body (hidden states after the final norm), LoRA layers included."""
    try:
        return model.get_decoder()
    except (AttributeError, NotImplementedError) as err:
        raise TypeError(f"{type(model).__name__} exposes no get_decoder(); the shared-prefix replay "
                        "needs a transformers decoder-only causal LM (use shared_prefix=False)") from err


def logit_transforms(config) -> tuple[float | None, float | None]:
    """(scale, soft cap) the model applies to hidden @ W^T to make its logits; None for each it
    does not (Cohere's `logit_scale`, Gemma 2/3's `final_logit_softcapping`)."""
    scale = getattr(config, "logit_scale", None)
    softcap = getattr(config, "final_logit_softcapping", None)
    return (scale if isinstance(scale, (int, float)) and scale != 1 else None), (softcap or None)


def head_of(model):
    """hidden [M, H] -> logits [M, V], as the model's forward computes them from hidden states."""
    lm_head = model.get_output_embeddings()
    scale, softcap = logit_transforms(model.config)

    def head(hidden: torch.Tensor) -> torch.Tensor:
        logits = lm_head(hidden)
        if scale is not None:
            logits = logits * scale
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        return logits

    return head


def plain_linear_head(model) -> torch.Tensor | None:
    """The head's weight [V, H] when the model's logits are exactly hidden @ weight^T (no bias,
    no logit scale or soft-capping, no adapter on the head); None otherwise."""
    head = model.get_output_embeddings()
    if type(head) is not torch.nn.Linear or head.bias is not None or any(logit_transforms(model.config)):
        return None
    return head.weight


def cache_kwarg(module) -> str:
    """transformers >= 5 names the KV-cache argument `cache`; earlier versions `past_key_values`."""
    params = inspect.signature(module.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def output_cache(out):
    """The KV cache a forward pass with use_cache=True returned (`cache` or `past_key_values`)."""
    for name in ("cache", "past_key_values"):
        value = getattr(out, name, None)
        if value is not None:
            return value
    raise RuntimeError("the decoder returned no KV cache although use_cache=True")


def select_rows(cache, index: torch.Tensor) -> None:
    """Keep rows `index` [R] of every layer of `cache` (rows may repeat), in place.

    transformers' `batch_select_indices` does the same by advanced indexing, whose backward is
    an accumulating `index_put_`: on CPU about 7x slower than `index_select`'s (`index_add_`),
    and taken twice per layer in every update that shares its prompts (0.3 s of a SmolLM2
    update at 2 threads). The values and gradients are the same. Layers other than plain
    key/value ones (indexer caches, say) go through transformers' own method."""
    for layer in cache.layers:
        keys = getattr(layer, "keys", None)
        if set(vars(layer)) & {"indexer_keys", "indexer_position_ids"} or not isinstance(keys, torch.Tensor):
            layer.batch_select_indices(index)
        elif keys.numel():
            layer.keys = keys.index_select(0, index)
            layer.values = layer.values.index_select(0, index)


def on_cache(cache_arg: str, base, base_len: int, rows: int, mask: torch.Tensor) -> tuple[dict, torch.Tensor]:
    """Decoder kwargs that put `rows` copies of the cache `base` (`base_len` positions; None:
    no cache) before `mask` [rows, S], and the mask over both. `cache_arg`: `cache_kwarg`."""
    if base is None:
        return {}, mask
    cache = copy.deepcopy(base)
    cache.batch_repeat_interleave(rows)
    return {cache_arg: cache, "use_cache": True}, torch.cat([mask.new_ones(rows, base_len), mask], 1)


def pack(seqs: Sequence[Sequence[int]], side: PaddingSide, device, start: int = 0):
    """Pad rows -> ids [R, S], mask [R, S], positions [R, S] (from `start`), left pads per row."""
    width = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    pos = torch.full((len(seqs), width), start, dtype=torch.long)
    offsets = []
    for r, s in enumerate(seqs):
        off = width - len(s) if side == "left" else 0
        ids[r, off:off + len(s)] = torch.as_tensor(list(s), dtype=torch.long)
        mask[r, off:off + len(s)] = 1
        pos[r, off:off + len(s)] = torch.arange(start, start + len(s))
        offsets.append(off)
    return ids.to(device), mask.to(device), pos.to(device), offsets


def weights_key(model) -> tuple:
    """What says that `model` computes what it computed: the model, its dtype, whether each of
    its adapter layers is switched off (peft's `disable_adapter`), and the version counters of
    all its parameters. torch's AdamW (for-loop and foreach), and any other in-place write
    autograd sees, bump them; the fused AdamW does not, so a rollout's start must not outlive
    an optimizer step (the trainer replays before it updates). Folding a LoRA adapter into the
    weights and back (`Policy.merged`, peft's merge) writes through `.data` and does not bump
    them either, which is right: the folded model computes the same function, to float
    rounding."""
    params = list(model.parameters())
    switches = tuple(m.disable_adapters for m in model.modules()
                     if isinstance(getattr(m, "disable_adapters", None), bool))
    return (id(model), params[0].dtype if params else None, switches, tuple(p._version for p in params))


@dataclass(frozen=True)
class EncodedStart:
    """The KV of a beginning of token ids [L], encoded once under weights `key` (`weights_key`):
    per layer (keys, values), each [1, kv heads, L, head dim]. The rollout keeps its prompts'
    common beginning (the system text, a worked example) so that the replay, under the same
    weights, takes it instead of encoding it again (`reusable`)."""

    ids: tuple[int, ...]
    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]
    key: tuple

    @classmethod
    def of(cls, model, ids: Sequence[int], cache) -> "EncodedStart | None":
        """The start `cache` (a one-row DynamicCache of `ids`, from `model`) holds; None when a
        layer is other than a plain full-attention one (a sliding window keeps a part only)."""
        from transformers.cache_utils import DynamicLayer

        if cache is None or not ids or any(type(x) is not DynamicLayer for x in cache.layers):
            return None
        return cls(tuple(ids), tuple((x.keys, x.values) for x in cache.layers), weights_key(model))

    def reusable(self, model, ids: Sequence[int]) -> int:
        """How many of `ids`' first tokens this start holds for `model` as it stands: 0 unless
        the weights are the ones it was encoded under."""
        if self.key != weights_key(model):
            return 0
        n = min(len(self.ids), len(ids))
        return next((i for i in range(n) if self.ids[i] != ids[i]), n)

    def cache(self, length: int):
        """A DynamicCache of the first `length` positions (copies: a forward on it leaves
        this start as it is)."""
        return self.extend(None, 0, length)

    def extend(self, cache, start: int, k: int):
        """A new one-row DynamicCache: `cache`'s `start` positions (None: none, start 0), then
        this start's positions start .. start + k - 1 (`cache` is left as it is)."""
        from transformers import DynamicCache

        if cache is None:
            parts = [(keys[:, :, start:start + k], values[:, :, start:start + k]) for keys, values in self.layers]
        else:
            parts = [(torch.cat([layer.keys, keys[:, :, start:start + k]], 2),
                      torch.cat([layer.values, values[:, :, start:start + k]], 2))
                     for layer, (keys, values) in zip(cache.layers, self.layers)]
        return DynamicCache(ddp_cache_data=parts)
