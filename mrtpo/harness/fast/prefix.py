"""Prompts encoded once: the part every prompt of a batch shares, then each distinct prompt's rest.

The prompts of one step are mostly the same tokens: the system text and the worked example come
first in every one (text2sql with its worked example: 473 of 516 tokens), and each prompt is
the same for its G completions. `encode_prompts` runs the shared beginning through the decoder
once ([1, c]), copies its KV cache to the distinct prompts, and runs each prompt's rest on top
of it, left-padded: the cache then holds, per distinct prompt, the columns

    [ common prefix (c) | padding | the prompt's rest ]

and positions that count real tokens only, so every token sees what it sees in the plain
left-padded layout [padding | prompt], at the same position: the same keys, values and
logits, to float rounding. Autograd flows through the copies (a gradient reaching a copy adds
into the one prefix it was copied from), so a pass with gradients gets the full forward's
gradients too. The rollout's prefill and the update's forward (`forward.shared_prompt_hidden`)
both use it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from mrtpo.replay.planning import common_prefix


@dataclass
class Encoded:
    """The KV cache of U prompts in the layout [common | padding | rest] (module doc)."""

    cache: object  # a transformers Cache with U rows of `width` positions (None: width 0)
    mask: torch.Tensor  # [U, width] 1 on real tokens
    common: int  # c: the columns every row shares
    width: int  # c + the longest rest
    start: object = None  # plumbing.EncodedStart of the c common tokens (with keep_start), else None


def encode_prompts(decoder, prompts: Sequence[Sequence[int]], device, cache_arg: str,
                   share_common: bool = True, keep_start=None) -> Encoded:
    """Encode U >= 1 token sequences (prompts without their last token, say) as `Encoded`.

    `decoder`: the transformer body (`plumbing.decoder_of`); `cache_arg`: its KV-cache keyword
    (`plumbing.cache_kwarg`). `share_common=False`: every prompt is encoded whole (c = 0),
    as the plain per-prompt sharing does (benchmarks measure what the common prefix buys).
    `keep_start`: the model `decoder` belongs to; the common tokens' KV is then kept as
    `Encoded.start` (the rollout's, for the replay to reuse)."""
    from mrtpo.replay.plumbing import EncodedStart, output_cache, select_rows

    u = len(prompts)
    c = common_prefix(prompts) if share_common else 0
    rests = [list(p[c:]) for p in prompts]
    r = max(len(x) for x in rests)
    cache = start = None
    if c:
        ids = torch.as_tensor(list(prompts[0][:c]), dtype=torch.long, device=device)[None]  # [1, c]
        out = decoder(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
        cache = output_cache(out)
        if keep_start is not None:  # before select_rows, which replaces the one row's tensors
            start = EncodedStart.of(keep_start, prompts[0][:c], cache)
        select_rows(cache, torch.zeros(u, dtype=torch.long, device=device))  # [1, ...] -> [U, ...]
    mask = torch.ones(u, c + r, dtype=torch.long, device=device)  # [U, c + r]
    if r:
        ids = torch.zeros(u, r, dtype=torch.long, device=device)  # [U, r] left-padded rests
        pos = torch.full((u, r), c, dtype=torch.long, device=device)  # [U, r]
        for i, rest in enumerate(rests):
            if rest:
                ids[i, r - len(rest):] = torch.as_tensor(rest, dtype=torch.long, device=device)
                pos[i, r - len(rest):] = torch.arange(c, c + len(rest), device=device)
            mask[i, c:c + r - len(rest)] = 0
        kwargs = {cache_arg: cache} if cache is not None else {}
        out = decoder(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **kwargs)
        cache = output_cache(out)
    return Encoded(cache=cache, mask=mask, common=c, width=c + r, start=start)


def prefix_layout(prompts: Sequence[Sequence[int]], pad_id: int, common: int, width: int,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each prompt in the layout `encode_prompts` makes, `width` columns: ids [U, width], mask
    [U, width] (width >= common + the longest rest; a prompt's rest ends at the last column)."""
    u = len(prompts)
    ids = torch.full((u, width), pad_id, dtype=torch.long)  # [U, width]
    mask = torch.zeros(u, width, dtype=torch.long)  # [U, width]
    for i, p in enumerate(prompts):
        ids[i, :common] = torch.as_tensor(list(p[:common]), dtype=torch.long)
        mask[i, :common] = 1
        rest = list(p[common:])
        if rest:
            ids[i, width - len(rest):] = torch.as_tensor(rest, dtype=torch.long)
            mask[i, width - len(rest):] = 1
    return ids, mask
