"""mrtpo.models.builtin: the built-in policies' train and experiment defaults."""
from __future__ import annotations


def test_experiments_pin_the_recorded_lora_dropout():
    """`mrtpo train` defaults to no LoRA dropout; every recorded experiment ran with 0.05, and
    the benchmarks read EXPERIMENT_DEFAULTS, so their commands rerun as they ran."""
    from mrtpo.harness import TrainConfig
    from mrtpo.models.builtin import EXPERIMENT_DEFAULTS, RECORDED_LORA_DROPOUT, TRAIN_DEFAULTS

    assert TrainConfig().lora_dropout == 0.0 and RECORDED_LORA_DROPOUT == 0.05
    assert set(EXPERIMENT_DEFAULTS) >= set(TRAIN_DEFAULTS)
    assert all(values["lora_dropout"] == 0.05 for values in EXPERIMENT_DEFAULTS.values())
    assert all("lora_dropout" not in values for values in TRAIN_DEFAULTS.values())


def test_the_builtin_table_is_plain_data():
    """Loading a policy reads the built-in table; it imports nothing of mrtpo (no build code,
    no tasks or contexts)."""
    import subprocess
    import sys

    code = ("import sys, mrtpo.models.builtin; "
            "print(sorted(m for m in sys.modules if m.startswith('mrtpo')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert eval(loaded) == ["mrtpo", "mrtpo.models", "mrtpo.models.builtin"], loaded
