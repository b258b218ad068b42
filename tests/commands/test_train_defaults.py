"""Whose defaults a run gets: the built-in policy's settings whenever the
model is the built-in policy (by name, left out, or given as its cached directory), the
trainer's otherwise, and `mrtpo train` says which at its start."""
from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

import mrtpo.commands.train as train_cmd
from mrtpo.cli import app
from mrtpo.harness.config import resolve
from mrtpo.models.builtin import DEFAULT_MODEL, TRAIN_DEFAULTS


@pytest.fixture
def cached_build(tmp_path):
    """A directory that is a build of the built-in policy (its manifest names it)."""
    path = tmp_path / "models" / f"{DEFAULT_MODEL}-0123456789ab"
    path.mkdir(parents=True)
    (path / "mrtpo_build.json").write_text(json.dumps({"name": DEFAULT_MODEL}))
    return path


def test_builtin_by_name_by_absence_and_by_directory_train_alike(cached_build, tmp_path):
    want = TRAIN_DEFAULTS[DEFAULT_MODEL]
    for model in (None, DEFAULT_MODEL, str(cached_build)):
        cfg = resolve(None, {"output_dir": str(tmp_path / "r"), **({"model": model} if model else {})})
        for key, value in want.items():
            assert getattr(cfg, key) == value, (model, key)
    other = resolve(None, {"model": "org/model", "task": "toolcall", "output_dir": str(tmp_path / "o")})
    assert other.lr == 1e-5 and other.steps == 100  # the trainer's defaults, for pretrained models


def test_the_policy_s_task_options_come_only_with_its_task(tmp_path):
    """SmolLM2 brings text2sql's options (demo, single-table questions); another task given
    with it gets its own, not options it may not take."""
    own = resolve(None, {"output_dir": str(tmp_path / "a")})
    assert own.task == "text2sql" and own.task_args == {"demo": True, "questions": "single-table"}
    other = resolve(None, {"task": "instruct", "output_dir": str(tmp_path / "b")})
    assert other.task == "instruct" and other.task_args == {} and other.lr == own.lr  # the rest still comes
    given = resolve(None, {"task_args": {"demo": False}, "output_dir": str(tmp_path / "c")})
    assert given.task_args == {"demo": False}  # given options win whole, as any given setting


def test_train_prints_which_defaults_apply(cached_build, tmp_path, monkeypatch):
    from mrtpo.harness.loop import RunResult

    monkeypatch.setattr(train_cmd, "_train_with_progress", lambda cfg, console: RunResult(cfg.run_dir, [], cfg))

    def first_line(*args):
        r = CliRunner().invoke(app, ["train", *args], env={"COLUMNS": "300", "NO_COLOR": "1"})
        assert r.exit_code == 0, r.output
        return next(line for line in re.sub(r"\x1b\[[0-9;]*m", "", r.output).splitlines() if line.startswith("settings:"))

    line = first_line("--model", str(cached_build), "--lr", "0.01", "--output-dir", str(tmp_path / "a"))
    assert f"built-in policy {DEFAULT_MODEL}'s defaults" in line and "steps=10" in line and "lr=" not in line
    line = first_line("--model", "org/model", "--task", "toolcall", "--output-dir", str(tmp_path / "b"))
    assert "the trainer's defaults" in line and "lr=1e-05" in line
