"""Text-to-SQL's sandbox: one model-written query, run read-only on SQLite under a deadline and caps.

`execute` runs one model-written query and never raises: a bad query comes back as an
`ExecResult` whose `.error` is SQLite's own message (`no such column: nme`, `near "FROM":
syntax error`), or a refusal that names what was refused. The sandbox, in layers:
- the file is opened read-only (`mode=ro` URI), so SQLite itself refuses to write it;
- an authorizer allows only reads (SELECT, column reads, functions, recursive CTEs and a
  few schema-introspection PRAGMAs) and denies everything else: writes, schema changes,
  ATTACH (VACUUM attaches internally, so it is denied too), PRAGMAs, transactions;
- the file is opened `immutable=1` as well, so SQLite creates no file beside it (no `-wal`
  or `-shm` for a database in WAL mode; such a database is read as of its last checkpoint);
- statements that start with a writing keyword (REINDEX runs no authorizer check) are
  refused before SQLite sees them; more than one statement is refused. That pre-check is a
  linear scan (no backtracking regex), so it costs nothing on hostile text;
- the read-only table-valued functions `json_each`, `json_tree` and the schema
  `pragma_<name>(...)` functions of `_READ_PRAGMAS` are allowed (their virtual tables are
  set up before the authorizer is installed); every other virtual table stays refused;
- a progress handler enforces the deadline (a runaway recursive CTE stops on time). SQLite
  checks it only at jumps, so straight-line code (one row, many calls) runs unchecked; a
  query that ends past the deadline that way (hundreds of `x LIKE p` on a 1 MB value, ~0.1 s
  each) is reported as a timeout, never as a success; the worker pool (`sql_pool.py`) kills
  a worker that overruns, so a call there returns within `timeout + hard_grace(timeout)`;
- no single SQLite function call may run long, since nothing interrupts one: the built-ins
  whose time is not bounded by the size of what they return are replaced on each connection
  (`_BoundedFunctions`): `printf`/`format` refuse a width or precision over MAX_VALUE_BYTES
  (`printf('%.*c', 1e9, 'x')` loops a billion times in SQLite 3.40 to return NULL), `instr`
  and `replace` search in linear time (SQLite's search is quadratic on `'aaa...'`), and a
  LIKE/GLOB pattern may hold at most MAX_LIKE_PATTERN characters (its match costs the value's
  length times the pattern's);
- rows are capped (`max_rows`), so is the size of any one value (`SQLITE_LIMIT_LENGTH`) and
  the size of the whole result (MAX_RESULT_BYTES, counted as Python objects of every type,
  numbers and NULLs included).

`mrtpo.verifiers.sql` re-exports `execute`, `ExecResult` and the limits, and compares results;
the worker pool (`sql_pool.py`) runs `execute` in its processes.
"""
from __future__ import annotations

import os
import re
import sqlite3
import time
from sys import getsizeof
from dataclasses import dataclass
from pathlib import Path
from typing import Union

DEFAULT_TIMEOUT = 5.0  # seconds per query
DEFAULT_MAX_ROWS = 100_000  # rows kept per result; more marks the result truncated
MAX_VALUE_BYTES = 1_000_000  # SQLITE_LIMIT_LENGTH: no string/blob larger than this
MAX_SQL_CHARS = 100_000  # SQLITE_LIMIT_SQL_LENGTH
MAX_LIKE_PATTERN = 100  # SQLITE_LIMIT_LIKE_PATTERN_LENGTH: a match costs value x pattern length
MAX_RESULT_BYTES = 64_000_000  # bytes of Python objects kept per result (all types); more truncates
_PROGRESS_EVERY = 1000  # VM instructions between deadline checks

