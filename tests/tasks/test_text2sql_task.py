"""The text2sql task on real SQLite: bundled sample, Spider and BIRD layouts, rewards, blocks."""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from mrtpo.tasks import Example, get_task
from mrtpo.tasks.text2sql import Text2SQLTask
from mrtpo.tasks.text2sql_data import DataError, build_database, bundled_dir

pytestmark = pytest.mark.timeout(60)  # a broken deadline must fail, not hang

SPIDER = Path(__file__).resolve().parents[3] / "shared" / "data" / "spider"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mrtpo-cache")


@pytest.fixture(autouse=True)
def _cache_env(monkeypatch, cache):
    monkeypatch.setenv("MRTPO_CACHE_DIR", str(cache))


@pytest.fixture(scope="module")
def sample(cache):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MRTPO_CACHE_DIR", str(cache))
        task = get_task("text2sql")
        return task, task.load()


def by_id(examples, id_):
    return next(e for e in examples if e.id == id_)


def scores(task, ex, response):
    return [v.score for v in task.score(ex, response)]


def fenced(sql: str) -> str:
    return f"```sql\n{sql}\n```"


# --- the bundled sample ----------------------------------------------------------------------

def test_registry_builds_the_task_with_its_contract():
    task = get_task("text2sql", mode="set", think=True, weights={"result": 2.0})
    assert isinstance(task, Text2SQLTask) and task.name == "text2sql" and task.placement == "append"
    assert tuple(task.reward_names) == ("format", "executes", "result")
    assert task.format.language == "sql" and task.format.think
    ex = Example("x", "p", data={"db_path": "d", "gold": "SELECT 1", "mode": "bag"})
    rewards = task.rewards(ex)
    assert [r.name for r in rewards] == ["format", "executes", "result"]
    assert [r.weight for r in rewards] == [1.0, 1.0, 2.0]
    assert [r.response_dependent for r in rewards] == [False, True, False]
    assert all(r.floor == 0.0 for r in rewards)


def test_bundled_sample_builds_into_the_cache_not_the_package(sample, cache):
    task, examples = sample
    assert len(examples) >= 36
    assert {e.data["db_id"] for e in examples} == {"library", "shop", "school"}
    built = sorted(p.name for p in (cache / "text2sql").iterdir())
    assert len(built) == 3 and all(re.fullmatch(r"(library|shop|school)-[0-9a-f]{16}\.sqlite", n) for n in built)
    assert not list(bundled_dir().rglob("*.sqlite")) and not list(bundled_dir().rglob("*.db"))
    assert all(Path(e.data["db_path"]).parent == cache / "text2sql" for e in examples)
    mtimes = {p: p.stat().st_mtime_ns for p in (cache / "text2sql").iterdir()}
    get_task("text2sql").load()  # second load reuses the built files
    assert {p: p.stat().st_mtime_ns for p in (cache / "text2sql").iterdir()} == mtimes
    assert {e.data.get("mode") for e in examples} == {"bag"}
    dev = get_task("text2sql").load(split="dev")
    assert 6 <= len(dev) < len(examples) and all(e.id in {x.id for x in examples} for e in dev)


def test_build_is_atomic_and_keyed_by_the_script(tmp_path):
    script = tmp_path / "tiny.sql"
    script.write_text("CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1);")
    first = build_database(script, tmp_path / "c")
    script.write_text("CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (2);")
    second = build_database(script, tmp_path / "c")
    assert first != second and first.exists() and second.exists()
    assert sorted(p.name for p in (tmp_path / "c" / "text2sql").iterdir()) == sorted([first.name, second.name])
    script.write_text("CREATE TABLE t (a INTEGER); INSERT INTO nosuch VALUES (2);")
    with pytest.raises(DataError, match=r"tiny\.sql: the SQL script fails to build a database: no such table: nosuch"):
        build_database(script, tmp_path / "c")
    assert len(list((tmp_path / "c" / "text2sql").iterdir())) == 2  # no half-built file left


