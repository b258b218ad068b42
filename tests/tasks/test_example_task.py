"""The worked custom task in examples/custom_task, installed as a user installs it.

CI runs `pip install -e examples/custom_task` (.ci/run); then the task is found through its
`mrtpo.tasks` entry point and goes through the commands docs/custom-tasks.md walks through:
`mrtpo tasks ls`, `mrtpo blocks lint` (clean, exit 0), `mrtpo blocks preview`, `mrtpo probe`
on its probe edits, and two training steps on a tiny model. Without the package installed
these tests skip.
"""
from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

pytest.importorskip("mrtpo_example_math", reason="examples/custom_task is not installed "
                    "(pip install -e examples/custom_task)")

from mrtpo.cli import app  # noqa: E402
from mrtpo.tasks import available_tasks, get_task  # noqa: E402

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}

if "math-word" not in available_tasks():
    pytest.skip("mrtpo_example_math is importable but its entry point is not registered "
                "(install it with pip, not by path)", allow_module_level=True)


def _invoke(*args):
    result = CliRunner().invoke(app, list(map(str, args)), env=ENV, prog_name="mrtpo")
    return result, ANSI.sub("", result.output)


def test_tasks_ls_lists_the_plugin_with_its_rewards():
    result, out = _invoke("tasks", "ls")
    assert result.exit_code == 0, out
    line = next(line for line in out.splitlines() if line.startswith("math-word"))
    assert "mrtpo-example-math==" in line and "format, correct, length" in line


def test_lint_is_clean():
    result, out = _invoke("blocks", "lint", "math-word", "--plain")
    assert result.exit_code == 0, out
    assert "10 examples, 20 responses" in out and "no findings" in out


def test_preview_shows_the_reference_and_a_corrupted_answer_in_the_format():
    result, out = _invoke("blocks", "preview", "math-word", "-n", "1", "--plain")
    assert result.exit_code == 0, out
    assert "response: reference" in out and "response: corrupted" in out
    assert "\\boxed{12}" in out and "\\boxed{13}" in out  # the answer broken inside the box
    assert "the boxed answer is 13" in out and "lint: clean" in out


def test_probe_edits_change_the_reward_they_name_inside_their_span():
    task = get_task("math-word")
    for example in task.load():
        ref = task.reference(example)
        names = [r.name for r in task.rewards(example)]
        before = dict(zip(names, (v.score for v in task.score(example, ref))))
        edits = task.probe_edits(example)
        assert sorted(e.reward for e in edits) == sorted(names)
        for e in edits:
            a, b = e.span
            assert 0 <= a < b <= len(e.response)
            # outside the span the edited response is the reference
            assert e.response[:a] == ref[:a] and e.response[b:] == ref[len(ref) - (len(e.response) - b):]
            after = dict(zip(names, (v.score for v in task.score(example, e.response))))
            assert after[e.reward] < before[e.reward], (example.id, e.kind, after)


def test_two_training_steps(tiny_qwen2_dir, tmp_path):
    run = tmp_path / "run"
    result, out = _invoke("train", "--model", tiny_qwen2_dir, "--task", "math-word", "--steps", 2,
                          "--batch-prompts", 2, "--num-generations", 2, "--max-new-tokens", 8,
                          "--verify-workers", 0, "--lora-r", 4, "--output-dir", run)
    assert result.exit_code == 0, out
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for name in ("format", "correct", "length"):
        assert f"rewards/{name}/mean" in rows[-1]
    completion = json.loads((run / "completions.jsonl").read_text().splitlines()[0])
    assert completion["reward_names"] == ["format", "correct", "length"]
    assert any("\\boxed{" in b for b in completion["blocks"])
    # MRTPO replayed the blocks (a logged step replays every reward, zero credit or not;
    # `length` has a block only for too long responses)
    assert all(max(d) > 0 for d in completion["distances"][:2])


def test_probe_replays_one_edit_per_reward(tiny_qwen2_dir):
    result, out = _invoke("probe", "math-word", "--model", tiny_qwen2_dir, "--limit", 2,
                          "--no-control", "--json")
    assert result.exit_code == 0, out
    report = json.loads(result.stdout)
    assert report["examples"] == 2 and report["skipped"] == []
    assert {k["kind"]: k["reward"] for k in report["kinds"]} == {
        "answer value": "correct", "text after the answer": "format", "padding": "length"}
    assert {e["span_text"] for e in report["edits"] if e["kind"] == "answer value"} == {"13", "25"}
