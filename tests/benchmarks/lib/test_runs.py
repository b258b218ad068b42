"""benchmarks/lib/runs.py's settings: what a learning script's runs train with."""
from __future__ import annotations

import argparse

from benchmarks.lib.runs import add_train_flags, model_settings
from mrtpo.models.builtin import RECORDED_LORA_DROPOUT, TRAIN_DEFAULTS


def _args(*argv: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=None)
    add_train_flags(ap)
    return ap.parse_args(list(argv))


def test_recorded_dropout_unless_a_flag_sets_it():
    """The recorded experiments rerun as they ran (LoRA dropout 0.05); --lora-dropout 0 gives what
    `mrtpo train` trains with by default, so a sweep for the first command can stand for it."""
    assert model_settings("smollm2-135m", _args())["lora_dropout"] == RECORDED_LORA_DROPOUT
    assert model_settings("smollm2-135m", _args("--lora-dropout", "0"))["lora_dropout"] == 0.0
    assert "lora_dropout" not in TRAIN_DEFAULTS["smollm2-135m"]  # mrtpo train: TrainConfig's 0
    settings = model_settings("smollm2-135m", _args("--lr", "3e-4", "--batch-prompts", "4"))
    assert settings["lr"] == 3e-4 and settings["batch_prompts"] == 4