def test_every_bundled_gold_scores_full_marks(sample):
    task, examples = sample
    for ex in examples:
        assert scores(task, ex, task.reference(ex)) == [1.0, 1.0, 1.0], ex.id
        block = task.rewards(ex)[2].block(ex, task.score(ex, task.reference(ex))[2])
        assert task.format.parse(block).strict and task.format.parse(block).answer == ex.data["gold"]


def test_sample_covers_joins_aggregation_ordering_and_nulls(sample):
    golds = [e.data["gold"].upper() for e in sample[1]]
    assert sum(" JOIN " in g for g in golds) >= 10
    assert sum(bool(re.search(r"\b(COUNT|SUM|AVG|MAX|MIN)\(", g)) for g in golds) >= 10
    assert sum(" ORDER BY " in g for g in golds) >= 6
    assert sum(bool(re.search(r"IS (NOT )?NULL|COALESCE|LEFT JOIN", g)) for g in golds) >= 8


def test_prompt_holds_schema_question_and_format_instruction(sample, cache):
    task, examples = sample
    ex = by_id(examples, "library-10")
    for create in ("CREATE TABLE author (", "CREATE TABLE book (", "CREATE TABLE member (", "CREATE TABLE loan ("):
        assert create in ex.prompt
    assert "Question: Who is the oldest author whose birth year is known?" in ex.prompt
    assert ex.prompt.rstrip().endswith(task.format.instruction)
    assert task.messages(ex) == [{"role": "user", "content": ex.prompt}]
    rows = get_task("text2sql", sample_rows=2).load()
    shown = by_id(rows, "library-10").prompt
    assert "/* 2 example rows from author:\nauthor_id | name | country | birth_year\n1 | Ada Brennan | Ireland | 1948" in shown


def test_rewards_and_blocks_on_model_like_responses(sample):
    task, examples = sample
    ex = by_id(examples, "library-10")
    fmt_r, exe_r, res_r = task.rewards(ex)

    def blocks(resp):
        vs = task.score(ex, resp)
        return [v.score for v in vs], [r.block(ex, v) for r, v in zip(task.rewards(ex), vs)], vs

    trap = "SELECT name FROM author ORDER BY birth_year LIMIT 1"  # NULL sorts first: wrong answer
    s, b, _ = blocks(fenced(trap))
    assert s == [1.0, 1.0, 0.0] and b[1] == ""
    assert b[0] == task.format.instruction and b[2] == fenced(ex.data["gold"])
    s, b, vs = blocks(fenced("SELECT nme FROM author"))
    assert s == [1.0, 0.0, 0.0]
    assert b[1] == "The query in the response fails on this database with the SQLite error: no such column: nme"
    s, b, _ = blocks("SELECT name FROM author WHERE birth_year IS NOT NULL ORDER BY birth_year LIMIT 1")
    assert s == [0.0, 0.0, 0.0] and b[1] == ""  # no code block: nothing ran, no error to tell
    s, _, vs = blocks("The answer:\n" + fenced("SELECT name FROM author WHERE birth_year = 1939"))
    assert s == [0.0, 1.0, 1.0] and vs[0].feedback == "there is text outside the code block"
    s, b, _ = blocks(fenced("DROP TABLE author"))
    assert s == [1.0, 0.0, 0.0] and "not authorized: DROP statements are refused" in b[1]
    for bad in ("", None, "```sql\n\n```", "<think>x", "```sql\nSELECT 1; DELETE FROM book\n```"):
        vs = task.score(ex, bad)  # never raises on model output
        assert [v.score for v in vs][1:] == [0.0, 0.0]


def test_batch_scoring_gives_the_same_verdicts(sample):
    task, examples = sample
    responses = [task.reference(e) if i % 3 == 0 else fenced("SELECT nme FROM x") if i % 3 == 1
                 else fenced("SELECT 1") for i, e in enumerate(examples)]
    pairs = list(zip(examples, responses))
    fresh = get_task("text2sql", workers=2)  # empty execution cache: everything runs in the pool
    assert fresh.score_batch(pairs) == [task.score(e, r) for e, r in pairs]


