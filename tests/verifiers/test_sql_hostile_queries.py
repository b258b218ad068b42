"""The SQL verifier under hostile queries (time, memory, files, functions)."""
from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import pytest

from limits import peak_rss_mb, time_limit, timed
from mrtpo.tasks import get_task
from mrtpo.tasks.text2sql import CACHE_BYTES
from mrtpo.verifiers.sql_sandbox import MAX_RESULT_BYTES, execute, leading_keyword
from mrtpo.verifiers.sql_pool import execute_many, hard_grace

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("robust") / "books.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE book (book_id INTEGER PRIMARY KEY, title TEXT);"
                       "INSERT INTO book VALUES (1, 'Dune'), (2, 'Emma'), (3, 'Ulysses');")
    conn.commit()
    conn.close()
    return path


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRTPO_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        task = get_task("text2sql", timeout=2.0)
        return task, task.load()


def fenced(sql: str) -> str:
    return f"```sql\n{sql}\n```"


# --- the pre-parse is linear ------------------------------------------------------------------
def test_leading_keyword_scan_is_linear_on_comment_then_spaces(db):
    with time_limit(2.0, "the leading-keyword check"):
        assert leading_keyword("/**/" + " " * 100_000 + "(SELECT 1)") == ""
        assert leading_keyword("-- c\n/* x */  \n delete from t") == "DELETE"
        res = execute(db, "/**/" + " " * 40 + "(SELECT 1)")
    assert res.error and "syntax error" in res.error
    assert leading_keyword("/* unclosed DELETE") == ""


# --- a slow scalar function is a timeout, bounded by the worker's wall clock ----------------
# Straight-line code (one row, many calls) runs no progress check; each LIKE of a 1 MB value
# against a pattern at the length cap costs ~0.1 s, so this is the slowest query left.
SLOW_LIKES = ("WITH t(x, p) AS (SELECT printf('%.*c', 999999, 'a'), '%' || printf('%.*c', 97, 'a') "
              "|| 'b') SELECT {terms} FROM t")


def slow_likes(n: int) -> str:
    return SLOW_LIKES.format(terms=", ".join(["x LIKE p"] * n))


def test_query_ending_past_its_deadline_is_a_timeout_in_process(db):
    res = execute(db, slow_likes(3), timeout=0.05)
    assert not res.ok and "time limit" in res.error, res


def test_worker_kills_a_query_stuck_in_one_function_call(db):
    sql = slow_likes(200)  # ~20 s of calls with no progress check between them
    with time_limit(1.0 + hard_grace(1.0) + 4.0, "the pooled query"):
        (res,), secs = timed(execute_many, [(str(db), sql)], 1.0, 100, None)
    assert not res.ok and "time limit" in res.error, res
    assert secs < 1.0 + hard_grace(1.0) + 2.0


@pytest.mark.parametrize("sql", [
    "SELECT length(printf('%.*c', 1000000000 + book_id, 'x')) FROM book",  # the held-out check
    "SELECT length(format('%.*c', 1000000000, 'x')) FROM book",
    "SELECT length(printf('%!.*c', '1000000000 rows', 'x')) FROM book",
    "SELECT length(printf('%.1000000000c', 'x'))",
    "SELECT length(printf('%2000000000d', 1))",
    "SELECT length(zeroblob(1000000000 + book_id)) FROM book",
    "SELECT length(randomblob(1000000000))",
    "SELECT length(replace(printf('%.*c', 999999, 'a'), 'a', 'aaaaaaaaaa'))",
    "SELECT length(group_concat(printf('%.*c', 600000, 'a'))) FROM book",
    "SELECT instr(printf('%.*c', 999999, 'a'), printf('%.*c', 499999, 'a') || 'b')",
    "SELECT replace(printf('%.*c', 999999, 'a'), printf('%.*c', 499999, 'a') || 'b', '')",
    "SELECT printf('%.*c', 999999, 'a') LIKE '%' || printf('%.*c', 5000, 'a') || 'b'",
    "SELECT printf('%.*c', 999999, 'a') GLOB '*' || printf('%.*c', 5000, 'a') || 'b'",
])
def test_growing_or_quadratic_functions_stop_inside_the_library_call(db, sql):
    """`execute` itself (no worker) keeps every query near its deadline."""
    with time_limit(8.0, "execute"):
        res, secs = timed(execute, db, sql, 2.0)
    assert secs < 2.5, (sql, secs, res)


def test_bounded_functions_keep_sqlite_semantics(db):
    res = execute(db, "SELECT printf('%d %s %.2f %5.1s|%-4d|%%|%.*s', 3, 'ab', 2.555, 'xyz', 7, 2, "
                      "'hello'), format('%q', 'it''s'), instr('hello', 'l'), instr(x'616263', x'63'), "
                      "instr(12.5, '.'), instr(NULL, 'a'), replace(1.0, '.', ','), replace(5, '', 1), "
                      "typeof(replace(5, '', 'x')), replace('abcabc', 'b', 'XY'), "
                      "(SELECT title FROM book WHERE title LIKE 'd%')")
    assert res.rows == [("3 ab 2.56     x|7   |%|he", "it''s", 3, 3, 3, None, "1,0", 5, "integer",
                         "aXYcaXYc", "Dune")], res
    over = execute(db, "SELECT length(printf('%.*c', 1000001, 'x'))")
    assert over.error == "string or blob too big", over


