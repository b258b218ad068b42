"""The text2sql task's easier question set (`-o questions=single-table`, issue 37): the bundled
file is what its generator writes, every gold query runs on its real database and finds
something, and the option reaches it through `get_task` and the command line."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mrtpo.cli import app
from mrtpo.commands.options import parse_task_options
from mrtpo.tasks import get_task
from mrtpo.tasks.options import TaskOptionError
from mrtpo.tasks.text2sql import Text2SQLTask
from mrtpo.tasks.text2sql_data import bundled_dir
from mrtpo.tasks.text2sql_single_table import TEMPLATES, bundled_file, has_answer, write
from mrtpo.verifiers.sql_sandbox import execute

pytestmark = pytest.mark.timeout(120)

# the counts the task's docstring and data_cards/text2sql-jsonl.md state
ROWS, HELDOUT = 430, 102


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mrtpo-cache")


@pytest.fixture(autouse=True)
def _cache_env(monkeypatch, cache):
    monkeypatch.setenv("MRTPO_CACHE_DIR", str(cache))


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return [json.loads(line) for line in bundled_file().read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def examples(cache):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRTPO_CACHE_DIR", str(cache))
        return get_task("text2sql", questions="single-table", workers=0).load()


def test_the_bundled_file_is_what_the_generator_writes(tmp_path, cache):
    out = write(tmp_path / "single_table.jsonl", cache)
    assert out.read_bytes() == bundled_file().read_bytes()


def test_rows_ids_and_split(rows):
    assert len(rows) == ROWS >= 200
    assert all(list(r) == ["id", "db_id", "question", "query", "split"] for r in rows)
    assert len({r["id"] for r in rows}) == len(rows)
    assert len({r["question"] for r in rows}) == len(rows)
    assert len({(r["db_id"], r["query"]) for r in rows}) == len(rows)
    assert {r["db_id"] for r in rows} == {"library", "school", "shop"}
    splits = [r["split"] for r in rows]
    assert splits.count("heldout") == HELDOUT >= 100
    # the heldout rows come last, at most a quarter of the file: `mrtpo train --heldout 102`
    # (which holds out the last N, at most a quarter) holds out exactly them
    assert splits == ["train"] * (ROWS - HELDOUT) + ["heldout"] * HELDOUT
    assert HELDOUT <= ROWS // 4
    for r in rows:  # one table per question
        assert " JOIN " not in r["query"] and r["query"].count(" FROM ") == 1, r


def test_every_template_is_used_in_both_splits(rows):
    queries = {s: " ".join(r["query"] for r in rows if r["split"] == s) for s in ("train", "heldout")}
    for s, text in queries.items():
        for shape in ("COUNT(*)", "SELECT *", "DISTINCT", "MIN(", "MAX(", "AVG(", "GROUP BY",
                      " = '", " > ", " < ", "IS NULL", "IS NOT NULL", "LIMIT 1", "LIMIT 3"):
            assert shape in text, (s, shape)
    assert len(TEMPLATES) == 17


def test_every_gold_query_runs_and_finds_something(rows, examples):
    assert [e.id for e in examples] == [r["id"] for r in rows]
    for ex in examples:
        res = execute(ex.data["db_path"], ex.data["gold"])
        assert res.ok and res.rows and has_answer(res), (ex.id, ex.data["gold"], res.error)
    scores = [v.score for v in get_task("text2sql", questions="single-table", workers=0)
              .score(examples[0], f"```sql\n{examples[0].data['gold']}\n```")]
    assert scores == [1.0, 1.0, 1.0]


def test_the_option_selects_the_set_as_the_command_line_reads_it():
    task = get_task("text2sql", **parse_task_options(["questions=single-table"]))
    assert task.questions == "single-table"
    held = task.load(split="heldout")
    assert len(held) == HELDOUT and all(e.id.startswith("single-") for e in held)
    assert len(get_task("text2sql").load()) == 39  # the default stays the hand-written sample


def test_a_data_path_is_read_as_it_is(tmp_path):
    shutil.copy(bundled_dir() / "library.sql", tmp_path / "library.sql")
    (tmp_path / "q.jsonl").write_text(json.dumps(
        {"id": "mine", "db_id": "library", "question": "How many books?",
         "query": "SELECT COUNT(*) FROM book"}) + "\n", encoding="utf-8")
    task = get_task("text2sql", questions="single-table", workers=0)
    assert [e.id for e in task.load(tmp_path / "q.jsonl")] == ["mine"]


def test_a_bad_value_names_the_option_and_its_values():
    with pytest.raises(TaskOptionError) as err:
        get_task("text2sql", **parse_task_options(["questions=hard"]))
    msg = str(err.value)
    assert "questions='hard'" in msg and "sample, single-table" in msg and "\n" not in msg
    with pytest.raises(ValueError, match=r"^questions='hard': use one of sample, single-table$"):
        Text2SQLTask(questions="hard")
    result = CliRunner().invoke(app, ["eval", "text2sql", "--responses", "none.jsonl",
                                      "-o", "questions=hard"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    out = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", result.output).split())
    assert result.exit_code == 2 and "option questions='hard': expected one of sample, single-table" in out
