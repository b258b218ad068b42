"""`mrtpo blocks lint` on a large file (issue 40): the data is read as the lint goes
(`Task.iter_examples`), the lint holds a bounded number of examples whatever the row count, and
the report, bounded too, says what it left out. Before, the whole file became a list of examples
first (about 8 KB a row: 8 GB at 1M rows) and every finding was kept."""
from __future__ import annotations

import json
import os
import re
import weakref
from pathlib import Path

import pytest

from blocks_minitask import GenericResult, build_db, write_jsonl
from cli_runs import invoke
from mrtpo.tasks import register_task, unregister_task
from mrtpo.tasks.toolcall import ToolCallTask

pytestmark = pytest.mark.timeout(300)
SAMPLE = Path(__file__).resolve().parents[2] / "mrtpo" / "data" / "toolcall" / "sample.jsonl"


def toolcall_rows(path: Path, n: int) -> Path:
    """`n` rows of the toolcall task's JSONL: the bundled sample's rows in turn, each its own id
    and question (so every example is a distinct row, and labels repeat every 35 rows)."""
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]
    with path.open("w") as fh:
        for i in range(n):
            row = dict(rows[i % len(rows)], id=f"big-{i}")
            row["question"] += f" (case {i})"
            fh.write(json.dumps(row) + "\n")
    return path


class CountedToolCall(ToolCallTask):
    """The toolcall task, counting how many of its examples are alive at once."""

    name = "toolcall-counted-test"

    def __init__(self):
        super().__init__()
        self.alive = self.most = self.given = 0

    def iter_examples(self, path=None, split=None):
        for example in super().iter_examples(path, split):
            self.alive += 1
            self.given += 1
            self.most = max(self.most, self.alive)
            weakref.finalize(example, self._gone)
            yield example

    def load(self, path=None, split=None):  # what a command reading the whole file gets
        return list(self.iter_examples(path, split))

    def _gone(self):
        self.alive -= 1


@pytest.fixture()
def counted():
    task = CountedToolCall()
    register_task(task.name)(lambda: task)
    yield task
    unregister_task(task.name)


def test_lint_holds_a_bounded_number_of_examples_whatever_the_row_count(counted, tmp_path, monkeypatch):
    """300 rows with 4 distinct blocks held for R2: at most the examples of those 4 groups (5
    each) are alive, not 300; the report counts every example and says R2's window was cut."""
    monkeypatch.setattr("mrtpo.blocks.lint.MAX_OPEN_BLOCKS", 4)
    data = toolcall_rows(tmp_path / "big.jsonl", 300)
    result, out = invoke("blocks", "lint", counted.name, "--data", data, "--plain")
    assert result.exit_code == 0, out
    assert counted.given == 300 and "300 examples, 600 responses" in out, out
    assert counted.most <= 4 * 5 + 2, f"{counted.most} examples alive at once"
    assert "cut: R2: identical blocks were looked for among the 4 distinct blocks" in out, out


def _lint_in_a_child(task: str, data, env=None) -> tuple[float, str]:
    """(peak RSS in MB, stdout) of `mrtpo blocks lint TASK --data DATA -n 2` in a fresh interpreter."""
    from limits import peak_rss_mb

    code = f"""
import sys
from mrtpo.cli import app
sys.argv = ["mrtpo", "blocks", "lint", {task!r}, "--data", {str(data)!r}, "-n", "2", "--plain"]
try:
    app()
except SystemExit as exc:
    print("EXIT", exc.code)
"""
    return peak_rss_mb(code, timeout=240, env=env)

def test_lint_reads_a_large_file_one_row_at_a_time(tmp_path):
    """Through `python -m mrtpo`, in a child process: linting the first 2 of 30,000 rows (38 MB)
    reads 2 rows, not the file into a list first (which peaked at about 300 MB)."""
    data = toolcall_rows(tmp_path / "big.jsonl", 30_000)
    rss, out = _lint_in_a_child("toolcall", data)
    assert "EXIT 0" in out and "2 examples, 4 responses" in out, out
    assert rss < 120, f"peak RSS {rss:.0f} MB"


def test_lint_reads_a_spider_json_array_one_row_at_a_time(tmp_path):
    """A Spider dev.json is one JSON array: linting its first 2 of 15,000 rows (each with
    Spider's token lists, 37 MB in all) parses 2 rows, not the whole array (which peaked at
    several hundred MB)."""
    from mrtpo.tasks.text2sql_data import build_database, bundled_dir

    root = tmp_path / "spider"
    (root / "database" / "library").mkdir(parents=True)
    build_database(bundled_dir() / "library.sql", tmp_path / "cache").replace(
        root / "database" / "library" / "library.sqlite")
    row = {"db_id": "library", "question": "How many members are there?",
           "query": "SELECT COUNT(*) FROM member", "query_toks": ["SELECT", "COUNT", "(", "*", ")"] * 60,
           "question_toks": ["How", "many", "members", "are", "there", "?"] * 50}
    with (root / "dev.json").open("w") as fh:
        fh.write("[\n" + ",\n".join(json.dumps(row) for _ in range(15_000)) + "\n]")
    assert (root / "dev.json").stat().st_size > 30e6
    rss, out = _lint_in_a_child("text2sql", root, env={**os.environ, "MRTPO_CACHE_DIR": str(tmp_path / "cache")})
    assert "EXIT" in out and "2 examples" in out, out
    assert rss < 160, f"peak RSS {rss:.0f} MB"


