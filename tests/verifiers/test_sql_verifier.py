"""The SQLite verifier on real databases: messages, sandbox, deadline, caps, modes, batches."""
from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrtpo.verifiers.sql import compare_results, exec_match, has_top_level_order_by, verify_batch
from mrtpo.verifiers.sql_sandbox import execute
from mrtpo.verifiers.sql_pool import SQLPool

pytestmark = pytest.mark.timeout(60)  # a broken deadline must fail, not hang

SCRIPT = """
CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
INSERT INTO singer VALUES (1, 'Joe Sharp', 'Netherlands', 52), (2, 'Timbaland', 'United States', 32),
  (3, 'Justin Brown', 'France', 29), (4, 'Rose White', 'France', 41), (5, 'John Nizinik', 'France', 43),
  (6, 'Tribal King', 'France', NULL);
CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, name TEXT, singer_id INTEGER, year INTEGER);
INSERT INTO concert VALUES (1, 'Auditions', 2, 2014), (2, 'Bootcamp', 3, 2014), (3, 'Home Visits', 3, 2015);
CREATE INDEX singer_age ON singer (age);
CREATE VIEW french AS SELECT name FROM singer WHERE country = 'France';
"""


def _build(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous = OFF")  # test files need no fsync
    conn.executescript(SCRIPT)
    conn.commit()
    conn.close()
    return path


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("sqldb") / "singers.sqlite")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- execution and messages ------------------------------------------------------------------

def test_rows_and_columns(db):
    res = execute(db, "SELECT name, age FROM singer WHERE country = 'France' ORDER BY singer_id")
    assert res.ok and res.columns == ("name", "age")
    assert res.rows == [("Justin Brown", 29), ("Rose White", 41), ("John Nizinik", 43), ("Tribal King", None)]


@pytest.mark.parametrize("sql, message", [
    ("SELECT nme FROM singer", "no such column: nme"),
    ("SELECT name, FROM singer", 'near "FROM": syntax error'),
    ("SELECT * FROM singers", "no such table: singers"),
    ("SELECT name FROM singer WHERE", "incomplete input"),
    ("SELECT count(*) FROM singer GROUP BY nosuch", "no such column: nosuch"),
])
def test_errors_are_sqlites_own_messages(db, sql, message):
    res = execute(db, sql)
    assert res.rows is None and res.error == message


@pytest.mark.parametrize("bad", [None, 42, "", "   ", "SELECT 'a\x00b'"])
def test_bad_input_never_raises(db, bad):
    res = execute(db, bad)
    assert not res.ok and res.error


def test_missing_database_is_an_error_not_an_exception(tmp_path):
    res = execute(tmp_path / "nope.sqlite", "SELECT 1")
    assert not res.ok and "nope.sqlite" in res.error
    assert not (tmp_path / "nope.sqlite").exists()  # read-only open never creates the file


def test_path_with_spaces_and_uri_characters(tmp_path):
    path = _build(tmp_path / "my db?#%.sqlite")
    assert execute(path, "SELECT count(*) FROM singer").rows == [(6,)]


# --- the sandbox ------------------------------------------------------------------------------

HOSTILE = [
    ("DROP TABLE singer", "DROP"),
    ("DELETE FROM singer", "DELETE"),
    ("UPDATE singer SET age = 0", "UPDATE"),
    ("INSERT INTO singer VALUES (9, 'x', 'y', 1)", "INSERT"),
    ("REPLACE INTO singer VALUES (1, 'x', 'y', 1)", "REPLACE"),
    ("INSERT OR REPLACE INTO singer VALUES (1, 'x', 'y', 1)", "INSERT"),
    ("WITH d AS (SELECT 1) DELETE FROM singer", "DELETE on table singer"),
    ("WITH d AS (SELECT 1) UPDATE singer SET age = 1", "UPDATE on table singer"),
    ("CREATE TABLE evil (a)", "CREATE"),
    ("CREATE TEMP TABLE evil (a)", "CREATE"),
    ("CREATE INDEX evil ON singer (name)", "CREATE"),
    ("CREATE VIEW evil AS SELECT 1", "CREATE"),
    ("CREATE TRIGGER evil AFTER INSERT ON singer BEGIN DELETE FROM singer; END", "CREATE"),
    ("ALTER TABLE singer RENAME TO s2", "ALTER"),
    ("ALTER TABLE singer ADD COLUMN x INTEGER", "ALTER"),
    ("DROP INDEX singer_age", "DROP"),
    ("DROP VIEW french", "DROP"),
    ("ATTACH DATABASE 'evil.sqlite' AS evil", "ATTACH"),
    ("DETACH DATABASE main", "DETACH"),
    ("PRAGMA user_version = 7", "PRAGMA user_version = 7"),
    ("PRAGMA journal_mode = WAL", "PRAGMA journal_mode = WAL"),
    ("PRAGMA writable_schema = ON", "PRAGMA writable_schema"),
    ("PRAGMA foreign_keys = OFF", "PRAGMA foreign_keys"),
    ("pragma user_version", "PRAGMA user_version"),
    ("VACUUM", "VACUUM"),
    ("VACUUM INTO 'copy.sqlite'", "VACUUM"),
    ("REINDEX", "REINDEX"),
    ("ANALYZE", "ANALYZE"),
    ("BEGIN IMMEDIATE", "BEGIN"),
    ("SAVEPOINT sp", "SAVEPOINT"),
    ("SELECT 1; DROP TABLE singer", "more than one SQL statement"),
    ("SELECT name FROM singer; DELETE FROM singer;", "more than one SQL statement"),
    ("/* hi */ -- x\n  DELETE FROM singer", "DELETE"),
    ("SELECT load_extension('evil')", "load_extension"),
]