# SQLite authorizer action codes (sqlite3.h). Python's module mixes them with result codes
# under clashing names (SQLITE_FORMAT == SQLITE_ATTACH == 24), so they are spelled out here.
_ACTIONS = {
    1: "CREATE INDEX", 2: "CREATE TABLE", 3: "CREATE TEMP INDEX", 4: "CREATE TEMP TABLE",
    5: "CREATE TEMP TRIGGER", 6: "CREATE TEMP VIEW", 7: "CREATE TRIGGER", 8: "CREATE VIEW",
    9: "DELETE", 10: "DROP INDEX", 11: "DROP TABLE", 12: "DROP TEMP INDEX",
    13: "DROP TEMP TABLE", 14: "DROP TEMP TRIGGER", 15: "DROP TEMP VIEW", 16: "DROP TRIGGER",
    17: "DROP VIEW", 18: "INSERT", 19: "PRAGMA", 20: "READ", 21: "SELECT", 22: "TRANSACTION",
    23: "UPDATE", 24: "ATTACH", 25: "DETACH", 26: "ALTER TABLE", 27: "REINDEX", 28: "ANALYZE",
    29: "CREATE VIRTUAL TABLE", 30: "DROP VIRTUAL TABLE", 31: "FUNCTION", 32: "SAVEPOINT",
    33: "RECURSIVE",
}
_READ_ACTIONS = {20, 21, 31, 33}  # READ, SELECT, FUNCTION, RECURSIVE
_PRAGMA = 19
#: PRAGMAs that only describe the schema; their argument is a table or index name.
_READ_PRAGMAS = {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo",
                 "foreign_key_list"}
#: SQL functions refused even inside a SELECT (extension loading is off in Python's build,
#: but the refusal should not depend on how the interpreter was compiled).
_DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}
#: Leading keywords of statements that write or change state; refused before preparing.
_WRITE_KEYWORDS = {"INSERT", "UPDATE", "DELETE", "REPLACE", "UPSERT", "CREATE", "DROP",
                   "ALTER", "ATTACH", "DETACH", "VACUUM", "REINDEX", "ANALYZE", "BEGIN",
                   "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE"}
_SPACE_RE = re.compile(r"\s+")
_WORD_RE = re.compile(r"[A-Za-z]+")
#: Eponymous virtual tables that only read: set up on each connection before the authorizer is
#: installed (their first use writes their declaration into the in-memory schema, which the
#: authorizer would refuse as an UPDATE of sqlite_master); other virtual tables stay refused.
_TABLE_FUNCTIONS = ("json_each('[]')", "json_tree('[]')") + tuple(
    f"pragma_{p}('')" for p in sorted({"table_info", "table_xinfo", "index_list", "index_info",
                                        "index_xinfo", "foreign_key_list"}))
TIMEOUT_ERROR = "interrupted: the query ran past the {timeout:g} s time limit"
_ALLOWED_HINT = "only a single read-only query (SELECT or WITH ... SELECT) may run"

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class ExecResult:
    """What running one query gave: `rows` (a list of tuples) or `error` (a message).

    `error` is SQLite's own text for queries SQLite rejected or stopped, or a refusal saying
    what was refused. `truncated` means the query produced more than `max_rows` rows (or more
    than MAX_RESULT_BYTES of values) and `rows` holds only the first ones; such a result
    counts as having run but is never compared. `nbytes`: the size of `rows` as Python
    objects (what caches count).
    """

    rows: list[tuple] | None = None
    error: str | None = None
    columns: tuple[str, ...] = ()
    truncated: bool = False
    seconds: float = 0.0
    nbytes: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def timed_out(self) -> bool:
        """The query was stopped at (or ran past) its deadline."""
        return bool(self.error) and self.error.startswith("interrupted:")


def db_uri(db_path: PathLike) -> str:
    """The read-only `file:` URI for a database path (percent-encoded)."""
    return Path(db_path).resolve().as_uri() + "?mode=ro&immutable=1"