def test_mode_and_think_and_weights_options(sample):
    _, examples = sample
    ex = by_id(examples, "library-12")  # SELECT city, COUNT(*) FROM member GROUP BY city
    swapped = fenced("SELECT COUNT(*), city FROM member GROUP BY city")
    assert scores(get_task("text2sql"), ex, swapped)[2] == 1.0
    assert scores(get_task("text2sql", mode="set"), ex, swapped)[2] == 0.0
    think = get_task("text2sql", think=True)
    assert think.reference(ex).startswith("<think>") and scores(think, ex, think.reference(ex)) == [1, 1, 1]
    assert scores(think, ex, fenced(ex.data["gold"])) == [0.0, 1.0, 1.0]
    assert "<think>" in think.format.instruction and "<think>" in think.rewards(ex)[0].block(ex, None)
    task = get_task("text2sql", weights=[0.5, 1, 2])
    assert [r.weight for r in task.rewards(ex)] == [0.5, 1.0, 2.0]
    with pytest.raises(ValueError, match="unknown reward.*'exec'.*format, executes, result"):
        get_task("text2sql", weights={"exec": 1})
    for bad, said in (({"result": True}, "result=True: a weight must be a number, got bool"),  # not 1.0
                      ([1, "two", 3], "executes='two': a weight must be a number, got str"),
                      ({"result": 1e308}, "result=1e+308: a weight must be between")):
        with pytest.raises(ValueError, match=re.escape(said)):
            get_task("text2sql", weights=bad)
    with pytest.raises(ValueError, match="mode='fuzzy'"):
        get_task("text2sql", mode="fuzzy")


def test_pretty_reference_scores_full_marks_and_differs(sample):
    _, examples = sample
    task = get_task("text2sql", pretty=True)
    ex = by_id(examples, "shop-03")
    ref = task.reference(ex)
    assert ref != fenced(ex.data["gold"]) and "\n  " in ref
    assert scores(task, ex, ref) == [1.0, 1.0, 1.0]


# --- other layouts and bad data --------------------------------------------------------------

def _library_db(cache: Path) -> Path:
    return build_database(bundled_dir() / "library.sql", cache)


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_jsonl_with_db_path_and_transpiled_gold(tmp_path, cache):
    db = _library_db(cache)
    f = _write_jsonl(tmp_path / "q.jsonl", [
        {"question": "Two members after the first, by name?", "db_path": str(db),
         "query": "SELECT name FROM member ORDER BY name LIMIT 1, 2", "dialect": "mysql"},
        {"id": "own", "question": "Countries?", "db_path": str(db),
         "query": "SELECT IFNULL(country, 'unknown') FROM author", "dialect": "MySQL", "mode": "ordered"},
    ])
    task = get_task("text2sql")
    a, b = task.load(f)
    assert a.data["gold"] == "SELECT name FROM member ORDER BY name LIMIT 2 OFFSET 1"
    assert a.data["gold_original"].endswith("LIMIT 1, 2") and a.id == "q-1" and b.id == "own"
    assert "COALESCE" in b.data["gold"] and b.data["mode"] == "ordered"
    for ex in (a, b):
        assert scores(task, ex, task.reference(ex)) == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("row, pattern", [
    ('{"question": "q", "db_id": "library"', r"line 2: not valid JSON"),
    ({"question": "q", "db_id": "library"}, r"line 2, field 'query': missing or empty"),
    ({"question": 7, "db_id": "library", "query": "SELECT 1"}, r"line 2, field 'question': expected text, got int"),
    ({"question": "q", "query": "SELECT 1"}, r"line 2, field 'db_id': missing or empty"),
    ({"question": "q", "db_id": "nosuch", "query": "SELECT 1"}, r"line 2, field 'db_id': no database 'nosuch' found"),
    ({"question": "q", "db_id": "library", "query": "SELECT nme FROM author"},
     r"line 2, field 'query': the gold query 'SELECT nme FROM author' does not run .*: no such column: nme"),
    ({"question": "q", "db_id": "library", "query": "SELECT 1", "mode": "fuzzy"}, r"line 2, field 'mode'"),
    ({"question": "q", "db_id": "library", "query": "SELECT NOW() - INTERVAL '1 day'", "dialect": "postgres"},
     r"line 2, field 'query': the gold query .* \(transpiled from postgres: .*\) does not run"),
    ({"question": "q", "db_id": "library", "query": "SELECT (1", "dialect": "mysql"},
     r"line 2, field 'query': cannot transpile the gold query from 'mysql'"),
    ({"question": "q", "db_id": "library", "query": "SELECT 1", "dialect": "klingon"},
     r"line 2, field 'query': cannot transpile .* Unknown dialect"),
    ({"id": "bad-1", "question": "q", "db_id": "library", "query": "SELECT 1"},
     r"line 2, field 'id': 'bad-1' is already the id of .*bad\.jsonl, line 1"),
])
def test_bad_jsonl_rows_name_file_row_and_field(tmp_path, row, pattern):
    shutil.copy(bundled_dir() / "library.sql", tmp_path / "library.sql")  # db_id -> <db_id>.sql
    good = {"question": "How many books?", "db_id": "library", "query": "SELECT count(*) FROM book"}
    f = _write_jsonl(tmp_path / "bad.jsonl", [good, row])
    with pytest.raises(DataError, match=re.escape(str(f)) + ", " + pattern):
        get_task("text2sql").load(f)


