"""Reading text-to-SQL datasets: Spider, BIRD and a simple JSONL layout, plus the database cache.

Each reader turns a layout into `SQLRow`s (question, gold query, database file, optional
evidence, the dataset's comparison mode), one at a time (`iter_rows`; `read_rows` is its list):
a JSONL file is streamed line by line, a Spider or BIRD JSON file is one document, parsed whole. Bad rows raise `DataError` naming the file, the row
and the field, and saying what to do. Databases given as `.sql` scripts (the bundled sample,
or a JSONL row whose `db_id` names `<db_id>.sql`) are built into a cache directory, never
into the package: `mrtpo.cache.cache_dir()` (`$MRTPO_CACHE_DIR`, else `$XDG_CACHE_HOME/mrtpo`,
else `~/.cache/mrtpo`).

Layouts (see data_cards/spider.md, bird.md, text2sql-jsonl.md):
- Spider: `<root>/{dev.json, train_spider.json, train_others.json, test.json}` and
  `<root>/database/<db_id>/<db_id>.sqlite` (`test_database/` for test); rows
  `{db_id, question, query}`. Compared in `bag` mode (the test-suite metric).
- BIRD: `<root>/{dev,train}.json` (or `<root>/<split>/<split>.json`) and
  `<root>/<split>_databases/<db_id>/<db_id>.sqlite`; rows `{question_id, db_id, question,
  evidence, SQL}`. Compared in `set` mode (BIRD's `calculate_ex`).
- JSONL: one object per line with `question`, `query`, and `db_path` or `db_id`; optional
  `id`, `evidence`, `dialect`, `mode`, `split`. Compared in `bag` mode unless a row says.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterator

from mrtpo import textio
from mrtpo.cache import cache_dir as _cache_root
from mrtpo.tasks.files import read_json_array, read_lines, row_id
from mrtpo.verifiers.sql import MODES
from mrtpo.verifiers.sql_sandbox import _DENIED_FUNCTIONS, _READ_PRAGMAS, MAX_VALUE_BYTES, _describe


class DataError(ValueError):
    """A dataset file that cannot be used as it is; the message names file, row and field."""


@dataclass(frozen=True)
class SQLRow:
    """One question with its gold query, before prompts are rendered."""

    id: str
    question: str
    gold: str  # as written in the dataset (possibly another dialect)
    db_path: Path
    db_id: str
    source: str  # "file, row N" for error messages
    evidence: str = ""
    dialect: str = "sqlite"
    mode: str = "bag"


# --- the database cache ---------------------------------------------------------------------

def cache_dir() -> Path:
    """Where built databases go: the project's cache root (`mrtpo.cache`)."""
    return _cache_root()


BUILD_TIMEOUT_S = 60.0  # a data script that builds for longer than this is refused
BUILD_MAX_BYTES = 1 << 30  # the largest database a data script may build
#: PRAGMAs a data script may set: they only shape the database being built (no files, no paths,
#: no page size or page count, which would move the size cap)
_BUILD_PRAGMAS = _READ_PRAGMAS | {"foreign_keys", "encoding", "user_version", "application_id",
                                  "recursive_triggers", "defer_foreign_keys", "legacy_alter_table",
                                  "ignore_check_constraints", "case_sensitive_like", "auto_vacuum"}
_ATTACH, _DETACH, _PRAGMA, _FUNCTION = 24, 25, 19, 31


