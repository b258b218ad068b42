"""The small training runs that tests of run files, checkpoints and settings make and damage: one setting of the harness's
toy task (`harness_task`), a config for it, and where a run keeps a step's checkpoint."""
from __future__ import annotations

from pathlib import Path

from mrtpo.harness import TrainConfig

SMALL = dict(task="harness-words", batch_prompts=2, num_generations=2, max_new_tokens=6,
             verify_workers=0, lr=5e-3, lora_r=4, log_completions_every=1, save_every=1, mrtpo=False)


def small_config(model_dir, out, **kw) -> TrainConfig:
    """SMALL on `model_dir`, writing into `out`; `kw` overrides any setting."""
    return TrainConfig(model=str(model_dir), output_dir=str(out), **{**SMALL, **kw})


def step_dir(run: Path, step: int) -> Path:
    return run / "checkpoints" / f"step-{step:06d}"