def test_bird_layout(tmp_path, cache):
    root = tmp_path / "bird"
    (root / "dev_databases" / "library").mkdir(parents=True)
    shutil.copy(_library_db(cache), root / "dev_databases" / "library" / "library.sqlite")
    rows = [
        {"question_id": 0, "db_id": "library", "question": "How many loans are still out?",
         "evidence": "still out refers to return_date IS NULL",
         "SQL": "SELECT COUNT(*) FROM loan WHERE return_date IS NULL", "difficulty": "simple"},
        {"question_id": 1, "db_id": "library", "question": "Which cities do members live in?",
         "evidence": "", "SQL": "SELECT DISTINCT city FROM member", "difficulty": "simple"},
    ]
    (root / "dev.json").write_text(json.dumps(rows))
    task = get_task("text2sql")
    a, b = task.load(root)
    assert a.id == "bird-dev-0" and a.data["mode"] == "set"
    assert "Evidence: still out refers to return_date IS NULL" in a.prompt and "Evidence" not in b.prompt
    assert [scores(task, e, task.reference(e)) for e in (a, b)] == [[1, 1, 1], [1, 1, 1]]
    # set mode (BIRD): duplicates do not matter; bag mode would say they do
    dup = fenced("SELECT city FROM member")
    assert scores(task, b, dup)[2] == 1.0 and scores(get_task("text2sql", mode="bag"), b, dup)[2] == 0.0
    assert len(task.load(root / "dev.json")) == 2
    rows[1].pop("SQL")
    (root / "dev.json").write_text(json.dumps(rows))
    with pytest.raises(DataError, match=r"dev\.json, row 2, field 'SQL': missing or empty"):
        task.load(root)


def test_unknown_paths_and_layouts_say_what_is_expected(tmp_path):
    task = get_task("text2sql")
    with pytest.raises(DataError, match="no such file or directory"):
        task.load(tmp_path / "missing")
    with pytest.raises(DataError, match="not a Spider directory"):
        task.load(tmp_path)
    (tmp_path / "x.json").write_text(json.dumps([{"q": 1}]))
    with pytest.raises(DataError, match=r"x\.json, row 1: neither Spider \('query'\) nor BIRD \('SQL'\)"):
        task.load(tmp_path / "x.json")


# --- Spider (shared data) --------------------------------------------------------------------

