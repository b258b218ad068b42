"""Reading text-to-SQL datasets: Spider, BIRD and a simple JSONL layout, plus the database cache.

Each reader turns a layout into `SQLRow`s (question, gold query, database file, optional
evidence, the dataset's comparison mode). Bad rows raise `DataError` naming the file, the row
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
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from mrtpo.cache import cache_dir as _cache_root
from mrtpo.tasks.files import lines, read_text
from mrtpo.verifiers.sql import MODES


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


def build_database(script: Path, cache: Path | None = None) -> Path:
    """The SQLite file built from a `.sql` script, building it on first use.

    The file name carries a hash of the script, so an edited script builds a new file. The
    build writes a temporary file in the cache directory and renames it into place, so a
    reader never sees a half-built database and concurrent builders do not collide.
    """
    script = Path(script)
    text = script.read_text(encoding="utf-8")
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    out_dir = (cache or cache_dir()) / "text2sql"
    target = out_dir / f"{script.stem}-{digest}.sqlite"
    if target.is_file():
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{script.stem}-", suffix=".building", dir=out_dir)
    os.close(fd)
    try:
        conn = sqlite3.connect(tmp)
        try:
            conn.executescript(text)
            conn.commit()
        except sqlite3.Error as exc:
            raise DataError(f"{script}: the SQL script fails to build a database: {exc}. "
                            "Fix the script (it is run with sqlite3's executescript).") from exc
        finally:
            conn.close()
        os.chmod(tmp, 0o444)  # a built database is never written again
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def bundled_dir() -> Path:
    """The bundled sample: `questions.jsonl` and one `.sql` script per database."""
    return Path(str(resources.files("mrtpo") / "data" / "text2sql"))


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


def _read_json_list(file: Path) -> list:
    try:
        data = json.loads(read_text(file, DataError, "JSON file"))
    except json.JSONDecodeError as exc:
        raise DataError(f"{file}: not valid JSON ({exc}); expected a JSON list of rows") from exc
    if not isinstance(data, list):
        raise DataError(f"{file}: expected a JSON list of rows, got a JSON {type(data).__name__}")
    if not data:
        raise DataError(f"{file}: the list holds no rows")
    return data


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


def read_spider(root: Path, split: str | None = None, files: list[Path] | None = None) -> list[SQLRow]:
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
    rows = []
    for file in files:
        for i, raw in enumerate(_read_json_list(file), 1):
            where = _where(file, i)
            names_ = "'db_id', 'question' and 'query'"
            db_id = _text_field(raw, "db_id", where, names=names_)
            rows.append(SQLRow(
                id=f"spider-{file.stem}-{i}",
                question=_text_field(raw, "question", where, names=names_),
                gold=_text_field(raw, "query", where, names=names_),
                db_id=db_id,
                db_path=_existing_db(_db_in(db_root, db_id), db_id, where,
                                     f"Spider keeps databases as {db_root}/<db_id>/<db_id>.sqlite."),
                source=where, mode="bag"))
    return rows


# --- BIRD -----------------------------------------------------------------------------------

def read_bird(root: Path, split: str | None = None, file: Path | None = None) -> list[SQLRow]:
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
    rows = []
    for i, raw in enumerate(_read_json_list(file), 1):
        where = _where(file, i)
        names = "'db_id', 'question' and 'SQL' ('evidence' optional)"
        db_id = _text_field(raw, "db_id", where, names=names)
        qid = raw.get("question_id", i - 1)
        rows.append(SQLRow(
            id=f"bird-{split}-{qid}",
            question=_text_field(raw, "question", where, names=names),
            gold=_text_field(raw, "SQL", where, names=names),
            evidence=_text_field(raw, "evidence", where, required=False),
            db_id=db_id,
            db_path=_existing_db(_db_in(db_root, db_id), db_id, where,
                                 f"BIRD keeps databases as {db_root}/<db_id>/<db_id>.sqlite."),
            source=where, mode="set"))
    return rows


# --- JSONL ----------------------------------------------------------------------------------

def _resolve_db(value: str, field: str, bases: list[Path], where: str, cache: Path | None) -> tuple[Path, str]:
    """A row's database: an existing `.sqlite`/`.db` file, or a `.sql` script built into the cache."""
    if field == "db_path":
        p = Path(value)
        tries = [p] if p.is_absolute() else [b / p for b in bases]
    else:
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
               cache: Path | None = None) -> list[SQLRow]:
    """Rows of a JSONL file; `split` keeps the rows whose `split` field equals it."""
    bases = [b for b in (db_root, file.parent) if b is not None]
    rows: list[SQLRow] = []
    names = "'question', 'query' and one of 'db_path' / 'db_id'"
    seen_any = False
    for n, line in lines(read_text(file, DataError, "JSONL file")):
        seen_any = True
        where = _where(file, n, line=True)
        try:
            raw = json.loads(line)
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
        rid = raw.get("id", f"{file.stem}-{n}")
        rows.append(SQLRow(
            id=str(rid), question=question, gold=gold, db_path=db_path, db_id=db_id,
            source=where, evidence=_text_field(raw, "evidence", where, required=False),
            dialect=_text_field(raw, "dialect", where, required=False).lower() or "sqlite",
            mode=mode))
    if not seen_any:
        raise DataError(f"{file}: the file holds no rows (it is empty); each line must be one JSON "
                        f"object with {names}")
    if split is not None and not rows:
        raise DataError(f"{file}: no rows with split {split!r}")
    return rows


# --- dispatch -------------------------------------------------------------------------------

def read_rows(path: str | os.PathLike | None, split: str | None = None,
              db_root: str | os.PathLike | None = None) -> list[SQLRow]:
    """Rows from the bundled sample (path None), a Spider/BIRD directory, or a JSON/JSONL file."""
    root = Path(db_root) if db_root is not None else None
    if path is None:
        return read_jsonl(bundled_dir() / "questions.jsonl", split, root)
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: no such file or directory; give a Spider or BIRD directory, a "
                        "Spider/BIRD JSON file, or a JSONL file")
    if p.is_dir():
        if (p / "database").is_dir() or (p / "train_spider.json").is_file():
            return read_spider(p, split)
        if any(p.glob("*_databases")) or any(p.glob("*/*_databases")):
            return read_bird(p, split)
        jsonls = sorted(p.glob("*.jsonl"))
        if len(jsonls) == 1:
            return read_jsonl(jsonls[0], split, root)
        raise DataError(f"{p}: not a Spider directory (database/), a BIRD directory "
                        "(<split>_databases/) or a directory with one .jsonl file")
    if p.suffix == ".jsonl":
        return read_jsonl(p, split, root)
    if p.suffix == ".json":
        rows = _read_json_list(p)
        first = rows[0] if rows and isinstance(rows[0], dict) else {}
        if "SQL" in first:
            return read_bird(p.parent, split or p.stem.split("_")[0], file=p)
        if "query" in first:
            return read_spider(p.parent, split, files=[p])
        raise DataError(f"{p}, row 1: neither Spider ('query') nor BIRD ('SQL') fields "
                        f"(the row has: {', '.join(sorted(first)) or 'none'})")
    raise DataError(f"{p}: unknown file type {p.suffix!r}; expected .json (Spider/BIRD) or .jsonl")
