"""Timing helpers the speed benchmarks share (scripts in this folder import it by name)."""
from __future__ import annotations

import time

import torch

from mrtpo.replay import head_and_js, head_of, plan_item


def time_head_and_js(model, items, chunk_tokens: int = 256, temperature: float = 1.0) -> float:
    """Seconds of the replay's work outside the model body (`mrtpo.replay.head_and_js`: the
    vocabulary head and the JS step) on as many positions as `distances` computes: each
    item's distinct contexts x its response tokens, from random hidden states (same cost)."""
    head, width = head_of(model), model.config.hidden_size
    param = next(model.parameters())
    k = max(it.num_rewards for it in items)
    q = torch.zeros(len(items), k, max(len(it.response_ids) for it in items), device=param.device)  # [N, K, T]
    g = torch.Generator(device=param.device).manual_seed(0)
    plans = [plan_item(item, n) for n, item in enumerate(items)]
    hidden = [torch.randn(len(p.contexts), len(it.response_ids), width, generator=g, device=param.device,
                          dtype=param.dtype) for p, it in zip(plans, items)]  # [C, T, H] each
    t = time.perf_counter()
    with torch.no_grad():
        for n, (plan, h) in enumerate(zip(plans, hidden)):
            head_and_js(q, n, plan, h, head, temperature, chunk_tokens)
    if q.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - t
