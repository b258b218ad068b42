"""`mrtpo blocks preview` and `mrtpo blocks lint` on the three built-in tasks' bundled samples,
and the lint catching one broken block builder injected into each real task."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from mrtpo.blocks.lint import lint_task
from mrtpo.cli import app
from mrtpo.tasks import get_task
from mrtpo.tasks.base import Task

runner = CliRunner()
BUILTIN = ["text2sql", "instruct", "toolcall"]


def task_or_skip(name: str) -> Task:
    try:
        return get_task(name)
    except (ImportError, AttributeError) as exc:  # the task's module is not there yet
        pytest.skip(f"task {name} unavailable: {exc}")


@pytest.mark.parametrize("name", BUILTIN)
def test_preview_shows_every_block_of_every_reward(name):
    task = task_or_skip(name)
    r = runner.invoke(app, ["blocks", "preview", name, "-n", "3", "--jsonl"])
    assert r.exit_code == 0, r.output
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    examples = task.load()[:3]
    assert {x["example"] for x in recs} == {e.id for e in examples}
    for rec in recs:
        ex = next(e for e in examples if e.id == rec["example"])
        names = [rw.name for rw in task.rewards(ex)]
        assert [x["name"] for x in rec["rewards"]] == names
        assert all(isinstance(x["block"], str) and x["score"] is not None for x in rec["rewards"])
        assert [w["reward"] for w in rec["contexts"]["P_without"]] == names
        # each non-empty block is exactly what P_without_k removes from P_all
        for rw, w in zip(rec["rewards"], rec["contexts"]["P_without"]):
            removed = "\n".join(t for c in w["changes"] for t in c["removed"])
            if rw["block"].strip():
                assert removed == rw["block"].strip(), (rw["name"], removed)
            else:
                assert w["changes"] == []
    # the reference scores full marks on every reward
    for rec in recs:
        if rec["response_name"] == "reference":
            assert all(x["score"] == 1.0 for x in rec["rewards"]), rec["rewards"]
    r = runner.invoke(app, ["blocks", "preview", name, "-n", "1"])
    assert r.exit_code == 0 and "P_without[" in r.stdout


def test_text2sql_corrupted_response_shows_its_sqlite_error():
    task_or_skip("text2sql")
    r = runner.invoke(app, ["blocks", "preview", "text2sql", "-n", "2", "--jsonl"])
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    bad = [x for x in recs if x["response_name"] == "corrupted"]
    assert bad
    for rec in bad:
        ex = {x["name"]: x for x in rec["rewards"]}["executes"]
        assert ex["score"] == 0.0 and ex["block"] and "no such" in ex["block"]
        assert ex["feedback"].split(": ", 1)[-1] in ex["block"]


@pytest.mark.parametrize("name", BUILTIN)
def test_bundled_sample_lints_clean(name):
    task = task_or_skip(name)
    r = runner.invoke(app, ["blocks", "lint", name])
    assert r.exit_code == 0, r.stdout
    assert "no findings" in r.stdout
    assert f"{len(task.load())} examples" in r.stdout


class Patched(Task):
    """A built-in task with one reward's block builder replaced."""

    def __init__(self, base: Task, reward: str, block):
        self.base, self.reward, self.block = base, reward, block
        self.name, self.placement = base.name, base.placement
        self.format = getattr(base, "format", None)
        if hasattr(base, "prompt_without"):
            self.prompt_without = base.prompt_without

    def load(self, path=None, split=None):
        return self.base.load(path, split)

    def messages(self, example):
        return self.base.messages(example)

    def reference(self, example):
        return self.base.reference(example)

    def rewards(self, example):
        return [replace(r, block=self.block) if r.name == self.reward or self.reward == "*" else r
                for r in self.base.rewards(example)]


def _bare_reference(task):
    def block(ex, v):
        return str(task.format.parse(task.reference(ex)).answer if task.name != "toolcall"
                   else json.dumps(task.format.parse(task.reference(ex)).answer))
    return block


@pytest.mark.parametrize("name,reward,make,rule", [
    ("text2sql", "executes", lambda t: (lambda ex, v: "The query ran without any error on singer."), "R4"),
    ("text2sql", "result", _bare_reference, "R5"),
    # the format block is P0's own sentence (in-prompt): a builder that writes other text is R6
    ("text2sql", "format", lambda t: (lambda ex, v: "Make sure the answer is one ```sql block."), "R6"),
    ("text2sql", "result", lambda t: (lambda ex, v: "The query returns the rows the question asks for."), "R2"),
    ("toolcall", "correct", _bare_reference, "R5"),
    ("toolcall", "schema", lambda t: (lambda ex, v: "The call must use a provided function."), "R2"),
    ("instruct", "*", lambda t: (lambda ex, v: "The response follows the constraint."), "R6"),
])
def test_lint_catches_a_broken_builder_in_a_real_task(name, reward, make, rule):
    base = task_or_skip(name)
    task = Patched(base, reward, make(base))
    examples = base.load()[:4]
    report = lint_task(task, examples)
    assert rule in {f.rule for f in report.findings}, [str(f) for f in report.findings]