def _authorizer(refused: list[str]):
    def auth(action, arg1, arg2, _db, _trigger):
        if action in _READ_ACTIONS:
            if action == 31 and str(arg2).lower() in _DENIED_FUNCTIONS:
                refused.append(f"the function {arg2}()")
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK
        if action == _PRAGMA and str(arg1).lower() in _READ_PRAGMAS:
            return sqlite3.SQLITE_OK
        if action == 23 and arg1 == "sqlite_master":  # a virtual table declaring itself
            refused.append("this table-valued function (only json_each, json_tree and "
                           + ", ".join(f"pragma_{p}" for p in sorted(_READ_PRAGMAS)) + " may run)")
            return sqlite3.SQLITE_DENY
        refused.append(_describe(action, arg1, arg2))
        return sqlite3.SQLITE_DENY

    return auth


def _describe(action: int, arg1, arg2) -> str:
    name = _ACTIONS.get(action, f"action {action}")
    if action == _PRAGMA:
        return f"PRAGMA {arg1}" + (f" = {arg2}" if arg2 is not None else "")
    if action == 24:
        # VACUUM attaches a scratch database under the empty name; ATTACH names a file.
        return "VACUUM" if not arg1 else f"ATTACH of {arg1!r}"
    if action == 22:
        return f"transaction control ({arg1})"
    if action in (9, 18, 23) and arg1:
        return f"{name} on table {arg1}"
    return f"{name} {arg1}" if arg1 else name


def leading_keyword(sql: str) -> str:
    """The statement's first keyword, upper-cased, after whitespace and comments ("" if none).

    A linear scan: `--` comments run to the end of the line, `/* */` comments to their close
    (an unclosed one leaves no keyword), whitespace is skipped in one step.
    """
    i, n = 0, len(sql)
    while i < n:
        m = _SPACE_RE.match(sql, i)
        if m:
            i = m.end()
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j + 1
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            if j < 0:
                return ""
            i = j + 2
        else:
            break
    m = _WORD_RE.match(sql, i)
    return m.group(0).upper() if m else ""


def _connect(db_path: PathLike, refused: list[str], timeout: float) -> sqlite3.Connection:
    # the busy timeout is the query's: a database locked by a writer waits no longer than that
    conn = sqlite3.connect(db_uri(db_path), uri=True, isolation_level=None,
                           check_same_thread=False, timeout=timeout)
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_SQL_CHARS)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, MAX_LIKE_PATTERN)
    _BoundedFunctions().install(conn)
    for fn in _TABLE_FUNCTIONS:
        conn.execute(f"SELECT 1 FROM {fn} LIMIT 0").fetchall()
    conn.set_authorizer(_authorizer(refused))
    return conn


#: printf conversions whose precision only cuts their argument short (costs nothing when large)
_CUTTING_CONVERSIONS = set("sqQwz")
_PRINTF_SPEC_RE = re.compile(r"%([-+ #0!,]*)(\*|\d*)(?:\.(\*|\d*))?(l{0,2})(.)", re.DOTALL)
_LEADING_INT_RE = re.compile(r"\s*([+-]?\d+)")


