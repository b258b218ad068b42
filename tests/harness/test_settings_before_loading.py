"""Settings that cannot work are refused in one line, before the model is used (issue 61, D):
a LoRA rank above the adapted layers' width, and --mrtpo-weights spans on a task without
spans (checked before the model loads)."""
from __future__ import annotations

import pytest

from cli_runs import clean_error, invoke

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def _tasks():
    import harness_task

    harness_task.register()


def test_a_lora_rank_above_the_layers_width_is_refused(tiny_qwen2_dir, tmp_path):
    result, out = invoke("train", "--task", "harness-words", "--model", tiny_qwen2_dir, "--output-dir",
                         tmp_path / "run", "--steps", 1, "--lora-r", 1_000_000, "--heldout", 0)
    clean_error(result, out, "--lora-r 1000000 is larger than the layers LoRA adapts", "the widest is 32 wide",
                "use --lora-r 32 or less", codes=(1, 2))
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())


def test_a_rank_the_layers_can_take_still_trains(tiny_qwen2_dir, tmp_path):
    result, out = invoke("train", "--task", "harness-words", "--model", tiny_qwen2_dir, "--output-dir",
                         tmp_path / "run", "--steps", 1, "--lora-r", 32, "--batch-prompts", 2,
                         "--num-generations", 2, "--max-new-tokens", 4, "--heldout", 0)
    assert result.exit_code == 0, out[-2000:]


def test_spans_on_a_task_without_spans_is_refused_before_the_model_loads(tiny_qwen2_dir, tmp_path):
    import shutil

    model = shutil.copytree(tiny_qwen2_dir, tmp_path / "model")
    for weights in model.glob("*.safetensors"):  # loading it would fail: the refusal must come first
        weights.write_bytes(b"not weights")
    result, out = invoke("train", "--task", "harness-words", "--model", model, "--output-dir",
                         tmp_path / "run", "--steps", 1, "--mrtpo-weights", "spans", "--heldout", 0)
    clean_error(result, out, "--mrtpo-weights spans: task 'harness-words' cannot say which tokens",
                codes=(1, 2))
    assert "safetensors" not in out and "cannot be read" not in out, out
