"""Text-to-SQL verification: sandboxed read-only SQLite execution and execution-match modes.

`execute` runs one model-written query and never raises: a bad query comes back as an
`ExecResult` whose `.error` is SQLite's own message or a refusal that names what was refused.
The sandbox (read-only, an authorizer, a deadline, row, value and result caps) is
`mrtpo.verifiers.sql_sandbox`, where its limits and `execute` are imported from.

`exec_match` compares a prediction with the gold query on one database in one of three
modes (see `compare_results`); `verify_batch` does it for many pairs in parallel worker
processes (mrtpo/verifiers/sql_pool.py), where a hung or crashing query costs only its own
score.
"""
from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass
from typing import Literal, Sequence

from mrtpo.verifiers.sql_pool import execute_many
from mrtpo.verifiers.sql_sandbox import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT, ExecResult, PathLike, execute

Mode = Literal["bag", "set", "ordered"]
MODES: tuple[str, ...] = ("bag", "set", "ordered")
_MAX_PERMUTATIONS = 100_000  # column permutations tried by the bag comparison


# --- comparing results ---------------------------------------------------------------------

_ORDER_BY_RE = re.compile(r"\border\s+by\b", re.IGNORECASE)


@functools.lru_cache(maxsize=4096)
def has_top_level_order_by(sql: str) -> bool:
    """True when the outermost query sorts its rows (so row order is part of the answer).

    Spider's test-suite uses `'order by' in gold.lower()`, which also fires on an ORDER BY
    inside a subquery; here the outermost statement decides (sqlglot), falling back to that
    substring rule when sqlglot cannot parse the query.
    """
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except Exception:
        return bool(_ORDER_BY_RE.search(sql))
    while isinstance(tree, (exp.Subquery, exp.Paren)):
        tree = tree.this
    return tree is not None and tree.args.get("order") is not None


def compare_results(pred: Sequence[tuple], gold: Sequence[tuple], mode: Mode = "bag",
                    order_matters: bool = False) -> tuple[bool, str]:
    """(equal, why not) for two row lists under `mode`.

    - `bag` (Spider test-suite `result_eq`): same number of rows; rows compared as a
      multiset, or as a list when `order_matters` (the gold has ORDER BY); the prediction's
      columns may be in any order (every column permutation is tried).
    - `set` (BIRD `calculate_ex`): `set(pred) == set(gold)`; duplicates and row order are
      ignored, column order counts.
    - `ordered`: the exact list of rows, order and duplicates included.

    Where they disagree (gold `SELECT name, age FROM t ORDER BY age`):
    | prediction                              | bag | set | ordered |
    | `SELECT age, name ... ORDER BY age`     |  1  |  0  |    0    |
    | `SELECT name, age ... ORDER BY age DESC`|  0  |  1  |    0    |
    and for gold `SELECT DISTINCT country FROM t`, a prediction without DISTINCT that repeats
    a country scores bag 0, set 1, ordered 0. DISTINCT is kept in both queries (the
    test-suite's `--keep_distinct`).
    """
    if mode not in MODES:
        raise ValueError(f"unknown comparison mode {mode!r}; use one of {', '.join(MODES)}")
    pred, gold = list(pred), list(gold)
    if mode == "set":
        ok = set(pred) == set(gold)
        return ok, "" if ok else _diff_reason(pred, gold, "distinct rows")
    if mode == "ordered":
        if pred == gold:
            return True, ""
        if Counter(pred) == Counter(gold):
            return False, "the same rows in a different order"
        return False, _diff_reason(pred, gold, "rows")
    # bag
    if len(pred) != len(gold):
        return False, f"{_n(len(pred), 'row')}, the reference has {len(gold)}"
    if not gold:
        return True, ""
    if len(pred[0]) != len(gold[0]):
        return False, f"{_n(len(pred[0]), 'column')}, the reference has {len(gold[0])}"
    return _match_permuted(pred, gold, order_matters)


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _diff_reason(pred: list, gold: list, what: str) -> str:
    if what == "distinct rows":
        a, b = len(set(pred)), len(set(gold))
    else:
        a, b = len(pred), len(gold)
    if a != b:
        return f"{_n(a, what[:-1])}, the reference has {b}"
    if pred and gold and len(pred[0]) != len(gold[0]):
        return f"{_n(len(pred[0]), 'column')}, the reference has {len(gold[0])}"
    return f"different {what} from the reference"


