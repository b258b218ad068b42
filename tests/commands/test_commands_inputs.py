"""What users and runs hand the commands as settings and files: the train settings line never
prints a dataclass's MISSING marker; -o weights and --reward-weight share one range; messages name
what is wrong and where; odd-typed fields in completions.jsonl and data rows are named, not
rendered or linted; large inputs are bounded and say what was cut."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import harness_task
from cli_runs import clean_error as _clean_error
from cli_runs import invoke
from limits import time_limit

harness_task.register()
pytestmark = pytest.mark.timeout(300)


def _invoke(*args):
    return invoke(*args, with_stderr=True)


# --- the settings line ---------------------------------------------------------------------
def test_the_settings_line_of_a_user_model_shows_real_defaults(tiny_qwen2_dir, tmp_path):
    result, out = _invoke("train", "--task", "harness-words", "--model", tiny_qwen2_dir, "--output-dir",
                          tmp_path / "o", "--data", tmp_path / "absent.jsonl", "--steps", 1)
    assert "settings: the trainer's defaults" in out, out
    assert "MISSING" not in out and "object at 0x" not in out, out
    assert "task_args={}" in out, out


# --- one range for every reward weight -------------------------------------------------------
@pytest.mark.parametrize("command", ["eval", "train", "blocks"])
@pytest.mark.parametrize("weight", ["1e308", "-2e6"])
def test_a_tasks_weight_option_has_the_reward_weight_range(tiny_qwen2_dir, tmp_path, command, weight):
    data = tmp_path / "r.jsonl"
    data.write_text(json.dumps({"id": "x", "response": "SELECT 1"}) + "\n")
    args = {"eval": ["eval", "text2sql", "--responses", data],
            "train": ["train", "--task", "text2sql", "--model", tiny_qwen2_dir, "--output-dir", tmp_path / "o"],
            "blocks": ["blocks", "preview", "text2sql"]}[command]
    result, out = _invoke(*args, "-o", f"weights={{result: {weight}}}")
    _clean_error(result, out, "between -1e+06 and 1e+06", "result")
    assert "learning rate" not in out


def test_a_custom_tasks_reward_weight_has_the_same_range(tmp_path):
    from mrtpo.tasks import Reward, Verdict, get_task
    from mrtpo.tasks.contract import RewardError, checked_rewards

    task = get_task("harness-words")
    ex = task.load()[0]
    huge = Reward("huge", lambda e, r: Verdict(1.0), lambda e, v: "", weight=1e308)
    task.rewards = lambda example: [huge]
    with pytest.raises(RewardError, match="between -1e\\+06 and 1e\\+06"):
        checked_rewards(task, ex)


# --- messages that name what is wrong and where --------------------------------------------
@pytest.mark.parametrize("kind, words", [("dir", "is a directory"), ("fifo", "named pipe"), ("dev-zero", "is a device")])
def test_a_config_that_is_not_a_file_says_what_it_is(tmp_path, tiny_qwen2_dir, kind, words):
    import os

    if kind == "dir":
        path = tmp_path / "conf"
        path.mkdir()
    elif kind == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    with time_limit(20, "--config on a special file"):
        result, out = _invoke("train", "--config", path, "--model", tiny_qwen2_dir, "--output-dir", tmp_path / "o")
    _clean_error(result, out, str(path), words)
    assert "no such file" not in out


def test_model_build_from_a_directory_says_so(tmp_path):
    result, out = _invoke("model", "build", "smollm2-135m", "--cache-dir", tmp_path / "cache", "--from", tmp_path)
    _clean_error(result, out, str(tmp_path), "is a directory")


def test_a_broken_tokenizer_json_is_named(tiny_qwen2_dir, tmp_path):
    model = Path(shutil.copytree(tiny_qwen2_dir, tmp_path / "m"))
    (model / "tokenizer.json").write_text('{"version": "1.0", "truncation": ')
    result, out = _invoke("eval", "toolcall", "--model", model, "--limit", 1, "--no-progress")
    _clean_error(result, out, str(model / "tokenizer.json"), "not valid JSON")


@pytest.mark.parametrize("field, value", [("num_attention_heads", 0), ("hidden_size", -8), ("num_hidden_layers", "two")])
def test_a_config_that_cannot_be_built_is_named_not_blamed_on_the_tokenizer(tiny_qwen2_dir, tmp_path, field, value):
    """transformers reads config.json while loading the tokenizer: the error names config.json
    and what to do, not 'could not load the tokenizer: ZeroDivisionError'."""
    import json
    import shutil

    model = tmp_path / "m"
    shutil.copytree(tiny_qwen2_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(dict(config, **{field: value})))
    result, out = invoke("eval", "toolcall", "--model", model, "--limit", "1", with_stderr=True)
    _clean_error(result, out, str(model / "config.json"), field)
    assert "tokenizer" not in out and "ZeroDivisionError" not in out


@pytest.mark.parametrize("what", ["responses", "data"])
def test_deeply_nested_brackets_in_jsonl_name_the_file_and_line(tmp_path, what):
    path = tmp_path / "rows.jsonl"
    first = {"key": 1, "prompt": "p", "instruction_id_list": [], "kwargs": [], "id": "1", "response": "x"}
    path.write_text(json.dumps(first) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    args = (["eval", "instruct", "--responses", path] if what == "responses" else
            ["eval", "instruct", "--data", path, "--responses", path])
    result, out = _invoke(*args)
    _clean_error(result, out, str(path), "nested too deeply")
    assert "line 2" in out or f"{path}:2" in out, out
    assert "RecursionError" not in out and "recursion" not in out


# --- odd-typed fields are named, not rendered ----------------------------------------------------
@pytest.mark.parametrize("field, value", [("tokens", "notalist"), ("reward_names", [1, 2]), ("credit", "12"),
                                          ("blocks", [["nested"]]), ("advantage", "high")])
def test_an_odd_typed_completions_field_is_named(run_copy, field, value):
    path = run_copy / "completions.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0][field] = value
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result, out = _invoke("credit", run_copy, "--limit", 1)
    _clean_error(result, out, "completions.jsonl, line 1", f"field {field!r} must be")


@pytest.mark.parametrize("task, row", [
    ("toolcall", {"id": ["x"], "question": "Weather?", "functions": [{"name": "f", "parameters": {"type": "object", "properties": {}}}],
                  "ground_truth": [{"f": {}}]}),
    ("text2sql", {"id": {"a": 1}, "question": "How many?", "query": "SELECT 1", "db_path": "books.sqlite"}),
    ("instruct", {"key": [1], "prompt": "Write.", "instruction_id_list": [], "kwargs": []}),
])
def test_a_row_id_that_is_not_text_is_named(tmp_path, task, row):
    import sqlite3

    sqlite3.connect(tmp_path / "books.sqlite").close()
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps(row) + "\n")
    result, out = _invoke("blocks", "lint", task, "--data", data)
    assert "Traceback" not in out, out
    assert result.exit_code != 0, out
    assert str(data) in out and "an id must be text or a whole number" in out, out


# --- large inputs are bounded and say what was cut ----------------------------------------------
def test_credit_png_of_a_200k_token_completion_is_bounded(run_copy, tmp_path):
    pytest.importorskip("matplotlib")
    path = run_copy / "completions.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    row, n = rows[0], 200_000
    k = len(row["reward_names"])
    row.update(tokens=["tok"] * n, response_ids=[1] * n, token_advantages=[0.0] * n,
               distances=[[0.5] * n for _ in range(k)], token_weights=[[1.0] * n for _ in range(k)])
    path.write_text(json.dumps(row) + "\n")
    with time_limit(90, "credit --png of 200k tokens"):
        result, out = _invoke("credit", run_copy, "--limit", 1, "--png", tmp_path / "heat.png", "--plain")
    assert result.exit_code == 0, out[-2000:]
    assert (tmp_path / "heat.png").is_file()
    assert "the first 1,056 of 200,000 tokens" in out, out[-2000:]
