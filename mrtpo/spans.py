"""Character spans of a response and the tokens that cover them.

A task can say which characters of a response each reward is about (`Task.reward_spans`);
the credit probe marks the characters an edit changed. Both need the same translation from
characters to the response's sampled tokens: each token's character range in the decoded
response (`token_offsets`), then which tokens overlap a span (`span_token_mask`).
Pure Python over a tokenizer's `decode`; no torch.
"""
from __future__ import annotations

from typing import Sequence

Span = tuple[int, int]  # [start, end) in characters


def token_offsets(tokenizer, ids: Sequence[int]) -> list[Span]:
    """Each token's character range in `tokenizer.decode(ids, skip_special_tokens=True)`.

    Decoded prefix by prefix, so a token that decodes only together with the next (a byte
    piece of a character) and a special token both get an empty range at the right place."""
    out, prev = [], 0
    for i in range(len(ids)):
        n = len(tokenizer.decode(list(ids[: i + 1]), skip_special_tokens=True))
        out.append((prev, max(prev, n)))
        prev = max(prev, n)
    return out


def span_token_mask(offsets: Sequence[Span], span: Span) -> list[bool]:
    """Which tokens (character offsets per token) overlap the character range `span`."""
    s, e = span
    return [a < e and b > s for a, b in offsets]


def spans_token_mask(offsets: Sequence[Span], spans: Sequence[Span]) -> list[bool]:
    """Which tokens overlap any of `spans`."""
    masks = [span_token_mask(offsets, span) for span in spans]
    return [any(m[j] for m in masks) for j in range(len(offsets))]