def test_hostile_statements_leave_the_database_unchanged(tmp_path, monkeypatch):
    path = _build(tmp_path / "target.sqlite")
    before, listing = sha256(path), sorted(os.listdir(tmp_path))
    monkeypatch.chdir(tmp_path)  # relative names (ATTACH 'evil.sqlite', VACUUM INTO) land here
    for sql, named in HOSTILE:
        res = execute(path, sql)
        assert not res.ok, sql
        assert res.error.startswith("not authorized"), (sql, res.error)
        assert named.lower() in res.error.lower(), (sql, res.error)
        assert sha256(path) == before, sql
        assert sorted(os.listdir(tmp_path)) == listing, sql
    assert execute(path, "SELECT count(*) FROM singer").rows == [(6,)]


def test_the_hostile_corpus_does_write_without_the_sandbox(tmp_path, monkeypatch):
    """Control: the statements above are real writes (so the test above can fail)."""
    monkeypatch.chdir(tmp_path)  # ATTACH 'evil.sqlite' creates that file
    writes = 0
    for sql, _ in HOSTILE[:18]:
        path = _build(tmp_path / f"w{writes}-{abs(hash(sql))}.sqlite")
        before = sha256(path)
        conn = sqlite3.connect(path)
        try:
            conn.executescript(sql)
            conn.commit()
        except sqlite3.Error:
            pass
        conn.close()
        writes += sha256(path) != before
    assert writes >= 15


def test_read_only_introspection_is_allowed(db):
    assert [r[1] for r in execute(db, "PRAGMA table_info(singer)").rows] == ["singer_id", "name", "country", "age"]
    assert execute(db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").rows == [("concert",), ("singer",)]
    assert execute(db, "SELECT count(*) FROM french").rows == [(4,)]


def test_runaway_recursive_cte_stops_within_the_timeout(db):
    start = time.monotonic()
    res = execute(db, "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) "
                      "SELECT count(*) FROM r", timeout=0.3)
    took = time.monotonic() - start
    assert not res.ok and res.error.startswith("interrupted") and "0.3 s time limit" in res.error
    assert 0.29 <= took < 1.5  # generous: a shared CI machine may deschedule us


def test_rows_are_capped(db):
    res = execute(db, "SELECT * FROM singer a, singer b, singer c, singer d, singer e, singer f",
                  max_rows=500)  # 46,656 rows uncapped
    assert res.ok and res.truncated and len(res.rows) == 500
    assert not execute(db, "SELECT * FROM singer", max_rows=6).truncated


def test_result_bytes_and_value_size_are_capped(db):
    res = execute(db, "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r LIMIT 200) "
                      "SELECT zeroblob(900000) FROM r")  # 180 MB uncapped
    assert res.ok and res.truncated and 60 <= len(res.rows) < 200
    assert execute(db, "SELECT zeroblob(2000000)").error == "string or blob too big"


def test_text_that_is_not_utf8_is_decoded_leniently(tmp_path):
    path = tmp_path / "latin.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (s TEXT)")
    conn.execute("INSERT INTO t VALUES (CAST(x'ff41' AS TEXT))")
    conn.commit()
    conn.close()
    assert execute(path, "SELECT s FROM t").rows == [("A",)]  # Spider test-suite: errors="ignore"