def build_database(script: Path, cache: Path | None = None, *, timeout: float = BUILD_TIMEOUT_S,
                   max_bytes: int = BUILD_MAX_BYTES) -> Path:
    """The SQLite file built from a `.sql` script, building it on first use.

    The file name carries a hash of the script, so an edited script builds a new file. The
    build writes a temporary file in the cache directory and renames it into place, so a
    reader never sees a half-built database and concurrent builders do not collide. The script
    is untrusted data and runs in a sandbox (`_sandbox`): it may create and fill tables, but not
    ATTACH other files, load extensions, call file functions or set PRAGMAs that reach outside
    the database; it must finish within `timeout` seconds and build at most `max_bytes`. On any
    failure (or an interruption) the temporary file is removed; leftovers of builders that
    were killed outright are removed by the next build.
    """
    script = Path(script)
    text = script.read_text(encoding="utf-8")
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    out_dir = (cache or cache_dir()) / "text2sql"
    target = out_dir / f"{script.stem}-{digest}.sqlite"
    if target.is_file():
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    _remove_dead_builds(out_dir)
    fd, tmp = tempfile.mkstemp(prefix=f".{script.stem}-{os.getpid()}-", suffix=".building",
                               dir=out_dir)
    os.close(fd)
    try:
        _run_script(script, text, tmp, timeout, max_bytes)
        os.chmod(tmp, 0o444)  # a built database is never written again
        os.replace(tmp, target)
    finally:
        for leftover in (tmp, tmp + "-journal", tmp + "-wal", tmp + "-shm"):
            if os.path.exists(leftover):
                os.unlink(leftover)
    return target


def _run_script(script: Path, text: str, path: str, timeout: float, max_bytes: int) -> None:
    """Run the data script into the database file `path` under the sandbox; DataError if it fails."""
    refused: list[str] = []
    deadline = time.monotonic() + timeout
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        _sandbox(conn, refused, deadline, max_bytes)
        conn.executescript(text)
    except sqlite3.Error as exc:
        if str(exc) == "interrupted" and time.monotonic() < deadline:
            # Ctrl-C inside SQLite's progress callback comes out as "interrupted": pass it on
            raise KeyboardInterrupt from None
        raise DataError(f"{script}: the SQL script fails to build a database: "
                        f"{_build_failure(exc, refused, deadline, timeout, max_bytes)}. Fix the "
                        "script (it is run with sqlite3's executescript, without ATTACH, extensions "
                        f"or file functions, for at most {timeout:g} s and {max_bytes:,} bytes).") from exc
    finally:
        conn.close()


