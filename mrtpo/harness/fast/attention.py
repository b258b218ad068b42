"""Grouped-query attention without copied key/value heads, on CPU.

SmolLM2, Llama and Qwen models have fewer key/value heads than query heads (SmolLM2-135M: 3
against 9). Given a padding mask, transformers' SDPA attention copies each key/value head once
per query head that reads it (`repeat_kv`) before it calls torch's kernel, because CUDA
kernels fall back to the slow math kernel when handed a mask together with `enable_gqa`. torch's
CPU kernel takes both, so on CPU the copies are pure cost. They are taken in every pass that
has a mask: the rollout's prefill, the replay, and the update's forward and backward.

transformers reads its switch for this, `TRANSFORMERS_SDPA_FORCE_GQA`, from the environment at
every attention call, so it is process-wide. `load_policy` sets it for a policy on CPU unless
the user has set it (`TRANSFORMERS_SDPA_FORCE_GQA=0` keeps the copies). The outputs are the same
to float rounding (tested); `benchmarks/speed/step.py` times both ways with `grouped_attention`.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

import torch

SWITCH = "TRANSFORMERS_SDPA_FORCE_GQA"


def prefer_grouped_attention(device: torch.device | str) -> None:
    """On CPU, have transformers' SDPA attention read grouped key/value heads in place (unless
    the environment already says otherwise). Other devices are left alone: on CUDA a mask with
    `enable_gqa` selects the math kernel, which is slower than copying the heads."""
    if torch.device(device).type == "cpu":
        os.environ.setdefault(SWITCH, "1")


@contextlib.contextmanager
def grouped_attention(enabled: bool) -> Iterator[None]:
    """Within the block, SDPA attention reads grouped key/value heads in place (`enabled`) or
    copies them per query head (transformers' default); the environment is restored after."""
    old = os.environ.get(SWITCH)
    os.environ[SWITCH] = "1" if enabled else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(SWITCH, None)
        else:
            os.environ[SWITCH] = old
