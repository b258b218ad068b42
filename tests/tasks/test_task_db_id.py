"""A dataset's db_id is a name inside the dataset's root, never a path out of it: a Spider db_id
that is an absolute path, or a JSONL db_id that climbs out with ../, is refused naming the row;
a db_path keeps its documented meaning."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mrtpo.cli import app

pytestmark = pytest.mark.timeout(300)
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def _invoke(*args, stdin="y\n" * 20):
    result = CliRunner().invoke(app, [str(a) for a in args], env=ENV, prog_name="mrtpo", input=stdin)
    return result, " ".join((result.output + (result.stderr if result.stderr_bytes is not None else "")).split())
# --- a db_id is a name inside the dataset's root ---------------------------------------------
def _secret_db(path: Path) -> Path:
    import sqlite3

    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE secret_salaries (name TEXT, salary INTEGER);")
    conn.commit()
    conn.close()
    return path


def _blocks_preview(data, *extra):
    return _invoke("blocks", "preview", "text2sql", "--data", data, "--plain", *extra, stdin=None)


@pytest.mark.parametrize("layout", ["spider-absolute", "spider-climbs", "bird-absolute", "jsonl-climbs",
                                    "jsonl-absolute", "jsonl-db-root-climbs"])
def test_a_db_id_that_is_a_path_is_refused_naming_the_row(tmp_path, monkeypatch, layout):
    monkeypatch.setenv("MRTPO_CACHE_DIR", str(tmp_path / "cache"))
    outside = _secret_db(tmp_path / "outside" / "secret" / "secret.sqlite")
    _secret_db(tmp_path / "outside" / "secret.sqlite")
    root = tmp_path / "data"
    kind, how = layout.split("-", 1)
    db_id = str(outside.parent) if how == "absolute" else "../../outside/secret"
    row = {"db_id": db_id, "question": "How many?", "query": "SELECT 1", "SQL": "SELECT 1"}
    extra = []
    if kind == "spider":
        (root / "database").mkdir(parents=True)
        (root / "dev.json").write_text(json.dumps([row]))
        data = root
    elif kind == "bird":
        (root / "dev_databases").mkdir(parents=True)
        (root / "dev.json").write_text(json.dumps([row]))
        data = root
    else:
        root.mkdir()
        row["db_id"] = {"climbs": "../outside/secret", "absolute": str(outside.parent.parent / "secret"),
                        "db-root-climbs": "../secret"}[how]
        data = root / "rows.jsonl"
        data.write_text(json.dumps(row) + "\n")
        if how == "db-root-climbs":
            (tmp_path / "outside" / "inner").mkdir()
            extra = ["-o", f"db_root={tmp_path / 'outside' / 'inner'}"]
    result, out = _blocks_preview(data, *extra)
    assert "secret_salaries" not in out, out
    assert result.exit_code == 2, (result.exit_code, out)
    assert "Traceback" not in out
    assert "row 1" in out or "line 1" in out, out
    assert "field 'db_id'" in out and "not a database name" in out, out


def test_a_db_path_keeps_its_documented_meaning(tmp_path, monkeypatch):
    monkeypatch.setenv("MRTPO_CACHE_DIR", str(tmp_path / "cache"))
    db = _secret_db(tmp_path / "elsewhere" / "books.sqlite")
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"db_path": str(db), "question": "How many?", "query": "SELECT 1"}) + "\n")
    result, out = _blocks_preview(data)
    assert result.exit_code == 0, out
    assert "secret_salaries" in out