class _BoundedFunctions:
    """Replacements for the SQLite built-ins whose run time is not bounded by their result.

    The deadline is checked between VM instructions, so one long function call overruns it
    (and the length limit only caps what a call returns, not the work it does first). Each
    replacement does the same thing as the built-in in time linear in its inputs, raising
    OverflowError ("string or blob too big") where the built-in would build an oversized
    value. Arguments the fast paths do not cover (numbers, mixed text and blobs) are
    delegated to the built-in on a private in-memory connection, after the size checks.
    """

    def __init__(self) -> None:
        self._builtin = sqlite3.connect(":memory:", check_same_thread=False)
        self._builtin.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        self._builtin.text_factory = _lenient_text

    def install(self, conn: sqlite3.Connection) -> None:
        """Register the replacements on `conn` (they shadow the built-ins of the same name)."""
        for name in ("printf", "format"):
            conn.create_function(name, -1, self.printf, deterministic=True)
        conn.create_function("instr", 2, self.instr, deterministic=True)
        conn.create_function("replace", 3, self.replace, deterministic=True)

    def _call(self, name: str, args: tuple):
        marks = ", ".join("?" * len(args))
        return self._builtin.execute(f"SELECT {name}({marks})", args).fetchone()[0]

    def _text(self, value) -> str:
        """A value as SQLite's text (numbers formatted as SQLite does, blobs decoded leniently)."""
        if isinstance(value, str):
            return value
        return self._builtin.execute("SELECT CAST(? AS TEXT)", (value,)).fetchone()[0]

    def printf(self, *args):
        """printf(FORMAT, ...), refusing a width or precision that makes an oversized value."""
        if args and args[0] is not None:
            _check_printf_sizes(self._text(args[0]), args[1:])
        return self._call("printf", args)

    def instr(self, haystack, needle):
        """1-based position of `needle` in `haystack` (bytes for two blobs, else characters)."""
        if haystack is None or needle is None:
            return None
        if not (isinstance(haystack, bytes) and isinstance(needle, bytes)):
            haystack, needle = self._text(haystack), self._text(needle)
        return haystack.find(needle) + 1

    def replace(self, value, pattern, replacement):
        """`value` with every `pattern` replaced; the value unchanged for an empty pattern."""
        if value is None or pattern is None or replacement is None:
            return None
        text, old = self._text(value), self._text(pattern)
        if not old:
            return value
        new = self._text(replacement)
        if len(new) > len(old) and text.count(old) * (len(new) - len(old)) + len(text) > MAX_VALUE_BYTES:
            raise OverflowError("string or blob too big")
        out = text.replace(old, new)
        if len(out.encode("utf-8", "surrogatepass")) > MAX_VALUE_BYTES:
            raise OverflowError("string or blob too big")
        return out


def _check_printf_sizes(fmt: str, args: tuple) -> None:
    """Raise OverflowError when a width or precision in `fmt` exceeds MAX_VALUE_BYTES.

    Follows SQLite's argument use: each `*` takes the next argument as a number, each
    conversion but `%%` and `%n` takes one more. A precision only cuts a string conversion
    short, so it is not counted there.
    """
    i = 0
    for m in _PRINTF_SPEC_RE.finditer(fmt):
        width, precision, conversion = m.group(2), m.group(3), m.group(5)
        if conversion == "%" and not width and precision is None:
            continue
        sizes = []
        for part, counts in ((width, True), (precision, conversion not in _CUTTING_CONVERSIONS)):
            if part == "*":
                value, i = (args[i] if i < len(args) else 0), i + 1
                part = _as_int(value)
            if counts and part:
                sizes.append(abs(int(part)))
        if conversion not in "%n":
            i += 1
        if any(n > MAX_VALUE_BYTES for n in sizes):
            raise OverflowError("string or blob too big")


def _as_int(value) -> int:
    """A printf `*` argument as SQLite reads it: an integer, a float's integer part, a leading int."""
    if isinstance(value, bool) or isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return int(value) if value == value and abs(value) < 1e18 else 1 << 62
    if isinstance(value, bytes):
        value = value.decode("utf-8", "ignore")
    if isinstance(value, str):
        m = _LEADING_INT_RE.match(value)
        return int(m.group(1)) if m else 0
    return 0


def _lenient_text(b: bytes) -> str:
    # Some public databases hold text that is not valid UTF-8; Spider's test-suite
    # evaluator decodes with errors="ignore", so the same rows compare equal here.
    return b.decode("utf-8", errors="ignore")