# --- comparison modes ------------------------------------------------------------------------

MODE_CASES = [
    # gold, prediction, (bag, set, ordered)
    ("SELECT name, age FROM singer WHERE age > 30 ORDER BY age",
     "SELECT age, name FROM singer WHERE age > 30 ORDER BY age", (True, False, False)),
    ("SELECT name, age FROM singer WHERE age > 30 ORDER BY age",
     "SELECT name, age FROM singer WHERE age > 30 ORDER BY age DESC", (False, True, False)),
    ("SELECT DISTINCT country FROM singer", "SELECT country FROM singer", (False, True, False)),
    ("SELECT name FROM singer WHERE country = 'France'",
     "SELECT name FROM singer WHERE country = 'France' ORDER BY name DESC", (True, True, False)),
    ("SELECT name, age FROM singer WHERE country = 'France'",
     "SELECT age, name FROM singer WHERE country = 'France' ORDER BY name DESC", (True, False, False)),
    ("SELECT name FROM singer WHERE age IS NULL", "SELECT name FROM singer WHERE age = NULL", (False, False, False)),
    ("SELECT count(*) FROM concert", "SELECT count(*) FROM singer", (False, False, False)),
    ("SELECT name FROM singer WHERE age > 40", "SELECT name FROM singer WHERE age > 40", (True, True, True)),
    ("SELECT name FROM singer WHERE age > 99", "SELECT name, age FROM singer WHERE age > 99", (True, True, True)),
]


@pytest.mark.parametrize("gold, pred, expected", MODE_CASES)
def test_modes_on_pairs_where_they_disagree(db, gold, pred, expected):
    got = tuple(exec_match(pred, gold, db, mode=m) for m in ("bag", "set", "ordered"))
    assert got == expected


def test_a_failing_prediction_never_matches(db):
    for mode in ("bag", "set", "ordered"):
        assert not exec_match("SELECT nme FROM singer", "SELECT name FROM singer", db, mode)
        assert not exec_match("DELETE FROM singer", "SELECT name FROM singer WHERE 0", db, mode)


def test_order_by_is_read_from_the_outermost_query():
    assert has_top_level_order_by("SELECT a FROM t ORDER BY a")
    assert has_top_level_order_by("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1")
    assert not has_top_level_order_by("SELECT count(*) FROM c WHERE s = (SELECT s FROM t ORDER BY x LIMIT 1)")
    assert not has_top_level_order_by("SELECT a FROM t")
    assert has_top_level_order_by("SELECT a FROM t ORDER BY a ORDER BY b !!")  # unparsable: substring rule


def test_bag_mode_twin_columns_and_reasons():
    assert compare_results([(1, None, None)], [(None, None, 1)], "bag")[0]
    ok, why = compare_results([(1, 2), (2, 1)], [(2, 1), (1, 2)], "bag", order_matters=True)
    assert ok  # swapping the columns gives the gold list exactly
    ok, why = compare_results([(1, "a"), (2, "b")], [(2, "b"), (1, "a")], "bag", order_matters=True)
    assert not ok and "different order" in why
    assert compare_results([(1,)], [(1,), (1,)], "bag") == (False, "1 row, the reference has 2")
    with pytest.raises(ValueError, match="unknown comparison mode"):
        compare_results([], [], "fuzzy")


cells = st.one_of(st.none(), st.integers(-3, 3), st.sampled_from(["a", "b", "NULL"]))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.integers(1, 4).flatmap(lambda w: st.lists(st.tuples(*[cells] * w), min_size=1, max_size=6)),
       st.randoms(use_true_random=False))
def test_mode_invariants(rows, rnd):
    ncol = len(rows[0])
    perm = list(range(ncol))
    rnd.shuffle(perm)
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    permuted = [tuple(r[i] for i in perm) for r in shuffled]
    assert compare_results(permuted, rows, "bag")[0]  # rows and columns in any order
    assert compare_results([tuple(r[i] for i in perm) for r in rows], rows, "bag", order_matters=True)[0]
    assert compare_results(shuffled + shuffled, rows, "set")[0]  # duplicates and order ignored
    assert compare_results(shuffled, rows, "ordered")[0] == (shuffled == rows)
    assert not compare_results(rows + rows[:1], rows, "bag")[0]  # one extra duplicate row
    changed = [tuple("zz" if j == 0 else v for j, v in enumerate(rows[0]))] + rows[1:]
    for mode in ("bag", "set", "ordered"):
        assert not compare_results(changed, rows, mode)[0]


