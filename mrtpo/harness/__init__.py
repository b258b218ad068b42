"""The compact LoRA trainer behind `mrtpo train`: one readable loop (loop.py) over small parts.

config.py (TrainConfig), policy.py (model + LoRA), data.py (splits, prompts per step),
rollout.py (sampling), scoring.py (rewards -> scores [N, K]), distances.py (MRTPO replay),
loss.py (clipped surrogate, KL, aggregation), update.py (micro-batched optimizer step),
metrics.py and completions.py (logs), checkpoints.py (atomic save, exact resume).

trained.py and export.py read what a run wrote back as loadable models.

`train` and `RunResult` are imported on first use, so reading the config (the CLI does it
to build its flags) does not import torch. `train(cfg)` here is the public entry: the loop
given `mrtpo.models.default.resolve_model` as the one way to turn `cfg.model` into a path
(a built-in policy's name is built on first use); the loop itself is handed that function
and builds nothing.
"""
from mrtpo.harness.config import ConfigError, TrainConfig, resolve

__all__ = ["ConfigError", "RunResult", "TrainConfig", "resolve", "train"]


def train(cfg: TrainConfig, on_step=None, on_start=None):
    """`mrtpo.harness.loop.train`, with a built-in policy's name (`mrtpo-tiny`) built on first
    use and loaded from its cached directory; any other `--model` is loaded as it is."""
    from mrtpo.harness.loop import train as train_loop
    from mrtpo.models.default import resolve_model

    return train_loop(cfg, on_step, on_start, model_path=resolve_model)


def __getattr__(name: str):
    if name == "RunResult":
        from mrtpo.harness import loop

        return loop.RunResult
    raise AttributeError(f"module 'mrtpo.harness' has no attribute {name!r}")
