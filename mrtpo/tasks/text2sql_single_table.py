"""The text2sql task's easier question set, `single-table` (`-o questions=single-table`).

Why: the bundled sample's 39 questions (questions.jsonl) mostly join tables, group, nest
queries or set NULL traps; SmolLM2-135M never gets their `result` reward, so a learning run
has no signal for it. This module writes a larger, easier set over the same three databases
(library, school, shop): every question reads one table, and its gold query is one of a few
plain shapes. The reward stays; the questions get easier.

What it writes: `mrtpo/data/text2sql/single_table.jsonl`, rows in the layout of
questions.jsonl (`id`, `db_id`, `question`, `query`, `split`). The schema and the rows are read
from the real databases, built from the bundled `.sql` scripts by the task's own loader
(`build_database`) and queried through the sandbox the task uses (`execute`). Columns are
classified from the schema and the values: a key (a primary key or a name ending in `_id`), a
number (INTEGER or REAL), a date (a name ending in `_date`), a category (text with repeated
values), and the table's label (its first non-key text column with unique values, such as
`name` or `title`, else its one-column primary key). The templates, in TEMPLATES order:

| template           | example gold query                                                   |
|--------------------|----------------------------------------------------------------------|
| count_rows         | SELECT COUNT(*) FROM book                                            |
| all_columns        | SELECT * FROM book                                                   |
| list_column        | SELECT genre FROM book                                               |
| two_columns        | SELECT title, genre FROM book                                        |
| distinct_values    | SELECT DISTINCT genre FROM book                                      |
| count_distinct     | SELECT COUNT(DISTINCT genre) FROM book                               |
| aggregate          | SELECT MAX(pages) FROM book (MIN, MAX, AVG; SUM of additive columns) |
| filtered_aggregate | SELECT AVG(price) FROM product WHERE category = 'kitchen'            |
| equals             | SELECT title FROM book WHERE genre = 'fiction'                       |
| count_equals       | SELECT COUNT(*) FROM book WHERE genre = 'fiction'                    |
| count_per_value    | SELECT genre, COUNT(*) FROM book GROUP BY genre                      |
| compare            | SELECT title FROM book WHERE published_year > 2008 (and <)           |
| count_compare      | SELECT COUNT(*) FROM book WHERE published_year > 2008 (and <)        |
| null_test          | SELECT title FROM book WHERE pages IS NULL (and IS NOT NULL)         |
| count_null         | SELECT COUNT(*) FROM book WHERE pages IS NULL (and IS NOT NULL)      |
| top_n              | SELECT title FROM book ORDER BY pages DESC LIMIT 3 (1 or 3; ASC too) |
| lookup             | SELECT genre FROM book WHERE title = 'The Salt Road'                 |

Values in filters come from the real rows (a comparison's threshold is the median of the
column's distinct values), and are written in the question as in SQL ('fiction', 2008).
Every gold query is run on its database and kept only if it runs and returns a row holding
a value other than NULL; an ORDER BY ... LIMIT n is kept only if no tie crosses the cut (its
answer is unique), and an ascending one only on a column without NULLs (SQLite sorts NULL
first: a trap, not an easy question). A question text, or a query on a database, that was
already produced is skipped.

Split: within each template, a quarter of the instances (rounded down; those whose question
text has the smallest SHA-256) are `heldout`, the others `train`: 328 and 102 of 430 rows.
The file lists the train rows first, then the heldout ones, so `mrtpo eval --split heldout`
reads only the heldout rows, and `mrtpo train --heldout 102` holds out exactly them (the
trainer holds out the last N examples, at most a quarter of the data: 102 <= 430 / 4).

The output is a pure function of the `.sql` scripts, so the file regenerates byte for byte
(tests/tasks/test_text2sql_single_table.py checks it):

    python -m mrtpo.tasks.text2sql_single_table [OUT]   # default: the bundled file
"""
from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from mrtpo.tasks.text2sql_data import DataError, build_database, bundled_dir
from mrtpo.verifiers.sql_sandbox import ExecResult, execute

