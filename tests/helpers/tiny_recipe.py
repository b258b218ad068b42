"""A built-in-policy recipe small enough to build in seconds (the tests of models/builds.py
and of build progress lines use it)."""
from __future__ import annotations

from dataclasses import replace

from mrtpo.models import builtin, sft


def tiny_recipe(name: str = "test-tiny", **over) -> builtin.Recipe:
    base = builtin.Recipe(name=name, examples_per_task=3, vocab_size=600, hidden_size=32, num_layers=2,
                     num_heads=4, num_kv_heads=2, intermediate_size=64, max_positions=1024,
                     sft=sft.SFTConfig(steps=4, batch_prompts=2, targets_per_prompt=2, max_length=1024,
                                       copy_steps=2, copy_batch=4, copy_span=16))
    return replace(base, **over)
