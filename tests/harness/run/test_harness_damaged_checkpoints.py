"""Run files are never written through a link, a damaged checkpoint is never exported or loaded,
damaged state.json and run logs are named instead of tracebacks, output paths that cannot be
written are explained, a deleted run-id keeps the run's own checkpoints its own, and an export
respects the umask.

Real runs of a tiny model (seconds each), damaged on disk, through the real commands."""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

import harness_task
import pytest
from small_runs import small_config as _cfg
from small_runs import step_dir
from typer.testing import CliRunner

from mrtpo.cli import app
from mrtpo.harness import ConfigError, train
from mrtpo.harness.run import checkpoints
from mrtpo.harness.run.files import JsonlLog
from mrtpo.harness.run.lock import RunLock
from mrtpo.harness.run.trained import TrainedModelError, locate

harness_task.register()
pytestmark = pytest.mark.timeout(300)

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
TINY_FLAGS = ["--task", "harness-words", "--steps", "1", "--batch-prompts", "2", "--num-generations", "2",
              "--max-new-tokens", "4", "--verify-workers", "0", "--no-mrtpo"]
ADAPTER = "adapter/adapter_model.safetensors"


def _invoke(*args):
    """(result, its output on one line); the command must not end in a traceback."""
    result = CliRunner().invoke(app, [str(a) for a in args], env=ENV, prog_name="mrtpo")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result, " ".join(ANSI.sub("", result.output).split())


@pytest.fixture(scope="module")
def runs(tiny_qwen2_dir, tmp_path_factory):
    """`lora`: 2 steps, a checkpoint after each; `full`: the same with --no-lora; `other`:
    1 step of another run (another fingerprint)."""
    base = tmp_path_factory.mktemp("runs")
    train(_cfg(tiny_qwen2_dir, base / "lora", steps=2))
    train(_cfg(tiny_qwen2_dir, base / "full", steps=2, lora=False))
    train(_cfg(tiny_qwen2_dir, base / "other", steps=1, seed=7))
    return base


@pytest.fixture
def run_a(runs, tmp_path):
    """A fresh copy of the LoRA run to damage."""
    return Path(shutil.copytree(runs / "lora", tmp_path / "a"))


def _truncate(p: Path):
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _flip_last_byte(p: Path):  # same size, other content: only the SHA-256 tells
    data = bytearray(p.read_bytes())
    data[-1] ^= 0xFF
    p.write_bytes(bytes(data))


# --- never write through a link ------------------------------------------------------------
@pytest.mark.parametrize("name", [".lock", "config.yaml", "metrics.jsonl", "completions.jsonl", ".wandb_run_id",
                                  "checkpoints",
                                  "checkpoints/latest", "checkpoints/run-id", "checkpoints/step-000002"])
def test_a_run_file_that_is_a_symlink_is_refused_and_its_target_kept(tiny_qwen2_dir, run_a, tmp_path, name):
    victim = tmp_path / "victim"
    is_dir = name in ("checkpoints", "checkpoints/step-000002")
    victim.mkdir() if is_dir else victim.write_text("precious\n")
    link = run_a / name
    shutil.rmtree(link) if link.is_dir() else link.unlink(missing_ok=True)
    link.symlink_to(victim)
    with pytest.raises(ConfigError, match=rf"{re.escape(str(link))} is a symbolic link.*Remove the link"):
        train(_cfg(tiny_qwen2_dir, run_a, steps=3, resume=True))
    assert (list(victim.iterdir()) == []) if is_dir else victim.read_text() == "precious\n"


@pytest.mark.parametrize("name", [".lock", "metrics.jsonl", "completions.jsonl", "config.yaml"])
def test_a_fresh_run_never_creates_or_truncates_through_a_link(tiny_qwen2_dir, tmp_path, name):
    run = tmp_path / "run"
    run.mkdir()
    (run / name).symlink_to(tmp_path / "not-yet")  # dangling: following it would create the file
    result, out = _invoke("train", "--model", tiny_qwen2_dir, "--output-dir", run, *TINY_FLAGS)
    assert result.exit_code == 2 and "is a symbolic link" in out and name in out, out
    assert not (tmp_path / "not-yet").exists()


def test_a_hard_linked_lock_is_refused(tiny_qwen2_dir, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "run").mkdir()
    os.link(victim, tmp_path / "run" / ".lock")
    with pytest.raises(ConfigError, match="has other names"):
        RunLock(tmp_path / "run").acquire()
    assert victim.read_text() == "precious\n"


