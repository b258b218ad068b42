"""`mrtpo blocks preview` and `mrtpo blocks lint` through typer's CliRunner, on a small real
task (tests/blocks_minitask.py) registered for the test."""
from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from blocks_minitask import GenericResult, MiniSQL, build_db, write_jsonl
from mrtpo.cli import app
from mrtpo.tasks import register_task, unregister_task

runner = CliRunner()


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return build_db(tmp_path_factory.mktemp("cli") / "concert.sqlite")


@pytest.fixture()
def tasks(db):
    register_task("minisql-test")(lambda: MiniSQL(db))
    register_task("minisql-generic-test")(lambda: GenericResult(db))
    yield
    unregister_task("minisql-test")
    unregister_task("minisql-generic-test")


def test_preview_plain_when_piped(tasks):
    r = runner.invoke(app, ["blocks", "preview", "minisql-test", "-n", "2"])
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert out.count("== minisql | example") == 4  # 2 examples x (reference, corrupted)
    assert "response: reference" in out and "response: corrupted" in out
    assert "Question: How many singers are there?" in out  # P0
    for name in ("format", "executes", "result"):
        assert f"P_without[{name}]" in out
    # the corrupted response's own SQLite error appears as the executes block
    assert "block | The query fails on this database with the SQLite error: no such table: sniger" in out
    assert "P_without[executes] = P_all (empty block: nothing removed)" in out  # for the reference
    assert "lint: clean" in out
    assert "\x1b[" not in out and "\u2502" not in out  # plain: no colour codes, no box lines


def test_preview_rich_tables(tasks):
    r = runner.invoke(app, ["blocks", "preview", "minisql-test", "-n", "1", "--rich"])
    assert r.exit_code == 0, r.output
    out = re.sub(r"\x1b\[[0-9;]*m", "", r.stdout)
    assert "\u2502" in out or "\u2503" in out  # table borders
    assert "P_without[executes]" in out and "response-dependent" in out


def test_preview_json_records(tasks):
    r = runner.invoke(app, ["blocks", "preview", "minisql-test", "-n", "3", "--jsonl"])
    assert r.exit_code == 0, r.output
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(recs) == 6
    assert {(x["example"], x["response_name"]) for x in recs} == {
        (f"q{i}", n) for i in range(3) for n in ("reference", "corrupted")}
    rec = recs[1]
    assert rec["P0"][-1]["role"] == "user"
    assert [x["name"] for x in rec["rewards"]] == ["format", "executes", "result"]
    ex = rec["rewards"][1]
    assert ex["score"] == 0.0 and ex["feedback"] in ex["block"] and ex["response_dependent"]
    removed = [c["removed"] for w in rec["contexts"]["P_without"] for c in w["changes"]]
    assert any(ex["block"] in "\n".join(x) for x in removed)
    assert rec["findings"] == []


def test_preview_with_responses_file(tasks, tmp_path):
    f = tmp_path / "resp.jsonl"
    f.write_text(json.dumps({"id": "q1", "response": "```sql\nSELECT nme FROM singer\n```"}) + "\n"
                 + json.dumps({"id": "q1", "responses": ["no sql here", ""]}) + "\n")
    r = runner.invoke(app, ["blocks", "preview", "minisql-test", "--responses", str(f), "--jsonl"])
    assert r.exit_code == 0, r.output
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [x["response_name"] for x in recs] == ["response 1", "response 2", "response 3"]
    assert "no such column: nme" in recs[0]["rewards"][1]["block"]
    assert recs[1]["rewards"][0]["score"] == 0.0


@pytest.mark.parametrize("content,message", [
    ('{"id": "q1"}\n', "row 1: field 'response' is missing"),
    ('{"id": "nope", "response": "x"}\n', "row 1: field 'id' is 'nope'"),
    ('{"id": "q1", "response": "x"}\nnot json\n', "row 2: not valid JSON"),
    ('{"response": "x"}\n', "row 1: field 'id' is missing"),
])
def test_bad_responses_file_names_row_and_field(tasks, tmp_path, content, message):
    f = tmp_path / "bad.jsonl"
    f.write_text(content)
    r = runner.invoke(app, ["blocks", "preview", "minisql-test", "--responses", str(f)])
    assert r.exit_code == 2
    assert str(f) in r.stderr and message in r.stderr


def test_lint_clean_exits_0(tasks):
    r = runner.invoke(app, ["blocks", "lint", "minisql-test"])
    assert r.exit_code == 0, r.output
    assert "5 examples, 10 responses" in r.stdout and "no findings" in r.stdout
    assert "R1 one reward, one block: ok" in r.stdout


def test_lint_findings_exit_1_with_locations(tasks, db, tmp_path):
    data = write_jsonl(tmp_path / "q.jsonl", db)
    r = runner.invoke(app, ["blocks", "lint", "minisql-generic-test", "--data", str(data)])
    assert r.exit_code == 1, r.output
    out = r.stdout
    assert "R2 specific information: 2 problem(s)" in out
    assert "identical-across-examples" in out
    assert f"{data}:1 (q0)" in out  # where: file, row and example id
    assert "R3 a plain statement: ok" in out


def test_lint_rich_summary(tasks):
    r = runner.invoke(app, ["blocks", "lint", "minisql-generic-test", "--rich"])
    assert r.exit_code == 1
    assert "identical-across-examples" in r.stdout and "\u2502" in r.stdout


def test_unknown_task_and_bad_data(tasks, tmp_path):
    r = runner.invoke(app, ["blocks", "lint", "minisql-tset"])
    assert r.exit_code == 2 and "Did you mean" in r.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "question": "?"}\n')
    r = runner.invoke(app, ["blocks", "preview", "minisql-test", "--data", str(bad)])
    assert r.exit_code == 2 and "row 1: field 'query' is missing" in r.stderr