def test_preview_reads_only_the_examples_it_shows(counted, tmp_path):
    """`blocks preview -n 2` on 300 rows reads 2 of them (before: the whole file, then the first 2)."""
    data = toolcall_rows(tmp_path / "big.jsonl", 300)
    result, out = invoke("blocks", "preview", counted.name, "--data", data, "-n", 2, "--jsonl")
    assert result.exit_code == 0, out
    assert counted.given == 2 and re.findall(r'"example": "(big-\d+)"', out) == ["big-0"] * 2 + ["big-1"] * 2


def test_a_bad_row_met_part_way_is_one_line_naming_file_and_row(counted, tmp_path):
    data = toolcall_rows(tmp_path / "big.jsonl", 20)
    with data.open("a") as fh:
        fh.write('{"id": "bad", "question": "q"\n')
    result, out = invoke("blocks", "lint", counted.name, "--data", data, with_stderr=True)
    assert result.exit_code == 2, out
    assert f"could not load {data}" in out and f"{data}:21: not valid JSON" in out, out
    assert "Traceback" not in out and counted.given == 20


@pytest.mark.parametrize("command", ["lint", "preview"])
def test_a_response_for_no_example_is_refused_after_the_data_is_read(counted, tmp_path, command):
    data = toolcall_rows(tmp_path / "big.jsonl", 40)
    responses = tmp_path / "r.jsonl"
    responses.write_text('{"id": "big-1", "response": "x"}\n{"id": "nope", "response": "y"}\n')
    result, out = invoke("blocks", command, counted.name, "--data", data, "--responses", responses,
                         "-n", 1, with_stderr=True)
    assert result.exit_code == 2, out
    assert f"{responses}, row 2: field 'id' is 'nope', which is not an example of the data" in out, out
    assert counted.given == 40 and "Traceback" not in out  # past -n 1: every row is read to look for 'nope'


class FirstThree(ToolCallTask):
    """A task built on a built-in one that keeps some examples in its own `load`."""

    name = "toolcall-first-three-test"

    def load(self, path=None, split=None):
        return super().load(path, split)[:3]


def test_a_task_that_reads_in_its_own_load_is_linted_as_it_loads(tmp_path):
    """`load` defined below the built-in's `iter_examples`: the lint sees what `load` gives."""
    register_task(FirstThree.name)(FirstThree)
    try:
        data = toolcall_rows(tmp_path / "big.jsonl", 40)
        result, out = invoke("blocks", "lint", FirstThree.name, "--data", data, "--plain")
    finally:
        unregister_task(FirstThree.name)
    assert result.exit_code == 0 and "3 examples, 6 responses" in out, out


@pytest.fixture()
def generic(tmp_path):
    db = build_db(tmp_path / "concert.sqlite")
    register_task("minisql-generic-bounded-test")(lambda: GenericResult(db))
    yield write_jsonl(tmp_path / "q.jsonl", db)
    unregister_task("minisql-generic-bounded-test")


def test_the_report_counts_everything_and_says_what_it_did_not_itemize(generic, monkeypatch):
    """With room for one problem per rule and one finding listed, the counts are those of the
    full report, and the output says what was not itemized or listed."""
    name = "minisql-generic-bounded-test"
    full = json.loads(invoke("blocks", "lint", name, "--data", generic, "--json")[0].stdout)
    total = sum(r["findings"] for r in full["rules"].values())
    assert total == len(full["findings"]) > 2 and full["unlisted"] == 0 and full["cut"] == []
    monkeypatch.setattr("mrtpo.blocks.lint.MAX_PROBLEMS_PER_RULE", 1)
    monkeypatch.setattr("mrtpo.blocks.lint.MAX_LISTED_FINDINGS", 1)
    result, out = invoke("blocks", "lint", name, "--data", generic, "--plain")
    assert result.exit_code == 1, out
    assert "R2 specific information: 1 problem(s) in 5 example(s)" in out, out
    assert "cut: R2: 1 more finding(s) of problems past the first 1 of the rule were counted, not itemized" in out
    assert f"{total} finding(s)" in out, out
    doc = json.loads(invoke("blocks", "lint", name, "--data", generic, "--json")[0].stdout)
    assert doc["rules"] == full["rules"] and doc["findings"] == full["findings"][:1]
    assert doc["unlisted"] == total - 1 and not doc["clean"]
    assert any("past the first 1" in line for line in doc["cut"]), doc["cut"]