def execute(db_path: PathLike, sql: str, timeout: float = DEFAULT_TIMEOUT,
            max_rows: int = DEFAULT_MAX_ROWS) -> ExecResult:
    """Run one query on a database opened read-only; never raises on bad SQL.

    Returns `ExecResult(rows=...)` or `ExecResult(error=...)`. See the module docstring for
    the sandbox. `timeout` (seconds) is enforced inside SQLite by a progress handler; a query
    that ends past it anyway is reported as a timeout. In this process nothing can stop a
    single slow SQLite function call; `mrtpo.verifiers.sql_pool.execute_many` (worker
    processes) bounds the wall clock too.
    """
    start = time.monotonic()
    if not isinstance(sql, str) or not sql.strip():
        return ExecResult(error="empty query: there is no SQL statement to run")
    keyword = leading_keyword(sql)
    if keyword in _WRITE_KEYWORDS:
        return ExecResult(error=f"not authorized: {keyword} statements are refused; {_ALLOWED_HINT}")
    if not Path(db_path).is_file():
        return ExecResult(error=f"unable to open database file: {db_path} does not exist")
    refused: list[str] = []
    try:
        conn = _connect(db_path, refused, timeout)
    except sqlite3.Error as exc:
        return ExecResult(error=f"{exc} ({db_path})")
    try:
        result = _run(conn, sql, refused, start, timeout, max_rows)
        if result.error and "Could not decode to UTF-8" in result.error:
            conn.text_factory = _lenient_text
            result = _run(conn, sql, refused, start, timeout, max_rows)
        return result
    finally:
        conn.close()


def _run(conn, sql, refused, start, timeout, max_rows) -> ExecResult:
    deadline = start + timeout
    conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, _PROGRESS_EVERY)
    try:
        cur = conn.execute(sql)
        columns = tuple(d[0] for d in cur.description or ())
        rows, truncated, nbytes = _fetch(cur, max_rows) if cur.description else ([], False, 0)
    except (sqlite3.Error, sqlite3.Warning) as exc:
        return ExecResult(error=_message(exc, refused, timeout, deadline),
                          seconds=time.monotonic() - start)
    except (ValueError, OverflowError, MemoryError) as exc:
        return ExecResult(error=f"{type(exc).__name__}: {exc}", seconds=time.monotonic() - start)
    seconds = time.monotonic() - start
    if seconds > timeout:  # one slow function call ran between two progress checks
        return ExecResult(error=TIMEOUT_ERROR.format(timeout=timeout), seconds=seconds)
    return ExecResult(rows=rows, columns=columns, truncated=truncated, seconds=seconds,
                      nbytes=nbytes)


def _fetch(cur: sqlite3.Cursor, max_rows: int) -> tuple[list[tuple], bool, int]:
    """Up to `max_rows` rows and MAX_RESULT_BYTES of values: (rows, truncated, bytes).

    Bytes are counted as Python objects (`sys.getsizeof` of each row and value, so a number
    or a NULL counts as well as text). Both caps keep a degenerate query (a cross join, 500
    numeric columns, `zeroblob` on every row) from filling memory; the deadline keeps it
    from running long.
    """
    rows: list[tuple] = []
    size, n = 0, 16  # n: rows per fetch, sized so one fetch cannot overshoot the byte cap much
    while True:
        chunk = cur.fetchmany(min(n, max_rows + 1 - len(rows)))
        if not chunk:
            return rows, False, size
        for r in chunk:
            size += getsizeof(r) + sum(map(getsizeof, r))
            rows.append(r)
            if len(rows) > max_rows or size > MAX_RESULT_BYTES:
                return rows[:max_rows], True, size
        per_row = size / len(rows) + 1
        n = int(max(1, min(1024, (MAX_RESULT_BYTES - size) / per_row / 4)))


def _message(exc: BaseException, refused: list[str], timeout: float, deadline: float) -> str:
    msg = str(exc)
    if "one statement at a time" in msg:
        return ("not authorized: the query holds more than one SQL statement; "
                f"{_ALLOWED_HINT}")
    if refused and ("not authorized" in msg or "authorization denied" in msg
                    or "vtable constructor failed" in msg):
        return f"not authorized: {refused[0]} is refused; {_ALLOWED_HINT}"
    if msg == "interrupted" and time.monotonic() >= deadline:
        return TIMEOUT_ERROR.format(timeout=timeout)
    return msg