def _match_permuted(pred: list[tuple], gold: list[tuple], order_matters: bool) -> tuple[bool, str]:
    ncol = len(gold[0])
    pred_cols = [tuple(r[i] for r in pred) for i in range(ncol)]
    gold_cols = [tuple(r[j] for r in gold) for j in range(ncol)]
    # A prediction column can stand for a gold column only if it holds the same multiset of
    # values (a necessary condition in both bag and ordered comparison).
    pred_bags = [Counter(c) for c in pred_cols]
    candidates = []
    for j in range(ncol):
        gb = Counter(gold_cols[j])
        cand = [i for i in range(ncol) if pred_bags[i] == gb]
        if not cand:
            return False, f"no column of the result holds the values of the reference's column {j + 1}"
        candidates.append(cand)
    target = gold if order_matters else Counter(gold)
    tried = 0
    perm: list[int] = []
    used: set[int] = set()
    rows_equal_unordered = False

    def search(j: int) -> bool:
        nonlocal tried, rows_equal_unordered
        if j == ncol:
            tried += 1
            rows = [tuple(r[i] for i in perm) for r in pred]
            if order_matters:
                if rows == target:
                    return True
                rows_equal_unordered = rows_equal_unordered or Counter(rows) == Counter(gold)
                return False
            return Counter(rows) == target
        tried_here = set()  # columns with identical contents give the same rows: try one
        for i in candidates[j]:
            if i in used or pred_cols[i] in tried_here or tried >= _MAX_PERMUTATIONS:
                continue
            tried_here.add(pred_cols[i])
            used.add(i)
            perm.append(i)
            if search(j + 1):
                return True
            perm.pop()
            used.discard(i)
        return False

    try:
        if search(0):
            return True, ""
    except RecursionError:  # thousands of columns: no sensible answer has that many
        return False, f"too many columns ({ncol}) to compare"
    if tried >= _MAX_PERMUTATIONS:
        return False, f"gave up after {_MAX_PERMUTATIONS} column permutations"
    if rows_equal_unordered:
        return False, "the same rows in a different order (the reference has ORDER BY)"
    return False, "different rows from the reference"


def exec_match(pred_sql: str, gold_sql: str, db_path: PathLike, mode: Mode = "bag",
               timeout: float = DEFAULT_TIMEOUT, max_rows: int = DEFAULT_MAX_ROWS) -> bool:
    """True when `pred_sql` runs and its result equals `gold_sql`'s under `mode`."""
    return match_executed(execute(db_path, pred_sql, timeout, max_rows),
                          execute(db_path, gold_sql, timeout, max_rows), gold_sql, mode)[0]


def match_executed(pred: ExecResult, gold: ExecResult, gold_sql: str,
                   mode: Mode = "bag") -> tuple[bool, str]:
    """(equal, why not) for two executed queries; errors and truncated results never match."""
    if not gold.ok:
        return False, f"the reference query failed: {gold.error}"
    if gold.truncated:
        return False, "the reference result is over the row cap and cannot be compared"
    if not pred.ok:
        return False, f"the query failed: {pred.error}"
    if pred.truncated:
        return False, "the result has more rows than the row cap"
    order = mode == "bag" and has_top_level_order_by(gold_sql)
    return compare_results(pred.rows, gold.rows, mode, order)


# --- batches --------------------------------------------------------------------------------

@dataclass(frozen=True)
class SQLCheck:
    """One prediction checked against its gold query by `verify_batch`.

    `executes`: the prediction ran (no error; a result over the row cap still ran).
    `match`: its result equals the gold's under the mode. `error`: why it did not run ("" if it
    ran or there was no prediction). `reason`: why the results differ ("" if they match).
    """

    executes: bool
    match: bool
    error: str
    reason: str
    pred: ExecResult | None
    gold: ExecResult


def verify_batch(jobs: Sequence[tuple], mode: Mode = "bag", *, timeout: float = DEFAULT_TIMEOUT,
                 max_rows: int = DEFAULT_MAX_ROWS, workers: int | None = None) -> list[SQLCheck]:
    """Check many predictions in parallel worker processes, each query under its own deadline.

    `jobs`: `(pred_sql, gold_sql, db_path)` or `(pred_sql, gold_sql, db_path, mode)` tuples;
    `pred_sql=None` means the response held no query (it scores executes=False, match=False).
    Distinct (db, query) pairs run once. `workers=None` uses a shared pool of
    `min(4, cpu_count)` processes (started on first use, kept for later calls); `workers=0`
    runs in this process (no crash isolation). A query that hangs past `timeout` plus a
    grace period, or crashes its worker, gets an error and costs only its own job.
    """
    norm = []
    for k, job in enumerate(jobs):
        if len(job) not in (3, 4):
            raise ValueError(f"job {k}: expected (pred_sql, gold_sql, db_path[, mode]), got {job!r}")
        pred, gold, db = job[0], job[1], str(job[2])
        m = job[3] if len(job) == 4 else mode
        if m not in MODES:
            raise ValueError(f"job {k}: unknown comparison mode {m!r}; use one of {', '.join(MODES)}")
        norm.append((pred, gold, db, m))
    keys = sorted({(db, gold) for _, gold, db, _ in norm}
                  | {(db, pred) for pred, _, db, _ in norm if pred is not None})
    results = dict(zip(keys, execute_many(keys, timeout=timeout, max_rows=max_rows,
                                          workers=workers)))
    out = []
    for pred, gold, db, m in norm:
        g = results[(db, gold)]
        if pred is None:
            out.append(SQLCheck(False, False, "", "there is no query", None, g))
            continue
        p = results[(db, pred)]
        ok, why = match_executed(p, g, gold, m)
        out.append(SQLCheck(p.ok, ok, p.error or "", why, p, g))
    return out
