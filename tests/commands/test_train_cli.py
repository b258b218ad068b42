"""`mrtpo train` through the real typer app: flags over YAML, the run directory, resume, errors."""
from __future__ import annotations

import json
import re

import yaml
from typer.testing import CliRunner

import harness_task
from mrtpo.cli import app

harness_task.register()
ANSI = re.compile(r"\x1b\[[0-9;]*m")
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def _invoke(args):
    result = CliRunner().invoke(app, ["train", *args], env=ENV, prog_name="mrtpo")
    return result, ANSI.sub("", result.output)


def test_train_writes_the_run_directory_and_resumes(tiny_qwen2_dir, tmp_path):
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump({
        "task": "harness-words", "steps": 7, "batch-prompts": 2, "num_generations": 2,
        "max_new_tokens": 8, "lr": 0.01, "verify_workers": 0, "log_completions_every": 1}))
    run = tmp_path / "run"
    result, out = _invoke(["--config", str(config), "--model", str(tiny_qwen2_dir), "--steps", "1",
                           "--output-dir", str(run), "--no-mrtpo", "--lora-r", "4",
                           "--reward-weight", "short=2", "--lora-target-modules", "q_proj,v_proj"])
    assert result.exit_code == 0, out
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["steps"] == 1 and saved["lr"] == 0.01 and saved["lora_r"] == 4  # flag beat YAML
    assert saved["reward_weights"] == {"short": 2.0}
    assert saved["lora_target_modules"] == ["q_proj", "v_proj"]
    assert f"run directory: {run}" in out and "short" in out and "generate" in out
    assert "reward means over the first and the last 1 of 1 steps" in out
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 1
    row = json.loads((run / "completions.jsonl").read_text().splitlines()[0])
    assert row["reward_weights"][row["reward_names"].index("short")] == 2.0
    adapter = json.loads((run / "checkpoints" / "step-000001" / "adapter" / "adapter_config.json").read_text())
    assert set(adapter["target_modules"]) == {"q_proj", "v_proj"}
    assert adapter["lora_dropout"] == 0.0 and saved["lora_dropout"] == 0.0  # peft's default, not TRL's 0.05

    result, out = _invoke(["--resume", "--output-dir", str(run), "--steps", "2"])
    assert result.exit_code == 0, out
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    assert (run / "checkpoints" / "step-000002").is_dir()

    result, out = _invoke(["--resume", "--output-dir", str(run), "--lr", "0.5"])
    assert result.exit_code == 2 and "--resume would change settings" in out


def test_errors_are_one_line_and_exit_nonzero(tiny_qwen2_dir, tmp_path):
    # no --model means the built-in policy (tests/models/test_default_model.py), so not an error here
    result, out = _invoke(["--model", str(tmp_path / "missing"), "--task", "harness-words",
                           "--output-dir", str(tmp_path / "b")])
    assert result.exit_code == 2 and "no such local directory" in out
    result, out = _invoke(["--model", str(tiny_qwen2_dir), "--task", "harness-words",
                           "--advantage", "gdpo", "--saw", "reward"])
    assert result.exit_code == 2 and "use --saw advantage" in out
    result, out = _invoke(["--model", str(tiny_qwen2_dir), "--task", "harness-word",
                           "--output-dir", str(tmp_path / "c")])
    assert result.exit_code == 2 and "Did you mean 'harness-words'" in out
    result, out = _invoke(["--model", str(tiny_qwen2_dir), "--task", "harness-words",
                           "--reward-weight", "short"])
    assert result.exit_code == 2 and "expected KEY=VALUE" in out
    result, out = _invoke(["--model", str(tiny_qwen2_dir), "--task", "harness-broken", "--task-arg",
                           "mode=nan", "--output-dir", str(tmp_path / "d"), "--steps", "1",
                           "--batch-prompts", "1", "--num-generations", "2", "--max-new-tokens", "4",
                           "--verify-workers", "0", "--no-mrtpo"])
    assert result.exit_code == 1 and "reward 'fragile'" in out


def test_help_lists_the_training_flags():
    result = CliRunner().invoke(app, ["train", "--help"], env=ENV, prog_name="mrtpo")
    out = ANSI.sub("", result.output)
    for flag in ("--config", "--model", "--task", "--data", "--lora", "--no-lora", "--lora-r",
                 "--lora-alpha", "--lora-dropout", "--lora-target-modules", "--batch-prompts",
                 "--num-generations", "--temperature", "--top-p", "--max-new-tokens", "--steps",
                 "--output-dir", "--seed", "--advantage", "--saw", "--mrtpo", "--no-mrtpo",
                 "--epsilon", "--epsilon-high", "--beta", "--loss-type", "--lr", "--grad-accum",
                 "--max-grad-norm", "--save-every", "--resume", "--log-completions-every",
                 "--eval-every", "--heldout"):
        assert flag in out, flag
    # the older names of the held-out measurement's settings, said to be aliases
    text = re.sub(r"[\s│]+", " ", out)  # the words as read, across the table's wrapped lines
    assert "--heldout-every is the same setting" in text
    assert "--heldout-every is --eval-every, --eval-size is --heldout" in text


def test_the_summary_compares_the_first_and_the_last_fifth():
    from mrtpo.commands.train import fifth_means

    values = [0.0] * 4 + [0.5] * 12 + [1.0] * 4  # 20 steps: a fifth is 4
    assert fifth_means(values) == (0.0, 1.0)
    assert fifth_means([0.0] * 3 + [0.5] * 14 + [1.0] * 3) == (0.125, 0.875)  # not the first 3 only
    assert fifth_means([None, 0.2, None, 0.4]) == (0.2, 0.4)  # absent steps skipped
    assert fifth_means([0.3]) == (0.3, 0.3)
    assert fifth_means([None, None]) == (None, None)


def test_the_bar_goes_on_after_a_held_out_measurement():
    """On a terminal a measurement's lines end the steps' bar; the next step starts a new one
    where the old one stopped (the last step's measurement comes before the last step's line)."""
    import io

    from rich.console import Console

    from mrtpo.commands.train import _Bar

    bar = _Bar(3, Console(file=io.StringIO(), force_terminal=True, width=100))
    bar.start(0)
    bar.step({"step": 1, "reward": 0.5})
    bar.phase("held-out after training: 2 examples, greedy, the task's official metric")
    assert bar.progress is None
    bar.step({"step": 2, "reward": 0.25})
    assert bar.progress is not None and bar.progress.tasks[0].completed == 2
    bar.stop()
