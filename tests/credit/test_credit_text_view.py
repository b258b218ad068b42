"""`mrtpo credit` piped into a file: a plain layout whose lines are not cut
or wrapped at 80 columns, and `--json`, one document with the records and the summary."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import harness_task
from mrtpo.cli import app
from credit_runs import run_dir  # noqa: F401 (the fixture: one logged MRTPO step of a tiny model)

harness_task.register()


def _log(run):
    return [json.loads(line) for line in (run / "completions.jsonl").read_text().splitlines()]


def _credit(*args, columns="80"):
    # a pipe: CliRunner's stdout is not a terminal, and 80 columns as rich assumes for one
    r = CliRunner().invoke(app, ["credit", *map(str, args)], env={"COLUMNS": columns, "NO_COLOR": "1"})
    assert r.exit_code == 0, r.output
    return r.stdout


def test_plain_layout_in_a_pipe_keeps_each_reward_on_one_line(run_dir):
    from mrtpo.credit.terminal import shown

    out = _credit(run_dir)
    lines = out.splitlines()
    log = _log(run_dir)
    for row in log:
        label = next(i for i, line in enumerate(lines) if line.startswith(f"example {row['example_id']} ")
                     and f"sample {row['sample']} " in line and f"group {row['group']} " in line)
        response = "".join(shown(t) for t in row["tokens"])
        assert lines[label + 1] == f"response ({len(row['tokens'])} tokens): {response}"  # whole, not wrapped
        assert lines[label + 2].startswith("reward ") and lines[label + 2].endswith("heaviest tokens | block")
        for k, name in enumerate(row["reward_names"]):  # one line per reward, its block in full
            line = lines[label + 3 + k]
            assert line.startswith(name) and line.endswith(" | " + " ".join(row["blocks"][k].split()))
            assert f"{row['credit'][k]:+.3f}" in line
    assert any(len(line) > 80 for line in lines)  # nothing cut to the pipe's 80 columns
    header = next(line for line in lines if line.startswith("reward ") and "responses" in line)
    for column in ("mean score", "mean credit", "top80 share", "range", "paper"):
        assert column in header
    k_total = sum(len(r["reward_names"]) for r in log)
    assert len(lines) == 1 + 4 * len(log) + k_total + 3 + (len({n for r in log for n in r["reward_names"]}) + 1) + 2
    assert "\x1b[" not in out


def test_rich_layout_on_request_and_plain_on_request(run_dir):
    assert "response (" not in _credit(run_dir, "--rich", columns="200")
    assert "response (" in _credit(run_dir, "--plain", "--limit", "1")


def test_json_is_one_document_with_records_and_summary(run_dir):
    doc = json.loads(_credit(run_dir, "--json", "--limit", "3"))
    log = _log(run_dir)
    assert doc["schema"] == "mrtpo.credit/1" and doc["task"] == "harness-words"
    assert len(doc["records"]) == 3
    for rec, row in zip(doc["records"], log):
        for key in ("tokens", "reward_names", "blocks", "token_weights", "example_id"):
            assert rec[key] == row[key], key
        assert rec["credit"] == pytest.approx(row["credit"])
    names = [s["name"] for s in doc["summary"]]
    assert names[-1] == "all rewards" and set(names[:-1]) == {n for r in log for n in r["reward_names"]}
    from mrtpo.credit.records import read_run
    from mrtpo.statistics import summarize

    want = [r.as_dict() for r in summarize(read_run(run_dir, limit=3).records)]
    assert [{k: v for k, v in s.items() if k != "paper"} for s in doc["summary"]] == want