FILE_NAME = "single_table.jsonl"
DATABASES = ("library", "school", "shop")  # the bundled `.sql` scripts, by stem
HELDOUT_ONE_IN = 4  # one in 4 of each template's instances (rounded down) is held out
TOP_N = (1, 3)  # the LIMITs of the top_n template
ADDITIVE = {"pages", "credits", "price", "quantity"}  # columns whose SUM means something
COLUMN_WORDS = {"pages": "number of pages", "credits": "number of credits"}  # else name with spaces


# --- the schema, read from the real databases -----------------------------------------------

@dataclass(frozen=True)
class Column:
    """One column: its name, declared type, whether it is a key, and its values in row order."""

    name: str
    type: str
    key: bool
    values: tuple

    @property
    def words(self) -> str:
        return COLUMN_WORDS.get(self.name, self.name.replace("_", " "))

    @property
    def known(self) -> list:
        return [v for v in self.values if v is not None]

    @property
    def nullable(self) -> bool:
        return None in self.values

    @property
    def number(self) -> bool:
        return not self.key and self.type in ("INTEGER", "REAL")

    @property
    def date(self) -> bool:
        return self.name.endswith("_date")

    @property
    def ordered(self) -> bool:
        """A column whose values have a meaningful order: a number or a date."""
        return self.number or self.date

    @property
    def text(self) -> bool:
        return not self.key and not self.date and self.type == "TEXT"

    @property
    def unique(self) -> bool:
        return len(set(self.known)) == len(self.values)

    @property
    def category(self) -> bool:
        """Text with repeated values (genre, city, status): worth filtering and listing distinct."""
        return self.text and len(set(self.known)) < len(self.known)


@dataclass(frozen=True)
class Table:
    """One table of one database, with the column that names its rows (`label`, or None)."""

    db_id: str
    db_path: Path
    name: str
    columns: tuple[Column, ...]
    label: Column | None

    @property
    def singular(self) -> str:
        words = self.name.replace("_", " ")
        return words[:-1] if words.endswith("s") else words

    @property
    def plural(self) -> str:
        return self.singular + "s"

    @property
    def attributes(self) -> list[Column]:
        """The columns a question asks about: neither keys nor the label."""
        return [c for c in self.columns if not c.key and c is not self.label]

    def label_words(self, plural: bool = True) -> str:
        """How a question names the label: "titles", "names", or "ids" for a key."""
        word = "id" if self.label.key else self.label.words
        return word + "s" if plural else word


def _query(db_path: Path, sql: str) -> ExecResult:
    """A schema or data query on a bundled database; DataError if it fails (a broken script)."""
    res = execute(db_path, sql)
    if not res.ok:
        raise DataError(f"{db_path}: {sql!r} fails: {res.error}")
    return res


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def read_tables(db_id: str, cache: Path | None = None) -> list[Table]:
    """The tables of a bundled database, in creation order, with their columns and values."""
    db_path = build_database(bundled_dir() / f"{db_id}.sql", cache)
    names = _query(db_path, "SELECT name FROM sqlite_master WHERE type = 'table' "
                            "AND name NOT LIKE 'sqlite_%' ORDER BY rowid").rows
    return [_read_table(db_id, db_path, name) for (name,) in names]


def _read_table(db_id: str, db_path: Path, name: str) -> Table:
    info = _query(db_path, f"SELECT name, upper(type), pk FROM pragma_table_info({_literal(name)}) "
                           "ORDER BY cid").rows
    rows = _query(db_path, f"SELECT * FROM {_quoted(name)} ORDER BY rowid").rows
    columns = tuple(Column(col, kind, bool(pk) or col.endswith("_id"), tuple(r[i] for r in rows))
                    for i, (col, kind, pk) in enumerate(info))
    return Table(db_id, db_path, name, columns, _label(columns, [c for c, _, pk in info if pk]))


