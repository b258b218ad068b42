"""`mrtpo eval text2sql`: execution accuracy per comparison mode and the share that executes.

Run: .venv/bin/python -m pytest tests/evaluation/test_eval_text2sql.py -q
"""
from __future__ import annotations

import json
import re
import shutil
import sqlite3

import pytest
from typer.testing import CliRunner

from mrtpo.cli import app
from mrtpo.evaluation import run_eval, score
from mrtpo.evaluation.text2sql import extract_sql
from mrtpo.formats import CodeBlockFormat
from mrtpo.tasks import get_task

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}

# (pred, gold) pairs where the modes disagree; the table t holds (1,'x'), (1,'x'), (2,'y').
CASES = [
    # id, pred, bag, set, ordered
    ("swapped", "SELECT b, a FROM t", True, False, False),  # bag permutes columns; set keeps order
    ("distinct", "SELECT DISTINCT a, b FROM t", False, True, False),  # set ignores duplicates
    ("same", "SELECT a, b FROM t", True, True, True),
    ("broken", "SELECT nme FROM t", False, False, False),
]


@pytest.fixture()
def tiny_sql(tmp_path):
    db = tmp_path / "t.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript("CREATE TABLE t (a INTEGER, b TEXT); "
                       "INSERT INTO t VALUES (1, 'x'), (1, 'x'), (2, 'y');")
    conn.commit()
    conn.close()
    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"id": cid, "question": "All rows of t?", "query": "SELECT a, b FROM t",
                                        "db_path": str(db)}) + "\n" for cid, *_ in CASES))
    responses = tmp_path / "r.jsonl"
    responses.write_text("".join(json.dumps({"id": cid, "response": f"```sql\n{pred}\n```"}) + "\n"
                                 for cid, pred, *_ in CASES))
    return data, responses, db


@pytest.mark.parametrize("mode,col", [("bag", 2), ("set", 3), ("ordered", 4)])
def test_each_mode_scores_the_pairs_where_modes_disagree(tiny_sql, mode, col):
    data, responses, _ = tiny_sql
    task = get_task("text2sql")
    report = run_eval(task, task.load(str(data)), responses_path=responses, mode=mode)
    got = {r["id"]: r["match"] for r in report.per_example}
    assert got == {case[0]: case[col] for case in CASES}
    assert report.metrics["execution_accuracy"] == pytest.approx(sum(c[col] for c in CASES) / len(CASES))
    assert report.metrics["executes"] == pytest.approx(3 / 4)
    assert report.settings["mode"] == mode
    broken = next(r for r in report.per_example if r["id"] == "broken")
    assert "no such column: nme" in broken["error"]


def test_writes_are_refused_and_count_as_not_executing(tiny_sql, tmp_path):
    data, _, db = tiny_sql
    before = db.read_bytes()
    task = get_task("text2sql")
    exs = task.load(str(data))
    report = score(task, exs, ["DROP TABLE t", "DELETE FROM t", "SELECT 1; DROP TABLE t",
                               "```sql\nSELECT a, b FROM t\n```"])
    assert [r["executes"] for r in report.per_example] == [False, False, False, True]
    assert db.read_bytes() == before


def test_prediction_extraction():
    fmt = CodeBlockFormat("sql")
    assert extract_sql(fmt, "```sql\nSELECT 1\n```") == ("SELECT 1", True)
    assert extract_sql(fmt, "Here it is:\n```sql\nSELECT 1\n```\nDone.") == ("SELECT 1", False)
    assert extract_sql(fmt, "SELECT count(*) FROM singer") == ("SELECT count(*) FROM singer", False)
    assert extract_sql(fmt, "<think>count them</think>\nSELECT 2") == ("SELECT 2", False)
    assert extract_sql(fmt, "   ") == (None, False)


def test_bundled_sample_references_score_one_everywhere():
    task = get_task("text2sql")
    exs = task.load()
    report = score(task, exs, [task.reference(ex) for ex in exs])
    assert report.n == len(exs) > 10
    assert report.metrics == {"execution_accuracy": 1.0, "executes": 1.0, "format": 1.0}
    # and the task's own training rewards agree with the metric on every example
    assert all(v.score == 1.0 for ex in exs[:5] for v in task.score(ex, task.reference(ex)))


def test_a_wrong_answer_lowers_accuracy_but_not_the_execution_share():
    task = get_task("text2sql")
    exs = task.load()[:4]
    responses = [task.reference(ex) for ex in exs]
    responses[0] = "```sql\nSELECT 12345\n```"
    report = score(task, exs, responses)
    assert report.metrics["execution_accuracy"] == 0.75
    assert report.metrics["executes"] == 1.0


