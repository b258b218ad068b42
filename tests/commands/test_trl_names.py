"""TRL's setting names as aliases of `mrtpo train`'s, on the command line and in YAML.

The real typer app parses the flags and the real `resolve` builds the config; only the
training itself is left out (the captured config is what it would train with).
"""
from __future__ import annotations

import re

import pytest
import yaml
from typer.testing import CliRunner

import mrtpo.commands.train as train_cmd
from mrtpo.cli import app
from mrtpo.harness.config import ConfigError, resolve

ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
TRL_FLAGS = ["--learning_rate", "3e-4", "--max_steps", "7", "--max_completion_length", "33",
             "--gradient_accumulation_steps", "2", "--save_steps", "3", "--reward_weights", "format=2"]


@pytest.fixture
def captured(monkeypatch):
    from mrtpo.harness.loop import RunResult

    seen = {}

    def capture(cfg, console):
        seen["cfg"] = cfg
        return RunResult(cfg.run_dir, [], cfg)

    monkeypatch.setattr(train_cmd, "_train_with_progress", capture)
    return seen


def _train(args):
    result = CliRunner().invoke(app, ["train", *args], env=ENV, prog_name="mrtpo")
    return result, re.sub(r"\x1b\[[0-9;]*m", "", result.output)


def test_trl_flags_set_the_same_settings(captured, tmp_path):
    result, out = _train(["--model", "org/model", "--task", "toolcall", "--output-dir", str(tmp_path / "a"),
                          *TRL_FLAGS, "--num_generations", "4", "--loss_type", "dr_grpo", "--no_mrtpo"])
    assert result.exit_code == 0, out
    cfg = captured["cfg"]
    assert (cfg.lr, cfg.steps, cfg.max_new_tokens, cfg.grad_accum, cfg.save_every) == (3e-4, 7, 33, 2, 3)
    assert cfg.reward_weights == {"format": 2.0}
    assert (cfg.num_generations, cfg.loss_type, cfg.mrtpo) == (4, "dr_grpo", False)


def test_trl_keys_in_yaml(tmp_path):
    path = tmp_path / "trl.yaml"
    path.write_text(yaml.safe_dump({"model": "org/model", "task": "toolcall", "learning_rate": 3e-4,
                                    "max_steps": 7, "max_completion_length": 33, "gradient_accumulation_steps": 2,
                                    "save_steps": 3, "reward_weights": {"format": 2.0}}))
    cfg = resolve(path, {"output_dir": str(tmp_path / "b")})
    assert (cfg.lr, cfg.steps, cfg.max_new_tokens, cfg.grad_accum, cfg.save_every) == (3e-4, 7, 33, 2, 3)
    assert cfg.reward_weights == {"format": 2.0}

    path.write_text(yaml.safe_dump({"lr": 1e-4, "learning_rate": 3e-4}))
    with pytest.raises(ConfigError, match="'learning_rate' and 'lr' name the same setting"):
        resolve(path, {})
    path.write_text(yaml.safe_dump({"reward_weights": [1.0, 2.0]}))
    with pytest.raises(ConfigError, match="by its reward's name"):
        resolve(path, {})


def test_aliases_stay_out_of_help_and_bad_ones_still_fail(captured):
    result, out = _train(["--help"])
    assert result.exit_code == 0
    assert "--max-steps" not in out and "--learning-rate" not in out  # no second option per alias
    assert "max_steps (--steps)" in out  # one line names them
    result, out = _train(["--max_stepz", "3"])
    assert result.exit_code == 2 and "No such option" in out
    result, out = _train(["--model", "org/model", "--task", "toolcall", "--reward_weights", "1.0"])
    assert result.exit_code == 2 and "NAME=WEIGHT" in out
