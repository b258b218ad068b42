"""The compact LoRA trainer behind `mrtpo train`: one readable loop (loop.py) over small parts.

config.py (TrainConfig), policy.py (model + LoRA), data.py (splits, prompts per step),
rollout.py (sampling), scoring.py (rewards -> scores [N, K]), distances.py (MRTPO replay),
loss.py (clipped surrogate, KL, aggregation), update.py (micro-batched optimizer step),
metrics.py and completions.py (logs), checkpoints.py (atomic save, exact resume).

`train` and `RunResult` are imported on first use, so reading the config (the CLI does it
to build its flags) does not import torch.
"""
from mrtpo.harness.config import ConfigError, TrainConfig, resolve

__all__ = ["ConfigError", "RunResult", "TrainConfig", "resolve", "train"]


def __getattr__(name: str):
    if name in ("train", "RunResult"):
        from mrtpo.harness import loop

        return getattr(loop, name)
    raise AttributeError(f"module 'mrtpo.harness' has no attribute {name!r}")