def _spider_layout(shared_dir, root):
    """Spider's layout (dev.json + database/<db_id>/<db_id>.sqlite) from the shared files."""
    db_dir = root / "database" / "concert_singer"
    db_dir.mkdir(parents=True)
    shutil.copy(shared_dir / "data" / "spider" / "dev_concert_singer.json", root / "dev.json")
    conn = sqlite3.connect(db_dir / "concert_singer.sqlite")
    conn.executescript((shared_dir / "data" / "spider" / "concert_singer_schema.sql").read_text())
    conn.commit()
    conn.close()
    return root


@pytest.mark.parametrize("fenced", [False, True])
def test_spider_gold_queries_as_responses_give_execution_accuracy_one(shared_dir, tmp_path, fenced):
    root = _spider_layout(shared_dir, tmp_path / "spider")
    gold = json.loads((root / "dev.json").read_text())
    exs = get_task("text2sql").load(str(root))
    assert len(exs) == len(gold) == 45
    responses = tmp_path / "gold.jsonl"
    with responses.open("w") as f:  # Spider's own prediction form: the raw query, paired by question
        for row in gold:
            text = f"```sql\n{row['query']}\n```" if fenced else row["query"]
            f.write(json.dumps({"prompt": row["question"], "response": text}) + "\n")
    out = tmp_path / "per_example.jsonl"
    r = CliRunner().invoke(app, ["eval", "text2sql", "--data", str(root), "--responses", str(responses),
                                 "--json", "--out", str(out)], env=ENV, prog_name="mrtpo")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["n"] == 45
    assert summary["metrics"]["execution_accuracy"] == 1.0
    assert summary["metrics"]["executes"] == 1.0
    assert summary["metrics"]["format"] == (1.0 if fenced else 0.0)
    assert summary["settings"]["mode"] == "bag"
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 45 and all(row["match"] for row in rows)


def test_spider_set_mode_and_a_wrong_query(shared_dir, tmp_path):
    root = _spider_layout(shared_dir, tmp_path / "spider")
    gold = json.loads((root / "dev.json").read_text())
    responses = tmp_path / "r.jsonl"
    with responses.open("w") as f:
        for i, row in enumerate(gold):
            q = "SELECT count(*) + 1 FROM singer" if i == 0 else row["query"]  # one wrong answer
            f.write(json.dumps({"prompt": row["question"], "response": q}) + "\n")
    r = CliRunner().invoke(app, ["eval", "text2sql", "--data", str(root), "--responses", str(responses),
                                 "--mode", "set"], env=ENV, prog_name="mrtpo")
    assert r.exit_code == 0, r.output
    text = ANSI.sub("", r.stdout)
    assert re.search(rf"execution_accuracy\s+{44 / 45:.4f}", text), text
    assert re.search(r"executes\s+1\.0000", text), text
    assert "mode: set" in text


def test_cli_errors_are_clear(tiny_sql):
    data, responses, _ = tiny_sql
    runner = CliRunner()
    r = runner.invoke(app, ["eval", "text2sql", "--data", str(data), "--responses", str(responses), "--model", "x"],
                      env=ENV, prog_name="mrtpo")
    assert r.exit_code == 2 and "give one of --responses FILE and --model PATH, not both" in r.stderr
    r = runner.invoke(app, ["eval", "toolcall", "--data", "bfcl_eval", "--split", "simple_python",
                            "--responses", str(responses), "--mode", "set"], env=ENV, prog_name="mrtpo")
    assert r.exit_code == 2 and "do not apply to task 'toolcall'" in r.stderr
    r = runner.invoke(app, ["eval", "text2sql", "--data", str(data), "--responses", str(data)],
                      env=ENV, prog_name="mrtpo")
    assert r.exit_code == 2 and "row 1: no response field" in r.stderr
    r = runner.invoke(app, ["eval", "text2sq", "--responses", str(responses)], env=ENV, prog_name="mrtpo")
    assert r.exit_code == 2 and "Did you mean 'text2sql'" in r.stderr


def test_task_options_reach_the_task(tiny_sql):
    data, responses, _ = tiny_sql
    r = CliRunner().invoke(app, ["eval", "text2sql", "--data", str(data), "--responses", str(responses),
                                 "-o", "mode=set", "--json"], env=ENV, prog_name="mrtpo")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["metrics"]["execution_accuracy"] == 0.5  # distinct + same, as --mode set
    r = CliRunner().invoke(app, ["eval", "text2sql", "--data", str(data), "--responses", str(responses),
                                 "-o", "nonsense=1"], env=ENV, prog_name="mrtpo")
    assert r.exit_code == 2 and "has no option 'nonsense'" in r.stderr
