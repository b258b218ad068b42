"""The compact LoRA trainer behind `mrtpo train`: one readable loop (loop.py) over small parts.

The recipe is at the top: config.py (TrainConfig), policy.py (model + LoRA), data.py (splits,
prompts per step), rollout.py (sampling), scoring.py (rewards -> scores [N, K]), token_credit.py
(MRTPO's step: the replay -> per-token credit), forward.py (the update's log-probs), loss.py
(clipped surrogate, KL, aggregation), update.py (micro-batched optimizer step), metrics.py.

fast/ holds the exact fast paths the recipe takes; run/ what a run writes and reads back (the
JSONL logs, lock, checkpoints, completions log, trackers, heldout.json, and trained.py and
export.py, which read a run back as a loadable model).

`train` and `RunResult` are imported on first use, so reading the config (the CLI does it
to build its flags) does not import torch. `train(cfg)` here is the public entry: the loop
given `mrtpo.models.builds.resolve_model` as the one way to turn `cfg.model` into a path
(a built-in policy's name is built on first use); the loop itself is handed that function
and builds nothing.
"""
from mrtpo.harness.config import ConfigError, TrainConfig, resolve

__all__ = ["ConfigError", "RunResult", "TrainConfig", "resolve", "train"]


def train(cfg: TrainConfig, on_step=None, on_start=None, measure=None, on_phase=None):
    """`mrtpo.harness.loop.train`, with a built-in policy's name (`smollm2-135m`) built on first
    use and loaded from its cached directory (said through `on_phase` before the build starts);
    any other `--model` is loaded as it is. `measure` is the held-out before/after's metric
    (--heldout): `mrtpo.evaluation.heldout.measure` gives `mrtpo eval`'s numbers, as `mrtpo train` does."""
    from mrtpo.harness.loop import train as train_loop
    from mrtpo.models.builds import build_needed, resolve_model

    def model_path(name: str) -> str:
        where = build_needed(name)
        if where is not None and on_phase is not None:
            on_phase(f"building the built-in policy {name} on first use into {where} (later runs reuse it)")
        path = resolve_model(name)
        if where is not None and on_phase is not None:
            on_phase(f"built {name}: {path}")
        return path

    return train_loop(cfg, on_step, on_start, model_path=model_path, measure=measure, on_phase=on_phase)


def __getattr__(name: str):
    if name == "RunResult":
        from mrtpo.harness import loop

        return loop.RunResult
    raise AttributeError(f"module 'mrtpo.harness' has no attribute {name!r}")