def _sandbox(conn: sqlite3.Connection, refused: list[str], deadline: float, max_bytes: int) -> None:
    """Bound a build connection: no attached files, a value and file size cap, a deadline, and
    an authorizer refusing ATTACH, file and extension functions and outward-reaching PRAGMAs."""
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {max(1, max_bytes // page_size)}")
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 1000)

    def auth(action, arg1, arg2, _db, _trigger):
        if action in (_ATTACH, _DETACH) \
                or (action == _PRAGMA and str(arg1).lower() not in _BUILD_PRAGMAS) \
                or (action == _FUNCTION and str(arg2).lower() in _DENIED_FUNCTIONS):
            refused.append(f"the function {arg2}()" if action == _FUNCTION else _describe(action, arg1, arg2))
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    conn.set_authorizer(auth)


def _build_failure(exc: sqlite3.Error, refused: list[str], deadline: float, timeout: float,
                   max_bytes: int) -> str:
    """Why a build failed, in words: SQLite's message, or the sandbox rule that stopped it."""
    msg = str(exc)
    if refused and ("not authorized" in msg or "authorization denied" in msg):
        return f"{refused[0]} is not allowed in a data script"
    if msg == "interrupted" and time.monotonic() >= deadline:
        return f"it ran past the {timeout:g} s limit"
    if "full" in msg:  # "database or disk is full": max_page_count reached
        return f"{msg}: the database would exceed the {max_bytes:,}-byte cap"
    return msg


def _remove_dead_builds(out_dir: Path) -> None:
    """Delete `.building` files whose builder process is gone (killed before it could clean up)."""
    for leftover in out_dir.glob(".*.building*"):
        try:
            pid = int(leftover.name.split(".building")[0].rsplit("-", 2)[-2])
        except (ValueError, IndexError):
            continue
        if pid != os.getpid() and not _alive(pid):
            try:
                leftover.unlink()
            except OSError:
                pass


def _alive(pid: int) -> bool:
    from mrtpo.cache import pid_alive

    return pid_alive(pid)


def bundled_dir() -> Path:
    """The bundled sample: its question files (BUNDLED_QUESTIONS) and one `.sql` script per database."""
    return Path(str(resources.files("mrtpo") / "data" / "text2sql"))


#: the bundled question sets over the three databases, by name (the task's `questions` option):
#: `sample` the hand-written questions (joins, grouping, NULL traps), `single-table` an easier,
#: larger set of one-table questions written by mrtpo.tasks.text2sql_single_table
BUNDLED_QUESTIONS = {"sample": "questions.jsonl", "single-table": "single_table.jsonl"}


# --- helpers for row checks -------------------------------------------------------------------

def _where(file: Path, n: int, line: bool = False) -> str:
    return f"{file}, {'line' if line else 'row'} {n}"


def _text_field(row: Any, field: str, where: str, *, required: bool = True,
                names: str = "") -> str:
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    value = row.get(field)
    if value is None or (isinstance(value, str) and not value.strip()):
        if not required:
            return ""
        have = ", ".join(sorted(row)) or "none"
        raise DataError(f"{where}, field {field!r}: missing or empty (the row has: {have}). "
                        f"Each row needs {names or field}.")
    if not isinstance(value, str):
        raise DataError(f"{where}, field {field!r}: expected text, got {type(value).__name__} "
                        f"{value!r}")
    return value.strip()


def _json_rows(file: Path) -> Iterator[Any]:
    """The rows of a Spider/BIRD JSON file (one JSON array), parsed as they are read: one row
    in memory at a time (`read_json_array`); an array with no rows is refused."""
    n = 0
    for n, raw in read_json_array(file, DataError, "JSON file"):
        yield raw
    if n == 0:
        raise DataError(f"{file}: the list holds no rows")


def _db_name(db_id: str, where: str) -> str:
    """`db_id` checked to be a name, not a path: a database of the dataset is looked up under
    its root, so an absolute db_id or one with `..` would read any database on disk and put its
    schema into the prompt (issue 40, item 2). `db_path` is the field for a path."""
    parts = Path(db_id.replace("\\", "/")).parts
    if Path(db_id).is_absolute() or db_id.startswith(("/", "\\", "~")) or ".." in parts or "\0" in db_id:
        raise DataError(f"{where}, field 'db_id': {db_id[:200]!r} is a path, not a database name; a db_id "
                        "names a database inside the dataset's root (e.g. concert_singer). Give the "
                        "name, or a row's db_path for a database file elsewhere")
    return db_id


def _db_in(root: Path, db_id: str) -> Path:
    return root / db_id / f"{db_id}.sqlite"


def _existing_db(path: Path, db_id: str, where: str, what: str) -> Path:
    if not path.is_file():
        raise DataError(f"{where}, field 'db_id': no database {db_id!r} at {path}. {what}")
    return path


# --- Spider ---------------------------------------------------------------------------------

_SPIDER_SPLITS = {"dev": (["dev.json"], "database"), "validation": (["dev.json"], "database"),
                  "train": (["train_spider.json", "train_others.json"], "database"),
                  "test": (["test.json"], "test_database")}


def read_spider(root: Path, split: str | None = None, files: list[Path] | None = None) -> Iterator[SQLRow]:
    """Rows of a Spider-layout directory (split dev by default), or of the given JSON files."""
    split = split or "dev"
    if split not in _SPIDER_SPLITS:
        raise DataError(f"{root}: unknown Spider split {split!r}; use one of {', '.join(_SPIDER_SPLITS)}")
    names, db_dir = _SPIDER_SPLITS[split]
    if files is None:
        files = [root / n for n in names if (root / n).is_file()]
        if not files:
            raise DataError(f"{root}: no {' or '.join(names)} for Spider split {split!r}")
    db_root = root / db_dir
    if not db_root.is_dir() and (root / "database").is_dir():
        db_root = root / "database"
    for file in files:
        for i, raw in enumerate(_json_rows(file), 1):
            where = _where(file, i)
            names_ = "'db_id', 'question' and 'query'"
            db_id = _db_name(_text_field(raw, "db_id", where, names=names_), where)
            yield SQLRow(
                id=f"spider-{file.stem}-{i}",
                question=_text_field(raw, "question", where, names=names_),
                gold=_text_field(raw, "query", where, names=names_),
                db_id=db_id,
                db_path=_existing_db(_db_in(db_root, db_id), db_id, where,
                                     f"Spider keeps databases as {db_root}/<db_id>/<db_id>.sqlite."),
                source=where, mode="bag")


# --- BIRD -----------------------------------------------------------------------------------

def read_bird(root: Path, split: str | None = None, file: Path | None = None) -> Iterator[SQLRow]:
    """Rows of a BIRD-layout directory (split dev by default), or of one BIRD JSON file."""
    split = split or "dev"
    if file is None:
        for base in (root, root / split):
            if (base / f"{split}.json").is_file():
                file = base / f"{split}.json"
                break
        else:
            raise DataError(f"{root}: no {split}.json (nor {split}/{split}.json) for BIRD split {split!r}")
    base = file.parent
    db_roots = [base / f"{split}_databases", *sorted(base.glob("*_databases"))]
    db_root = next((d for d in db_roots if d.is_dir()), db_roots[0])
    for i, raw in enumerate(_json_rows(file), 1):
        where = _where(file, i)
        names = "'db_id', 'question' and 'SQL' ('evidence' optional)"
        db_id = _db_name(_text_field(raw, "db_id", where, names=names), where)
        qid = raw.get("question_id", i - 1)
        yield SQLRow(
            id=f"bird-{split}-{qid}",
            question=_text_field(raw, "question", where, names=names),
            gold=_text_field(raw, "SQL", where, names=names),
            evidence=_text_field(raw, "evidence", where, required=False),
            db_id=db_id,
            db_path=_existing_db(_db_in(db_root, db_id), db_id, where,
                                 f"BIRD keeps databases as {db_root}/<db_id>/<db_id>.sqlite."),
            source=where, mode="set")


# --- JSONL ----------------------------------------------------------------------------------

def _resolve_db(value: str, field: str, bases: list[Path], where: str, cache: Path | None) -> tuple[Path, str]:
    """A row's database: an existing `.sqlite`/`.db` file, or a `.sql` script built into the cache."""
    if field == "db_path":
        p = Path(value)
        tries = [p] if p.is_absolute() else [b / p for b in bases]
    else:
        value = _db_name(value, where)
        tries = [t for b in bases for t in (b / f"{value}.sqlite", b / f"{value}.db",
                                             b / value / f"{value}.sqlite",
                                             b / "database" / value / f"{value}.sqlite",
                                             b / f"{value}.sql")]
    for t in tries:
        if t.is_file():
            db_id = value if field == "db_id" else t.stem
            return (build_database(t, cache) if t.suffix == ".sql" else t), db_id
    looked = ", ".join(str(t) for t in tries)
    raise DataError(f"{where}, field {field!r}: no database {value!r} found (looked for {looked}). "
                    "Give an existing db_path, or put <db_id>.sqlite (or a <db_id>.sql script) "
                    "next to the file, or pass db_root=DIR to the task (on the command line: "
                    "-o db_root=DIR).")


def read_jsonl(file: Path, split: str | None = None, db_root: Path | None = None,
               cache: Path | None = None) -> Iterator[SQLRow]:
    """Rows of a JSONL file, read line by line; `split` keeps the rows whose `split` field equals it."""
    bases = [b for b in (db_root, file.parent) if b is not None]
    given = 0
    names = "'question', 'query' and one of 'db_path' / 'db_id'"
    seen_any = False
    for n, line in read_lines(file, DataError, "JSONL file"):
        seen_any = True
        where = _where(file, n, line=True)
        try:
            raw = textio.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: not valid JSON ({exc}); each line must be one JSON object") from exc
        if not isinstance(raw, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(raw).__name__}")
        row_split = _text_field(raw, "split", where, required=False)
        if split is not None and row_split != split:
            continue
        question = _text_field(raw, "question", where, names=names)
        gold = _text_field(raw, "query", where, names=names)
        if raw.get("db_path") is not None:
            db_path, db_id = _resolve_db(_text_field(raw, "db_path", where), "db_path", bases, where, cache)
        else:
            db_path, db_id = _resolve_db(_text_field(raw, "db_id", where, names=names), "db_id",
                                         bases, where, cache)
        mode = _text_field(raw, "mode", where, required=False) or "bag"
        if mode not in MODES:
            raise DataError(f"{where}, field 'mode': {mode!r} is not a comparison mode; "
                            f"use one of {', '.join(MODES)}")
        rid = row_id(raw, ("id",), f"{file.stem}-{n}", where, DataError)
        yield SQLRow(
            id=rid, question=question, gold=gold, db_path=db_path, db_id=db_id,
            source=where, evidence=_text_field(raw, "evidence", where, required=False),
            dialect=_text_field(raw, "dialect", where, required=False).lower() or "sqlite",
            mode=mode)
        given += 1
    if not seen_any:
        raise DataError(f"{file}: the file holds no rows (it is empty); each line must be one JSON "
                        f"object with {names}")
    if split is not None and not given:
        raise DataError(f"{file}: no rows with split {split!r}")


# --- dispatch -------------------------------------------------------------------------------

def read_rows(path: str | os.PathLike | None, split: str | None = None,
              db_root: str | os.PathLike | None = None, questions: str = "sample") -> list[SQLRow]:
    """Every row of `iter_rows`, read before the first is returned."""
    return list(iter_rows(path, split, db_root, questions))


def iter_rows(path: str | os.PathLike | None, split: str | None = None,
              db_root: str | os.PathLike | None = None, questions: str = "sample") -> Iterator[SQLRow]:
    """Rows from a bundled question set (path None: `questions` names it, see
    BUNDLED_QUESTIONS), a Spider/BIRD directory, or a JSON/JSONL file, one at a time; a bad row
    raises DataError when it is reached."""
    root = Path(db_root) if db_root is not None else None
    if path is None:
        if questions not in BUNDLED_QUESTIONS:
            raise DataError(f"questions={questions!r}: no such bundled question set; use one of "
                            f"{', '.join(BUNDLED_QUESTIONS)}")
        yield from read_jsonl(bundled_dir() / BUNDLED_QUESTIONS[questions], split, root)
        return
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: no such file or directory; give a Spider or BIRD directory, a "
                        "Spider/BIRD JSON file, or a JSONL file")
    if p.is_dir():
        if (p / "database").is_dir() or (p / "train_spider.json").is_file():
            yield from read_spider(p, split)
            return
        if any(p.glob("*_databases")) or any(p.glob("*/*_databases")):
            yield from read_bird(p, split)
            return
        jsonls = sorted(p.glob("*.jsonl"))
        if len(jsonls) == 1:
            yield from read_jsonl(jsonls[0], split, root)
            return
        raise DataError(f"{p}: not a Spider directory (database/), a BIRD directory "
                        "(<split>_databases/) or a directory with one .jsonl file")
    problem = textio.not_a_file(p)  # opening a FIFO waits for a writer; the rows are read twice anyway
    if problem:
        raise DataError(f"{p}: {problem}; give a Spider or BIRD directory, a Spider/BIRD JSON file, "
                        "or a JSONL file")
    if p.suffix == ".jsonl":
        yield from read_jsonl(p, split, root)
        return
    if p.suffix == ".json":
        first = next(_json_rows(p))  # the layout's reader reads the file again, row by row
        first = first if isinstance(first, dict) else {}
        if "SQL" in first:
            yield from read_bird(p.parent, split or p.stem.split("_")[0], file=p)
            return
        if "query" in first:
            yield from read_spider(p.parent, split, files=[p])
            return
        raise DataError(f"{p}, row 1: neither Spider ('query') nor BIRD ('SQL') fields "
                        f"(the row has: {', '.join(sorted(first)) or 'none'})")
    raise DataError(f"{p}: unknown file type {p.suffix!r}; expected .json (Spider/BIRD) or .jsonl")