def _label(columns: tuple[Column, ...], primary_key: list[str]) -> Column | None:
    """The first text column with unique values (name, title), else a one-column primary key."""
    for c in columns:
        if c.text and c.unique:
            return c
    if len(primary_key) == 1:
        return next(c for c in columns if c.name == primary_key[0])
    return None


# --- values as SQL and as words ---------------------------------------------------------------

def _literal(value: Any) -> str:
    """A value as an SQL literal: 'text' (quotes doubled), or the number as Python prints it."""
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _article(words: str) -> str:
    return "an" if words[0] in "aeiou" else "a"


def _median(values: list) -> Any:
    """The middle of the distinct values, in order: a threshold with values on both sides."""
    distinct = sorted(set(values))
    return distinct[len(distinct) // 2]


def _higher(column: Column) -> str:
    return "latest" if column.date else "highest"


def _lower(column: Column) -> str:
    return "earliest" if column.date else "lowest"


# --- the templates: each yields (question, query) pairs for one table -------------------------

Instance = tuple[str, str]


def count_rows(t: Table) -> Iterator[Instance]:
    yield f"How many {t.plural} are there?", f"SELECT COUNT(*) FROM {t.name}"


def all_columns(t: Table) -> Iterator[Instance]:
    yield f"Show all the information about every {t.singular}.", f"SELECT * FROM {t.name}"


def list_column(t: Table) -> Iterator[Instance]:
    for c in ([t.label] if t.label and not t.label.key else []) + t.attributes:
        yield f"List the {c.words} of every {t.singular}.", f"SELECT {c.name} FROM {t.name}"


def two_columns(t: Table) -> Iterator[Instance]:
    if t.label is None:
        return
    for c in t.attributes:
        yield (f"List the {t.label_words(plural=False)} and the {c.words} of every {t.singular}.",
               f"SELECT {t.label.name}, {c.name} FROM {t.name}")


def distinct_values(t: Table) -> Iterator[Instance]:
    for c in t.attributes:
        if c.category or c.number:
            yield (f"List the distinct {c.words} values of the {t.plural}.",
                   f"SELECT DISTINCT {c.name} FROM {t.name}")


def count_distinct(t: Table) -> Iterator[Instance]:
    for c in t.attributes:
        if c.category or c.number:
            yield (f"How many distinct {c.words} values do the {t.plural} have?",
                   f"SELECT COUNT(DISTINCT {c.name}) FROM {t.name}")


def _aggregates(c: Column) -> list[tuple[str, str]]:
    """(SQL function, words) for an ordered column: MIN and MAX, and AVG for a number."""
    return [("MIN", _lower(c)), ("MAX", _higher(c))] + ([("AVG", "average")] if c.number else [])


def aggregate(t: Table) -> Iterator[Instance]:
    for c in t.attributes:
        if not c.ordered:
            continue
        for fn, words in _aggregates(c):
            yield f"What is the {words} {c.words} of the {t.plural}?", f"SELECT {fn}({c.name}) FROM {t.name}"
        if c.name in ADDITIVE:
            yield f"What is the total {c.words} of all {t.plural}?", f"SELECT SUM({c.name}) FROM {t.name}"


def filtered_aggregate(t: Table) -> Iterator[Instance]:
    """An aggregate over the rows with one category value: the average price of the 'kitchen' products."""
    for c, v in _categories(t):
        for n in (a for a in t.attributes if a.ordered):
            for fn, words in _aggregates(n):
                yield (f"What is the {words} {n.words} of the {t.plural} whose {c.words} is {_literal(v)}?",
                       f"SELECT {fn}({n.name}) FROM {t.name} WHERE {c.name} = {_literal(v)}")


def _categories(t: Table) -> Iterator[tuple[Column, Any]]:
    """(column, value) for every value of every category column, in order of first appearance."""
    for c in t.attributes:
        if c.category:
            for v in dict.fromkeys(c.known):
                yield c, v


def equals(t: Table) -> Iterator[Instance]:
    if t.label is None:
        return
    for c, v in _categories(t):
        yield (f"List the {t.label_words()} of the {t.plural} whose {c.words} is {_literal(v)}.",
               f"SELECT {t.label.name} FROM {t.name} WHERE {c.name} = {_literal(v)}")


def count_equals(t: Table) -> Iterator[Instance]:
    for c, v in _categories(t):
        yield (f"How many {t.plural} have {c.words} {_literal(v)}?",
               f"SELECT COUNT(*) FROM {t.name} WHERE {c.name} = {_literal(v)}")


def count_per_value(t: Table) -> Iterator[Instance]:
    for c in t.attributes:
        if c.category:
            yield (f"How many {t.plural} are there for each {c.words}?",
                   f"SELECT {c.name}, COUNT(*) FROM {t.name} GROUP BY {c.name}")


def _comparisons(t: Table) -> Iterator[tuple[Column, str, str, Any]]:
    """(column, SQL operator, words, threshold) for each ordered column, above and below its median."""
    for c in t.attributes:
        if c.ordered and len(set(c.known)) >= 3:
            v = _median(c.known)
            yield c, ">", "after" if c.date else "above", v
            yield c, "<", "before" if c.date else "below", v


def compare(t: Table) -> Iterator[Instance]:
    if t.label is None:
        return
    for c, op, words, v in _comparisons(t):
        yield (f"List the {t.label_words()} of the {t.plural} with {_article(c.words)} {c.words} "
               f"{words} {_literal(v)}.",
               f"SELECT {t.label.name} FROM {t.name} WHERE {c.name} {op} {_literal(v)}")


def count_compare(t: Table) -> Iterator[Instance]:
    for c, op, words, v in _comparisons(t):
        yield (f"How many {t.plural} have {_article(c.words)} {c.words} {words} {_literal(v)}?",
               f"SELECT COUNT(*) FROM {t.name} WHERE {c.name} {op} {_literal(v)}")


def _nullable(t: Table) -> list[Column]:
    """Columns with a NULL in them, keys included (a student's missing advisor_id means something)."""
    return [c for c in t.columns if c.nullable and c is not t.label]


def null_test(t: Table) -> Iterator[Instance]:
    if t.label is None:
        return
    for c in _nullable(t):
        for test, words in (("IS NULL", "missing"), ("IS NOT NULL", "known")):
            yield (f"List the {t.label_words()} of the {t.plural} whose {c.words} is {words}.",
                   f"SELECT {t.label.name} FROM {t.name} WHERE {c.name} {test}")


def count_null(t: Table) -> Iterator[Instance]:
    for c in _nullable(t):
        for test, words in (("IS NULL", "missing"), ("IS NOT NULL", "known")):
            yield (f"How many {t.plural} have a {words} {c.words}?",
                   f"SELECT COUNT(*) FROM {t.name} WHERE {c.name} {test}")


def top_n(t: Table) -> Iterator[Instance]:
    if t.label is None:
        return
    for c in t.attributes:
        if not c.ordered:
            continue
        for order, most in (("DESC", _higher(c)), ("ASC", _lower(c))):
            if order == "ASC" and c.nullable:
                continue  # NULL sorts first: a trap, not an easy question
            for n in TOP_N:
                if not _cut_is_clean(c.known, n, descending=order == "DESC"):
                    continue
                ask = (f"What is the {t.label_words(plural=False)} of the {t.singular} with the "
                       f"{most} {c.words}?" if n == 1 else
                       f"List the {t.label_words()} of the {n} {t.plural} with the {most} {c.words}.")
                yield ask, f"SELECT {t.label.name} FROM {t.name} ORDER BY {c.name} {order} LIMIT {n}"


def _cut_is_clean(values: list, n: int, descending: bool) -> bool:
    """Whether the first n values in this order are unique: no tie crosses the cut."""
    ordered = sorted(values, reverse=descending)
    return len(ordered) > n and ordered[n - 1] != ordered[n]


def lookup(t: Table) -> Iterator[Instance]:
    """One question per row: the value of one attribute, the columns taken in turn."""
    if t.label is None or not t.attributes:
        return
    for i, name in enumerate(t.label.values):
        c = t.attributes[i % len(t.attributes)]
        if c.values[i] is None:
            continue
        yield (f"What is the {c.words} of the {t.singular} whose {t.label_words(plural=False)} is "
               f"{_literal(name)}?",
               f"SELECT {c.name} FROM {t.name} WHERE {t.label.name} = {_literal(name)}")


TEMPLATES: dict[str, Callable[[Table], Iterator[Instance]]] = {
    f.__name__: f for f in (count_rows, all_columns, list_column, two_columns, distinct_values,
                            count_distinct, aggregate, filtered_aggregate, equals, count_equals,
                            count_per_value, compare, count_compare, null_test, count_null, top_n,
                            lookup)}


# --- generating, checking and writing ---------------------------------------------------------

def has_answer(res: ExecResult) -> bool:
    """A gold query worth asking: it ran and returned a row holding a value other than NULL."""
    return res.ok and not res.truncated and any(v is not None for row in res.rows for v in row)


def instances(tables: list[Table], template: Callable[[Table], Iterator[Instance]],
              seen: set[tuple[str, str]]) -> list[dict[str, str]]:
    """One template's rows over all tables: each (question, query) whose query has an answer
    and that was not produced before (`seen` holds (db_id, query) and ("", question) pairs)."""
    out = []
    for t in tables:
        for question, query in template(t):
            if (t.db_id, query) in seen or ("", question) in seen:
                continue
            if not has_answer(execute(t.db_path, query)):
                continue  # a template instance with nothing to find is dropped
            seen |= {(t.db_id, query), ("", question)}
            out.append({"db_id": t.db_id, "question": question, "query": query})
    return out


def mark_split(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """`split` for one template's rows: a quarter of them (rounded down) are `heldout`, those
    whose question has the smallest SHA-256; a hash, not every fourth row, so a template that
    alternates variants (above/below, IS NULL/IS NOT NULL) holds out some of each."""
    by_hash = sorted(range(len(rows)), key=lambda i: hashlib.sha256(rows[i]["question"].encode()).hexdigest())
    held = set(by_hash[: len(rows) // HELDOUT_ONE_IN])
    return [{**row, "split": "heldout" if i in held else "train"} for i, row in enumerate(rows)]


def generate(cache: Path | None = None) -> list[dict[str, str]]:
    """The rows of single_table.jsonl, in file order: train rows, then heldout rows, each
    in template order (TEMPLATES), then database and table order."""
    tables = [t for db in DATABASES for t in read_tables(db, cache)]
    seen: set[tuple[str, str]] = set()
    rows = [row for template in TEMPLATES.values() for row in mark_split(instances(tables, template, seen))]
    ordered = [r for r in rows if r["split"] == "train"] + [r for r in rows if r["split"] == "heldout"]
    return [{"id": f"single-{row['db_id']}-{n:03d}", **row} for n, row in enumerate(ordered, start=1)]


def render(rows: list[dict[str, str]]) -> str:
    """The JSONL text: one object per line, keys in the order of questions.jsonl."""
    keys = ("id", "db_id", "question", "query", "split")
    return "".join(json.dumps({k: row[k] for k in keys}, ensure_ascii=False) + "\n" for row in rows)


def bundled_file() -> Path:
    """Where the bundled copy lives: mrtpo/data/text2sql/single_table.jsonl."""
    return bundled_dir() / FILE_NAME


def write(out: Path | None = None, cache: Path | None = None) -> Path:
    """Generate the rows and write them to `out` (default: the bundled file); returns the path."""
    out = Path(out) if out is not None else bundled_file()
    out.write_text(render(generate(cache)), encoding="utf-8", newline="\n")
    return out


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1:
        raise SystemExit("usage: python -m mrtpo.tasks.text2sql_single_table [OUT]")
    path = write(Path(args[0]) if args else None)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