def test_task_scores_a_slow_function_as_a_timeout(sample):
    task, examples = sample
    ex = examples[0]
    sql = ("WITH t(x, p) AS (SELECT printf('%.*c', 999999, 'a'), '%' || printf('%.*c', 97, 'a') || "
           "'b') SELECT " + ", ".join(["x LIKE p"] * 200) + " FROM t")
    with time_limit(task.timeout + hard_grace(task.timeout) + 6.0, "task.score"):
        fmt, executes, result = task.score(ex, fenced(sql))
    assert executes.score == 0.0 and "time limit" in executes.feedback, executes
    assert result.score == 0.0


# --- a runaway query runs once per response -------------------------------------------------
RUNAWAY = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"


def test_runaway_query_runs_once_for_both_rewards(sample):
    task, examples = sample
    ex = examples[1]
    _, secs = timed(task.score, ex, fenced(RUNAWAY + " -- once"))
    assert secs < 1.6 * task.timeout, f"{secs:.1f} s: the query ran more than once"
    # the rewards called one by one (as the trainer's scorer does) share the timed-out result
    resp = fenced(RUNAWAY + " -- one by one")
    v1, t1 = timed(task._verify_executes, ex, resp)
    v2, t2 = timed(task._verify_result, ex, resp)
    assert "time limit" in v1.feedback and v2.score == 0.0
    assert t2 < 0.5, f"the second reward re-ran the query ({t2:.1f} s)"


# --- memory -----------------------------------------------------------------------------------
def test_result_cap_counts_numbers_too(db):
    cols = ", ".join(f"x + {i}" for i in range(500))
    sql = (f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 200000) "
           f"SELECT {cols} FROM c")
    code = (f"from mrtpo.verifiers.sql import execute\n"
            f"r = execute({str(db)!r}, {sql!r}, timeout=90)\n"
            f"print('RESULT', r.ok, r.truncated, len(r.rows or []))\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    rss, out = peak_rss_mb(code, timeout=240, env=env)
    _, ok, truncated, nrows = [l for l in out.splitlines() if l.startswith("RESULT")][0].split()
    assert ok == "True" and truncated == "True", out
    assert rss < 400, f"peak RSS {rss:.0f} MB for a result capped at {MAX_RESULT_BYTES / 1e6:.0f} MB: {out}"


def test_exec_cache_is_bounded_by_bytes(sample):
    task, examples = sample
    db = examples[0].data["db_path"]
    keys = [(db, f"SELECT zeroblob(999000), {i} FROM (SELECT 1 UNION ALL SELECT 2 UNION ALL "
                 "SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6)")
            for i in range(15)]
    for key in keys:
        assert task._run(*key).ok
    held = sum(sum(len(r[0]) for r in hit.rows) for hit in map(task._cache.get, keys) if hit)
    assert held <= CACHE_BYTES / 4, f"the execution cache holds {held / 1e6:.0f} MB of blobs"


# --- no file appears beside a database ------------------------------------------------------
def test_wal_database_gets_no_files_beside_it(tmp_path):
    path = tmp_path / "wal.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=wal")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    conn.commit()
    conn.close()
    before = sorted(os.listdir(tmp_path))
    assert execute(path, "SELECT x FROM t").rows == [(1,)]
    assert execute_many([(str(path), "SELECT x + 1 FROM t")])[0].rows == [(2,)]
    assert sorted(os.listdir(tmp_path)) == before


# --- read-only table-valued functions run; other virtual tables stay refused ------------------
@pytest.mark.parametrize("sql, rows", [
    ("SELECT value FROM json_each('[1, 2]')", [(1,), (2,)]),
    ("SELECT count(*) FROM json_tree('{\"a\": [1]}')", [(3,)]),
    ("SELECT name FROM pragma_table_info('book') ORDER BY cid", [("book_id",), ("title",)]),
    ("SELECT b.title FROM book AS b, json_each('[2]') AS j WHERE b.book_id = j.value", [("Emma",)]),
])
def test_read_only_table_functions_run(db, sql, rows):
    assert execute(db, sql).rows == rows


@pytest.mark.parametrize("sql", ["SELECT * FROM pragma_compile_options",
                                 "SELECT * FROM pragma_journal_mode", "PRAGMA journal_mode"])
def test_other_virtual_tables_and_pragmas_stay_refused(db, sql):
    res = execute(db, sql)
    assert not res.ok and res.error.startswith("not authorized"), res


def test_json_each_query_scores_executes(sample):
    task, examples = sample
    ex = examples[0]
    _, executes, _ = task.score(ex, fenced("SELECT value FROM json_each('[1, 2, 3]')"))
    assert executes.score == 1.0, executes