def test_log_and_atomic_writes_replace_or_refuse_a_link_planted_later(tmp_path):
    from mrtpo.harness.run.files import RunFileError, open_append
    from mrtpo.textio import write_atomic

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "metrics.jsonl").symlink_to(victim)
    with pytest.raises(RunFileError, match="symbolic link"):
        JsonlLog(tmp_path / "metrics.jsonl").write([{"step": 1}])
    with pytest.raises(RunFileError, match="symbolic link"):
        open_append(tmp_path / "metrics.jsonl")
    (tmp_path / "config.yaml").symlink_to(victim)
    write_atomic(tmp_path / "config.yaml", "a: 1\n")  # the link is replaced, not written through
    assert not (tmp_path / "config.yaml").is_symlink() and (tmp_path / "config.yaml").read_text() == "a: 1\n"
    assert victim.read_text() == "precious\n"


# --- export, eval --model and credit --model check the checkpoint first -------------
DAMAGE = {
    "adapter truncated": (ADAPTER, _truncate, "bytes"),
    "adapter empty": (ADAPTER, lambda p: p.write_bytes(b""), "0 bytes"),
    "adapter changed": (ADAPTER, _flip_last_byte, "SHA-256 differs"),
    "adapter missing": (ADAPTER, Path.unlink, "is missing"),
    "adapter config missing": ("adapter/adapter_config.json", Path.unlink, "is missing"),
    "state garbage": ("state.json", lambda p: p.write_text("\x00garbage{"), "not valid JSON"),
    "state empty": ("state.json", lambda p: p.write_text(""), "is empty"),
    "state step a string": ("state.json", lambda p: p.write_text('{"step": "two"}'), "does not hold a step number"),
    "state a list": ("state.json", lambda p: p.write_text("[2]"), "does not hold a JSON object"),
    "state bad file entry": ("state.json", lambda p: p.write_text(json.dumps(
        {**json.loads(p.read_text()), "files": {ADAPTER: 26008}})), "not [bytes, sha256]"),
    "state files a list": ("state.json", lambda p: p.write_text(json.dumps(
        {**json.loads(p.read_text()), "files": [ADAPTER]})), '"files" entry that is not an object'),
    "state escapes": ("state.json", lambda p: p.write_text(json.dumps(
        {**json.loads(p.read_text()), "files": {"../../config.yaml": [1, "0" * 64]}})), "outside the checkpoint"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_export_refuses_a_damaged_checkpoint_naming_the_file(run_a, tmp_path, case):
    name, damage, words = DAMAGE[case]
    damage(step_dir(run_a, 2) / name)
    for args in ([], ["--merge"]):
        out = tmp_path / f"out{len(args)}"
        result, text = _invoke("export", run_a, out, *args)
        assert result.exit_code == 2, text
        assert name.split("/")[-1] in text and words in text, text
        assert "newest intact checkpoint, step 1" in text and "--step 1" in text, text
        assert not out.exists() and not list(tmp_path.glob(f".{out.name}.export-*"))
    result, text = _invoke("export", run_a, tmp_path / "old", "--step", "1")  # the intact one still exports
    assert result.exit_code == 0, text


def test_export_refuses_a_truncated_full_model(runs, tmp_path):
    run = Path(shutil.copytree(runs / "full", tmp_path / "full"))
    for damage, words in ((_truncate, "bytes"), (_flip_last_byte, "SHA-256 differs")):
        shutil.copy(runs / "full" / "checkpoints" / "step-000002" / "model" / "model.safetensors",
                    step_dir(run, 2) / "model" / "model.safetensors")
        damage(step_dir(run, 2) / "model" / "model.safetensors")
        result, text = _invoke("export", run, tmp_path / "out")
        assert result.exit_code == 2 and "model.safetensors" in text and words in text, text
        assert not (tmp_path / "out").exists()


def test_a_damaged_adapter_outside_a_checkpoint_is_named_before_loading(run_a, tmp_path):
    """An exported adapter has no manifest: its safetensors layout is checked instead."""
    result, text = _invoke("export", run_a, tmp_path / "exported")
    assert result.exit_code == 0, text
    weights = tmp_path / "exported" / "adapter_model.safetensors"
    for damage, words in ((_truncate, "truncated"), (lambda p: p.write_bytes(b"\xff" * 64), "header"),
                          (lambda p: p.write_bytes(b"abc"), "too short")):
        shutil.copy(step_dir(run_a, 2) / ADAPTER, weights)
        damage(weights)
        for args in (["eval", "harness-words", "--model", tmp_path / "exported", "--limit", "1",
                      "--max-new-tokens", "2", "--no-progress"],
                     ["credit", "harness-words", "--model", tmp_path / "exported", "--limit", "1"],
                     ["export", tmp_path / "exported", tmp_path / "merged", "--merge"]):
            result, text = _invoke(*args)
            assert result.exit_code == 2 and "adapter_model.safetensors" in text and words in text, (args, text)


def test_a_truncated_model_directory_is_named_before_loading(tiny_qwen2_dir, tmp_path):
    model = Path(shutil.copytree(tiny_qwen2_dir, tmp_path / "model"))
    _truncate(model / "model.safetensors")
    for args in (["eval", "harness-words", "--model", model, "--limit", "1", "--no-progress"],
                 ["credit", "harness-words", "--model", model, "--limit", "1"],
                 ["export", model, tmp_path / "out"]):
        result, text = _invoke(*args)
        assert result.exit_code == 2 and f"{model / 'model.safetensors'} is" in text and "truncated" in text, text


@pytest.mark.parametrize("case", ["adapter truncated", "state step a string", "state empty", "state bad file entry"])
def test_eval_and_credit_model_name_the_damaged_file(run_a, case):
    name, damage, words = DAMAGE[case]
    damage(step_dir(run_a, 2) / name)
    for model in (run_a, step_dir(run_a, 2), step_dir(run_a, 2) / "adapter"):
        for args in (["eval", "harness-words", "--model", model, "--limit", "1", "--no-progress"],
                     ["credit", "harness-words", "--model", model, "--limit", "1"]):
            result, text = _invoke(*args)
            assert result.exit_code == 2 and str(step_dir(run_a, 2)) in text and words in text, (args, text)
    with pytest.raises(TrainedModelError, match=name.split("/")[-1]):
        locate(run_a)
    assert locate(step_dir(run_a, 1)).step == 1


def test_a_checkpoint_without_state_json_is_named(run_a):
    (step_dir(run_a, 2) / "state.json").unlink()
    with pytest.raises(TrainedModelError, match=r"state\.json is missing"):
        locate(step_dir(run_a, 2))
    assert locate(run_a).step == 1  # the run's newest complete checkpoint


# --- resume skips a damaged state.json, naming it ------------------------------------------
@pytest.mark.parametrize("case", [c for c in DAMAGE if c.startswith("state")])
def test_resume_skips_a_damaged_state_json(run_a, case, caplog):
    name, damage, words = DAMAGE[case]
    damage(step_dir(run_a, 2) / name)
    with caplog.at_level(logging.WARNING):
        assert checkpoints.resume_point(run_a) == step_dir(run_a, 1)
    assert "state.json" in caplog.text and words in caplog.text, caplog.text
    with pytest.raises(checkpoints.CheckpointError, match=re.escape(words)):
        checkpoints.read_state(step_dir(run_a, 2))


# --- output paths that cannot be written ---------------------------------------------------
def test_export_to_an_unwritable_place_is_explained(run_a, tmp_path):
    (tmp_path / "file").write_text("x")
    for out, words in ((tmp_path / "file" / "sub", f"{tmp_path / 'file'} is a file, not a directory"),
                       (tmp_path / "file" / "a" / "b", "is a file, not a directory"),
                       (tmp_path / "file", "already exists and is not empty"),
                       (Path("/proc/mrtpo-x"), "cannot write /proc/mrtpo-x")):
        result, text = _invoke("export", run_a, out)
        assert result.exit_code == 2 and words in text, text
    assert (tmp_path / "file").read_text() == "x"


def test_train_output_dir_that_is_a_file_or_lock_that_is_a_directory(tiny_qwen2_dir, tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for run, words in ((tmp_path / "file", f"{tmp_path / 'file'} is a file, not a directory"),
                       (tmp_path / "dangling", "which does not exist"),
                       (tmp_path / "file" / "sub", f"{tmp_path / 'file'} is a file, not a directory"),
                       (Path("/proc/mrtpo-run"), "cannot use /proc/mrtpo-run as the run directory")):
        result, text = _invoke("train", "--model", tiny_qwen2_dir, "--output-dir", run, *TINY_FLAGS)
        assert result.exit_code == 2 and words in text, text
    (tmp_path / "run" / ".lock").mkdir(parents=True)
    result, text = _invoke("train", "--model", tiny_qwen2_dir, "--output-dir", tmp_path / "run", *TINY_FLAGS)
    assert result.exit_code == 2 and ".lock is not a regular file" in text, text
    (tmp_path / "run2" / "metrics.jsonl").mkdir(parents=True)
    result, text = _invoke("train", "--model", tiny_qwen2_dir, "--output-dir", tmp_path / "run2", *TINY_FLAGS)
    assert result.exit_code == 2 and "metrics.jsonl is not a regular file" in text, text


# --- damaged run logs on resume: a clean error naming the file and line ---------------------
LOG_DAMAGE = {
    "metrics step a string": ("metrics.jsonl", 1, '{"step": "x", "reward": 0.5}', "line 1", "\"step\" is 'x'"),
    "metrics bad middle line": ("metrics.jsonl", 0, '{"step": 1, "rew', "line 1", "not valid JSON"),
    "metrics a list": ("metrics.jsonl", 1, "[1, 2]", "line 1", "JSON list"),
    "metrics step missing": ("metrics.jsonl", 1, '{"reward": 0.5}', "line 1", "\"step\" is None"),
    "metrics tokens a string": ("metrics.jsonl", 2, '{"step": 2, "num_tokens": "many"}', "step 2",
                                "num_tokens is 'many'"),
    "completions bad middle line": ("completions.jsonl", 0, "{oops", "line 1", "not valid JSON"),
    "completions step a float": ("completions.jsonl", 1, '{"step": 1.5}', "line 1", "\"step\" is 1.5"),
}


@pytest.mark.parametrize("case", list(LOG_DAMAGE))
def test_resume_with_a_damaged_log_is_a_clean_error(run_a, case):
    name, keep, line, where, words = LOG_DAMAGE[case]
    path = run_a / name
    lines = path.read_text().splitlines()
    if name == "metrics.jsonl" and keep == 2:  # the last step's record replaced
        lines[-1] = line
    else:
        lines[0] = line
    path.write_text("\n".join(lines) + "\n")
    before = path.read_bytes()
    result, text = _invoke("train", "--resume", "--output-dir", run_a, "--steps", "3")
    assert result.exit_code == 2, text
    assert f"{path}" in text and where in text and words in text and "fix or remove" in text, text
    assert path.read_bytes() == before  # nothing rewritten
    assert not step_dir(run_a, 3).exists()


# --- a deleted run-id; another run's checkpoint --------------------------------------------
def test_a_deleted_run_id_is_restored_and_older_checkpoints_stay_the_runs(tiny_qwen2_dir, run_a, caplog):
    own = checkpoints.read_state(step_dir(run_a, 1))["run"]
    (run_a / "checkpoints" / "run-id").unlink()
    with caplog.at_level(logging.WARNING):
        train(_cfg(tiny_qwen2_dir, run_a, steps=3, resume=True))
    assert "restored the run's fingerprint" in caplog.text
    assert (run_a / "checkpoints" / "run-id").read_text().strip() == own
    for step in (1, 2, 3):
        assert checkpoints.problems(step_dir(run_a, step)) == "", step
        assert checkpoints.read_state(step_dir(run_a, step))["run"] == own


def test_a_changed_run_id_says_to_delete_it(tiny_qwen2_dir, run_a):
    (run_a / "checkpoints" / "run-id").write_text("0123456789abcdef\n")
    with pytest.raises(checkpoints.CheckpointError, match=r"None matches .*run-id.*delete it"):
        train(_cfg(tiny_qwen2_dir, run_a, steps=3, resume=True))


def test_another_runs_checkpoint_does_not_count_as_reached(tiny_qwen2_dir, runs, run_a, caplog):
    foreign = step_dir(run_a, 5)
    shutil.copytree(step_dir(runs / "other", 1), foreign)
    state = json.loads((foreign / "state.json").read_text())
    (foreign / "state.json").write_text(json.dumps({**state, "step": 5}))
    with caplog.at_level(logging.WARNING):  # was: "already reached step 5"
        result = train(_cfg(tiny_qwen2_dir, run_a, steps=3, resume=True))
    assert "belongs to another run" in caplog.text
    assert [r["step"] for r in result.history] == [1, 2, 3]
    assert checkpoints.reached_step(run_a) == 3
    with pytest.raises(ConfigError, match="already reached step 3"):  # its own steps still count
        train(_cfg(tiny_qwen2_dir, run_a, steps=2, resume=True))


# --- export and checkpoint directories respect the umask ------------------------------------
def test_checkpoint_directories_respect_the_umask(runs):
    umask = os.umask(0)
    os.umask(umask)
    for step in (1, 2):
        assert step_dir(runs / "lora", step).stat().st_mode & 0o777 == 0o777 & ~umask

@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_export_directories_respect_the_umask(run_a, tmp_path, umask):
    old = os.umask(umask)
    try:
        result, text = _invoke("export", run_a, tmp_path / "new" / "out")
    finally:
        os.umask(old)
    assert result.exit_code == 0, text
    for d in (tmp_path / "new", tmp_path / "new" / "out"):
        assert d.stat().st_mode & 0o777 == 0o777 & ~umask, (d, oct(d.stat().st_mode))