# --- batches ---------------------------------------------------------------------------------

def test_verify_batch_agrees_with_one_by_one(db):
    golds = [g for g, _, _ in MODE_CASES]
    preds = [p for _, p, _ in MODE_CASES]
    jobs = [(p, g, db, m) for g, p in zip(golds, preds) for m in ("bag", "set", "ordered")]
    jobs += [(None, golds[0], db), ("SELECT nme FROM singer", golds[0], db)]
    checks = verify_batch(jobs, workers=2)
    for (p, g, _, *m), c in zip(jobs, checks):
        mode = m[0] if m else "bag"
        assert c.match == (p is not None and exec_match(p, g, db, mode))
        assert c.gold.ok
    assert [c.executes for c in checks[-2:]] == [False, False]
    assert checks[-1].error == "no such column: nme" and checks[-2].error == ""


def _run_in_thread(pool: SQLPool, items, timeout):
    out = {}
    th = threading.Thread(target=lambda: out.setdefault("r", pool.run(items, timeout=timeout)))
    th.start()
    return th, out


def _pid_running(pool: SQLPool, index: int, wait_s: float = 5.0) -> int:
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        pid = pool.running().get(index)
        if pid:
            return pid
        time.sleep(0.01)
    raise AssertionError("the job never started")


SLOW = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"


@pytest.mark.parametrize("how", ["crash", "hang"])
def test_a_crashing_or_hung_worker_costs_only_its_own_query(db, how):
    pool = SQLPool(2, grace=0.3)
    try:
        items = [(str(db), SLOW)] + [(str(db), f"SELECT count(*) FROM singer WHERE age > {k}") for k in range(6)]
        th, out = _run_in_thread(pool, items, timeout=1.0 if how == "hang" else 3.0)
        pid = _pid_running(pool, 0)
        time.sleep(0.1)
        os.kill(pid, signal.SIGKILL if how == "crash" else signal.SIGSTOP)
        th.join(10)
        assert not th.is_alive()
        results = out["r"]
        assert "worker process" in results[0].error
        assert ("died" in results[0].error) if how == "crash" else ("time limit" in results[0].error)
        assert [r.rows for r in results[1:]] == [execute(db, sql).rows for _, sql in items[1:]]
        assert pool.run([(str(db), "SELECT 1")])[0].rows == [(1,)]  # the pool goes on working
    finally:
        pool.close()


def test_batch_runs_in_parallel(db):
    pool = SQLPool(2)
    try:
        pool.run([(str(db), "SELECT 1")] * 2)  # start the workers
        start = time.monotonic()
        res = pool.run([(str(db), SLOW)] * 2, timeout=1.0)
        took = time.monotonic() - start
        assert all(r.error.startswith("interrupted") for r in res)
        assert took < 1.8  # two 1 s queries side by side (one after the other: 2 s or more)
    finally:
        pool.close()


def test_in_process_batch_when_workers_is_zero(db):
    checks = verify_batch([("SELECT name FROM singer", "SELECT name FROM singer ORDER BY name", db)], workers=0)
    assert checks[0].executes and not checks[0].match  # the gold orders; bag mode respects it
    with pytest.raises(ValueError, match="unknown comparison mode"):
        verify_batch([("SELECT 1", "SELECT 1", db, "fuzzy")], workers=0)


def test_database_is_unchanged_by_a_batch_of_hostile_queries(tmp_path):
    path = _build(tmp_path / "batch.sqlite")
    before = sha256(path)
    checks = verify_batch([(sql, "SELECT 1", path) for sql, _ in HOSTILE], workers=2)
    assert all(not c.executes and c.error.startswith("not authorized") for c in checks)
    assert sha256(path) == before
    shutil.rmtree(tmp_path)


def test_a_forked_child_gets_its_own_pool(db):
    """A trainer that forks its scoring workers after using the shared pool: the child must
    not talk to the parent's workers, and the parent's pool must keep working."""
    from mrtpo.verifiers.sql_pool import execute_many, shared_pool

    parent_pool = shared_pool(2)
    assert execute_many([(str(db), "SELECT 1")], workers=2)[0].rows == [(1,)]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            ok = (shared_pool(2) is not parent_pool
                  and execute_many([(str(db), "SELECT 2")], workers=2)[0].rows == [(2,)])
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1"
    os.close(r)
    assert shared_pool(2) is parent_pool
    assert execute_many([(str(db), "SELECT 3")], workers=2)[0].rows == [(3,)]