@pytest.fixture(scope="module")
def spider_root(tmp_path_factory) -> Path:
    if not (SPIDER / "concert_singer_schema.sql").is_file():
        pytest.skip("../shared/data/spider is absent")
    root = tmp_path_factory.mktemp("spider")
    db_dir = root / "database" / "concert_singer"
    db_dir.mkdir(parents=True)
    conn = sqlite3.connect(db_dir / "concert_singer.sqlite")
    conn.executescript((SPIDER / "concert_singer_schema.sql").read_text())
    conn.commit()
    conn.close()
    shutil.copy(SPIDER / "dev_concert_singer.json", root / "dev.json")
    shutil.copy(SPIDER / "tables_concert_singer.json", root / "tables.json")
    return root


def test_spider_gold_queries_score_full_marks(spider_root):
    db = spider_root / "database" / "concert_singer" / "concert_singer.sqlite"
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    task = get_task("text2sql")
    examples = task.load(spider_root)
    assert len(examples) == 45 and {e.data["mode"] for e in examples} == {"bag"}
    assert 'CREATE TABLE "singer_in_concert"' in examples[0].prompt
    for ex in examples:
        assert scores(task, ex, task.reference(ex)) == [1.0, 1.0, 1.0], ex.id
    ex = examples[0]  # How many singers do we have?
    verdicts = task.score(ex, fenced("SELECT count(*) FROM singers"))
    assert [v.score for v in verdicts] == [1.0, 0.0, 0.0]
    block = task.rewards(ex)[1].block(ex, verdicts[1])
    assert block.endswith("SQLite error: no such table: singers")
    verdicts = task.score(ex, fenced("SELECT count(*) FROM concert"))  # 6 == 6: a lucky match
    assert [v.score for v in verdicts] == [1.0, 1.0, 1.0]
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_spider_json_file_and_bad_row(spider_root, tmp_path):
    task = get_task("text2sql")
    assert len(task.load(spider_root / "dev.json")) == 45
    rows = json.loads((spider_root / "dev.json").read_text())
    rows[4] = {k: v for k, v in rows[4].items() if k != "query"}
    bad = tmp_path / "dev.json"
    bad.write_text(json.dumps(rows))
    (tmp_path / "database").symlink_to(spider_root / "database")
    with pytest.raises(DataError, match=r"dev\.json, row 5, field 'query': missing or empty"):
        task.load(tmp_path)


def test_demo_shows_the_format_on_a_database_no_example_uses(sample, tmp_path):
    """`demo=True`: one worked exchange before the user turn, about a made-up database whose
    tables no bundled database has; its query runs on that schema in real SQLite and its answer
    is strictly in the format; P_without_format drops the exchange with the sentence, the other
    rewards keep it."""
    from mrtpo.contexts import block_texts, context_messages
    from mrtpo.tasks.text2sql import DEMO_SCHEMA, DEMO_SQL

    _, examples = sample
    task = get_task("text2sql", demo=True)
    db = tmp_path / "demo.sqlite"
    with sqlite3.connect(db) as con:
        con.executescript(DEMO_SCHEMA)
        demo_tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert con.execute(DEMO_SQL).fetchall() == [(0,)]
    for ex in examples:
        assert not any(f"CREATE TABLE {t} (" in ex.prompt for t in demo_tables)
    ex = task.load()[0]
    p0 = task.messages(ex)
    assert [m["role"] for m in p0] == ["user", "assistant", "user"] and p0[-1]["content"] == ex.prompt
    assert p0[0]["content"].endswith(task.format.instruction) and "Database schema:\n" + DEMO_SCHEMA in p0[0]["content"]
    assert task.format.parse(p0[1]["content"]).strict and task.format.parse(p0[1]["content"]).answer == DEMO_SQL
    blocks = block_texts(task, ex, task.score(ex, task.reference(ex)))
    p_all, without = context_messages(task, ex, blocks)
    names = [r.name for r in task.rewards(ex)]
    assert p_all[:2] == p0[:2]
    no_format = without[names.index("format")]
    assert len(no_format) == 1 and task.format.instruction not in no_format[0]["content"]
    for k in (names.index("executes"), names.index("result")):
        assert without[k][:2] == p0[:2]
    assert get_task("text2sql").messages(ex) == p0[2:]
