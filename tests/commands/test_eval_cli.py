"""`mrtpo eval` end to end: generating with a (tiny, real) model, round trips through --out, and
tasks without a benchmark of their own (plugins) scored by their rewards.

Run: .venv/bin/python -m pytest tests/commands/test_eval_cli.py -q
"""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mrtpo.cli import app
from mrtpo.evaluation import GenerationConfig, generate, load_model, run_eval
from mrtpo.tasks import get_task, register_task, unregister_task
from mrtpo.tasks.base import Example, Reward, Task, Verdict

ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def _invoke(*args):
    return CliRunner().invoke(app, ["eval", *map(str, args)], env=ENV, prog_name="mrtpo")


def test_model_generates_greedily_and_out_round_trips(tiny_qwen2_dir, tmp_path):
    out = tmp_path / "gen.jsonl"
    r = _invoke("text2sql", "--model", tiny_qwen2_dir, "--limit", 3, "--batch-size", 2,
                "--max-new-tokens", 8, "--device", "cpu", "--out", out, "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["n"] == 3 and summary["settings"]["model"] == str(tiny_qwen2_dir)
    assert set(summary["metrics"]) == {"execution_accuracy", "executes", "format"}
    assert "generating" in r.stderr  # the progress bar, on stderr so stdout stays JSON
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3

    # the responses are the batched greedy continuations of the task's chat prompts
    task = get_task("text2sql")
    exs = task.load()[:3]
    model, tok = load_model(tiny_qwen2_dir, GenerationConfig(device="cpu"))
    expected = generate(model, tok, [task.messages(ex) for ex in exs],
                        GenerationConfig(max_new_tokens=8, batch_size=1), progress=False)
    assert [row["response"] for row in rows] == expected
    assert [row["id"] for row in rows] == [ex.id for ex in exs]

    # --out doubles as a responses file: scoring it again gives the same figures
    r2 = _invoke("text2sql", "--responses", out, "--limit", 3, "--json")
    assert r2.exit_code == 0, r2.output
    assert json.loads(r2.stdout)["metrics"] == summary["metrics"]


def test_model_path_with_instruct_task_and_no_progress(tiny_qwen2_dir, tmp_path):
    data = tmp_path / "if.jsonl"
    data.write_text(json.dumps({"id": "x", "base": "Write a poem about the sea.",
                                "constraints": [{"id": "punctuation:no_comma", "kwargs": {}}]}) + "\n")
    r = _invoke("instruct", "--data", data, "--model", tiny_qwen2_dir, "--max-new-tokens", 6,
                "--no-progress", "--device", "cpu")
    assert r.exit_code == 0, r.output
    assert "prompt_level_strict_acc" in r.stdout and "inst_level_loose_acc" in r.stdout
    assert "generating" not in r.stderr


def test_the_table_names_settings_and_the_out_file(tmp_path):
    task = get_task("text2sql")
    exs = task.load()[:2]
    responses = tmp_path / "r.jsonl"
    responses.write_text("".join(json.dumps({"id": ex.id, "response": task.reference(ex)}) + "\n" for ex in exs))
    r = _invoke("text2sql", "--responses", responses, "--missing", "skip", "--out", tmp_path / "o.jsonl")
    assert r.exit_code == 0, r.output
    assert "execution_accuracy" in r.stdout and "1.0000" in r.stdout
    assert "text2sql: 2 examples" in r.stdout and "o.jsonl" in r.stdout
    assert "are left out" in r.stderr


class _EchoTask(Task):
    """A plugin-style task with two rewards and no benchmark metric of its own."""

    name = "echo_eval_test"
    reward_names = ("nonempty", "says_hello")

    def load(self, path=None, split=None):
        return [Example("e1", "Say hello."), Example("e2", "Say goodbye.")]

    def rewards(self, example):
        return [Reward("nonempty", lambda ex, r: Verdict(float(bool(r.strip()))), lambda ex, v: "", weight=1.0),
                Reward("says_hello", lambda ex, r: Verdict(float("hello" in r.lower()), "no hello" if "hello" not in r.lower() else ""),
                       lambda ex, v: "", weight=2.0)]


@pytest.fixture()
def echo_task():
    register_task("echo_eval_test")(_EchoTask)
    yield
    unregister_task("echo_eval_test")


def test_a_task_without_a_benchmark_is_scored_by_its_rewards(echo_task, tmp_path):
    responses = tmp_path / "r.jsonl"
    responses.write_text(json.dumps({"id": "e1", "response": "Hello!"}) + "\n"
                         + json.dumps({"prompt": "Say goodbye.", "response": "bye"}) + "\n")
    task = get_task("echo_eval_test")
    report = run_eval(task, task.load(), responses_path=responses)
    assert report.metrics == {"reward": (3.0 + 1.0) / 2, "rewards/nonempty/mean": 1.0,
                              "rewards/says_hello/mean": 0.5}
    assert report.per_example[1]["feedback"] == {"says_hello": "no hello"}
    r = _invoke("echo_eval_test", "--responses", responses, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["metrics"]["rewards/says_hello/mean"] == 0.5
    r = _invoke("echo_eval_test", "--responses", responses, "--mode", "bag")
    assert r.exit_code == 2 and "do not apply to task 'echo_eval_test'" in r.stderr


@pytest.mark.parametrize("name,metric", [("text2sql", "execution_accuracy"), ("instruct", "prompt_level_strict_acc"),
                                         ("toolcall", "ast_accuracy")])
def test_bundled_references_score_perfectly_through_the_cli(name, metric, tmp_path):
    task = get_task(name)
    exs = [ex for ex in task.load() if task.reference(ex)]
    assert len(exs) >= 10
    responses = tmp_path / "refs.jsonl"
    responses.write_text("".join(json.dumps({"id": ex.id, "response": task.reference(ex)}) + "\n" for ex in exs))
    r = _invoke(name, "--responses", responses, "--missing", "skip", "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["n"] == len(exs)
    assert summary["metrics"][metric] == 1.0


def test_heldout_evaluates_the_examples_a_run_held_out(tmp_path):
    """--heldout N takes the last N examples, the ones `mrtpo train --heldout N` never trains
    on (`load_splits`), and --limit the first of those."""
    from mrtpo.harness.data import load_splits

    task = get_task("text2sql")
    exs = task.load()
    responses = tmp_path / "r.jsonl"
    responses.write_text("".join(json.dumps({"id": ex.id, "response": task.reference(ex)}) + "\n" for ex in exs))
    splits = load_splits(task, None, None, heldout=8)
    r = _invoke("text2sql", "--responses", responses, "--heldout", 8, "--limit", 3, "--out", tmp_path / "o.jsonl")
    assert r.exit_code == 0, r.output
    ids = [json.loads(line)["id"] for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert ids == [ex.id for ex in splits.heldout[:3]] == [ex.id for ex in exs[-8:-5]]
    assert not set(ids) & {ex.id for ex in splits.train}
    r = _invoke("text2sql", "--responses", responses, "--heldout", 500)
    assert r.exit_code == 0, r.output  # capped at a quarter of the data, as the run caps it
    assert f"text2sql: {len(exs) // 4} examples" in r.stdout


def test_heldout_of_too_few_examples_is_a_clear_error(echo_task, tmp_path):
    responses = tmp_path / "r.jsonl"
    responses.write_text(json.dumps({"id": "e1", "response": "Hello!"}) + "\n")
    r = _invoke("echo_eval_test", "--responses", responses, "--heldout", 1)
    assert r.exit_code == 2
    assert "--heldout 1: 2 examples hold out none" in r.stderr and "a quarter" in r.stderr
