"""The `text2sql` task: a question about an SQLite database, answered with one query.

P0 holds the database schema (the CREATE statements from `sqlite_master`, optionally a few
rows per table), the question, BIRD's `evidence` when a row has it, and the format
instruction of `CodeBlockFormat("sql")`. Three rewards, each with its block (Z_k):

| reward     | score                                     | block                                           |
|------------|-------------------------------------------|-------------------------------------------------|
| `format`   | 1 if the response follows the format      | P0's format sentence (in-prompt, see below)     |
| `executes` | 1 if the extracted query runs             | the response's own SQLite error, as a statement; |
|            |                                           | "" when it ran or there is no query             |
| `result`   | 1 if its result matches the gold's        | the reference query, fenced as the policy writes|

`executes` and `result` use the query extracted leniently (`Format.parse`), so a query with
stray text around its block still counts for them; only `format` is strict.

The format block follows the in-prompt rule (`Reward.in_prompt`): P0 already ends with the
format sentence, so it is not stated a second time and P_without_format is P_all with that
sentence removed from the prompt.

`demo=True` puts one worked exchange before the user turn: a question about a made-up
database that no example uses (`DEMO_SCHEMA`), and its query in the format. It shows the
format, never an answer a reward checks. SmolLM2-135M-Instruct needs it (without it, it writes
CREATE and INSERT statements and scores 0 on every reward); the demo is format information, so
P_without_format drops the exchange with the sentence (`Task.demo_reward`).

`questions` chooses the bundled question set that `load()` reads when no path is given (a
path, `--data` or `--eval-data`, is read as it is):
- `sample` (the default): questions.jsonl, 39 hand-written questions (30 `train`, 9 `dev`)
  with joins, grouping, subqueries and NULL traps.
- `single-table` (`-o questions=single-table`): single_table.jsonl, 430 easier questions that
  each read one table (counts, a column listed, a filter on a value from the rows, min/max/avg,
  distinct values, ORDER BY ... LIMIT n, a row's value looked up...), split 328 `train` /
  102 `heldout`, the heldout rows last (`mrtpo train --heldout 102` holds out exactly them,
  `mrtpo eval --split heldout` reads only them). SmolLM2-135M never gets the sample's `result`
  reward (issue 37); this set keeps the reward and makes the questions easier. Written by
  mrtpo.tasks.text2sql_single_table (its docstring lists the templates), which regenerates the
  file byte for byte.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator, Literal, Mapping, Sequence

from mrtpo.formats import CodeBlockFormat, Parsed
from mrtpo.tasks.base import Example, ProbeEdit, Reward, Task, Verdict
from mrtpo.tasks.files import UniqueIds
from mrtpo.tasks.text2sql_data import BUNDLED_QUESTIONS, DataError, SQLRow, iter_rows
from mrtpo.verifiers.sql import MODES, match_executed
from mrtpo.verifiers.sql_sandbox import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT, ExecResult, execute
from mrtpo.verifiers.lru import BoundedCache
from mrtpo.verifiers.sql_pool import execute_many

REWARD_NAMES = ("format", "executes", "result")
log = logging.getLogger(__name__)

SQLITE_ERROR = "SQLite error: "  # prefix of an `executes` verdict's feedback when the query failed
NO_QUERY = "no query to run"
_CACHE_SIZE = 4096  # results kept in the execution cache
CACHE_BYTES = 64_000_000  # bytes of results the execution cache holds
CACHE_ENTRY_BYTES = 4_000_000  # larger results are not kept
TIMEOUT_TTL_S = 60.0  # how long a timed-out query's result is reused
# the longest `timeout` a query may have: a day is more than any query needs, and the worker
# pool's hard deadline (timeout * 1.5, in milliseconds for poll) must fit in a C int
MAX_TIMEOUT_S = 86400.0
MAX_WORKERS = 64  # query processes: more only contend for the CPUs (one starts per query in flight)

#: the demonstration's made-up database and exchange (`demo=True`): no bundled database is
#: about weather, so it shows the format and nothing an example's rewards check
DEMO_SCHEMA = """CREATE TABLE station (
  station_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  city TEXT
);

CREATE TABLE reading (
  reading_id INTEGER PRIMARY KEY,
  station_id INTEGER REFERENCES station(station_id),
  day DATE,
  rain_mm REAL
);"""
DEMO_QUESTION = "How many readings from stations in Oslo recorded more than 10 mm of rain?"
DEMO_SQL = ("SELECT COUNT(*) FROM reading JOIN station ON reading.station_id = station.station_id "
            "WHERE station.city = 'Oslo' AND reading.rain_mm > 10")


class _ExecCache:
    """(db, sql) -> ExecResult, so one response's query runs once for `executes` and `result`,
    and each gold query once. Bounded by entries and by bytes (mrtpo.verifiers.lru): at most
    CACHE_BYTES in all and CACHE_ENTRY_BYTES per result. A timeout is kept for TIMEOUT_TTL_S
    only: long enough that the rewards of one response share it (a runaway query runs once),
    short enough that a deadline missed on a busy machine is retried later."""

    def __init__(self, size: int = _CACHE_SIZE) -> None:
        self._lru = BoundedCache(size, CACHE_BYTES, CACHE_ENTRY_BYTES)

    def get(self, key):
        return self._lru.get(key)

    def put(self, key, value: ExecResult) -> None:
        transient = value.timed_out or (value.error and "worker process" in value.error)
        self._lru.put(key, value, value.nbytes + len(key[1]) + 200,
                      ttl=TIMEOUT_TTL_S if transient else None)


def schema_text(db_path: str | Path, sample_rows: int = 0, timeout: float = DEFAULT_TIMEOUT) -> str:
    """The CREATE statements of a database's tables and views, in creation order, each
    followed by up to `sample_rows` of its rows in a comment. Read through the sandbox."""
    res = execute(db_path, "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
                  "AND type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' ORDER BY rowid",
                  timeout)
    if not res.ok:
        raise DataError(f"{db_path}: cannot read the schema: {res.error}")
    parts = []
    for kind, name, sql in res.rows:
        text = sql.strip().rstrip(";") + ";"
        if sample_rows > 0 and kind == "table":
            quoted = '"' + name.replace('"', '""') + '"'
            rows = execute(db_path, f"SELECT * FROM {quoted} LIMIT {int(sample_rows)}", timeout)
            if rows.ok and rows.rows:
                lines = [" | ".join(rows.columns)]
                lines += [" | ".join(_cell(v) for v in r) for r in rows.rows]
                text += (f"\n/* {len(rows.rows)} example rows from {name}:\n"
                         + "\n".join(lines) + "\n*/")
        parts.append(text)
    return "\n\n".join(parts)


def _cell(v) -> str:
    if v is None:
        return "NULL"
    s = v.hex() if isinstance(v, bytes) else str(v)
    return s if len(s) <= 60 else s[:57] + "..."


class Text2SQLTask(Task):
    """Text-to-SQL on SQLite databases (Spider, BIRD, JSONL, or the bundled sample).

    Keyword arguments:
    - `mode`: "bag" (Spider test-suite), "set" (BIRD) or "ordered"; None uses each dataset's
      own (Spider and JSONL bag, BIRD set).
    - `think`: ask for `<think>...</think>` before the SQL block (the format reward requires it).
    - `weights`: reward weights, a mapping by name or a sequence in `reward_names` order.
    - `sample_rows`: rows per table shown in the prompt after its CREATE statement (0 = none).
    - `timeout`: seconds per query; `max_rows`: rows kept per result (more is never a match).
    - `pretty`: pretty-print the reference query with sqlglot (kept only if it gives the same
      rows as the gold).
    - `check_gold`: run every gold query at load time; one that fails is a data error.
    - `db_root`: extra directory where JSONL rows' `db_id`s are looked up.
    - `workers`: processes for `score_batch` (None: `min(4, cpu_count)`; 0: in-process).
    - `demo`: one worked exchange on a made-up database before the user turn (see above).
    - `questions`: the bundled question set read without a path, "sample" or "single-table"
      (see above).
    """

    name = "text2sql"
    placement = "append"
    description = "Text-to-SQL: write one SQLite query; rewards format, executes, result."
    reward_names = REWARD_NAMES
    demo_reward = "format"  # P_without_format drops the demonstration with the sentence

    def __init__(self, mode: str | None = None, think: bool = False,
                 weights: Mapping[str, float] | Sequence[float] | None = None,
                 sample_rows: int = 0, timeout: float = DEFAULT_TIMEOUT,
                 max_rows: int = DEFAULT_MAX_ROWS, pretty: bool = False,
                 check_gold: bool = True, db_root: str | Path | None = None,
                 workers: int | None = None, demo: bool = False,
                 questions: Literal["sample", "single-table"] = "sample") -> None:
        if questions not in BUNDLED_QUESTIONS:
            raise ValueError(f"questions={questions!r}: use one of {', '.join(BUNDLED_QUESTIONS)}")
        if mode is not None and mode not in MODES:
            raise ValueError(f"mode={mode!r}: use one of {', '.join(MODES)}, or None for the dataset's own")
        if not isinstance(sample_rows, int) or sample_rows < 0:
            raise ValueError(f"sample_rows={sample_rows!r}: give a whole number >= 0")
        if not 0 < timeout <= MAX_TIMEOUT_S:
            raise ValueError(f"timeout={timeout!r}: give a positive number of seconds, at most "
                             f"{MAX_TIMEOUT_S:g} (a day)")
        if not isinstance(max_rows, int) or max_rows < 1:
            raise ValueError(f"max_rows={max_rows!r}: give a whole number >= 1")
        if workers is not None and not (isinstance(workers, int) and 0 <= workers <= MAX_WORKERS):
            raise ValueError(f"workers={workers!r}: give a whole number from 0 (in this process) to "
                             f"{MAX_WORKERS}, or none for min(4, CPUs)")
        self.mode = mode
        self.format = CodeBlockFormat("sql", think=think)
        self.weights = _weights(weights)
        self.sample_rows = sample_rows
        self.timeout = float(timeout)
        self.max_rows = max_rows
        self.pretty = pretty
        self.check_gold = check_gold
        self.db_root = db_root
        self.workers = workers
        self.demo = demo
        self.questions = questions
        self._cache = _ExecCache()
        self._schemas: dict[str, str] = {}
        self._pretty: dict[tuple[str, str], str] = {}
        w = self.weights
        self._rewards = [
            Reward("format", self._verify_format, self._format_block, w["format"], in_prompt=True),
            Reward("executes", self._verify_executes, self._executes_block, w["executes"],
                   response_dependent=True),
            Reward("result", self._verify_result, self._result_block, w["result"]),
        ]

    # --- data ------------------------------------------------------------------------------
    def iter_examples(self, path: str | Path | None = None, split: str | None = None) -> Iterator[Example]:
        """Examples from the bundled question set `questions` (path None), a Spider or BIRD
        directory or JSON file, or a JSONL file, one at a time (`load` is their list). Gold
        queries in another dialect are transpiled to SQLite."""
        ids = UniqueIds(lambda: ((r.id, r.source) for r in iter_rows(path, split, self.db_root, self.questions)))
        for row in iter_rows(path, split, self.db_root, self.questions):
            first = ids.earlier(row.id, row.source)
            if first is not None:
                raise DataError(f"{row.source}, field 'id': {row.id!r} is already the id of "
                                f"{first}; give each row its own id")
            yield self._example(row)

    def _example(self, row: SQLRow) -> Example:
        gold = _to_sqlite(row)
        if self.check_gold:
            res = self._run(str(row.db_path), gold)
            shown = f"{gold!r}" + (f" (transpiled from {row.dialect}: {row.gold!r})" if gold != row.gold else "")
            if not res.ok:
                raise DataError(f"{row.source}, field 'query': the gold query {shown} does not run "
                                f"on {row.db_path}: {res.error}. Fix or drop the row "
                                "(or load with check_gold=False).")
            if res.truncated:
                raise DataError(f"{row.source}, field 'query': the gold query returns more than "
                                f"max_rows={self.max_rows} rows; raise max_rows or drop the row.")
        key = str(row.db_path)
        if key not in self._schemas:
            wal = Path(key + "-wal")
            if wal.is_file() and wal.stat().st_size > 0:
                log.warning("%s: %s holds changes not yet checkpointed into the database; queries "
                            "read the database file as it is (opened immutable, so no file is "
                            "created beside it). Checkpoint it first: sqlite3 %s "
                            "'PRAGMA wal_checkpoint(TRUNCATE)'", row.source, wal, key)
            try:
                self._schemas[key] = schema_text(row.db_path, self.sample_rows, self.timeout)
            except DataError as exc:
                raise DataError(f"{row.source}, field 'db_id': {exc}") from exc
        return Example(
            id=row.id, prompt=self._prompt(self._schemas[key], row.question, row.evidence), source=row.source,
            data={"question": row.question, "db_id": row.db_id, "db_path": key, "gold": gold,
                  "gold_original": row.gold, "dialect": row.dialect, "evidence": row.evidence,
                  "mode": row.mode})

    def _prompt(self, schema: str, question: str, evidence: str | None = None) -> str:
        """P0's user turn: the task, the schema, the question, the evidence, the format sentence."""
        parts = ["Write an SQLite query that answers the question about this database.",
                 "Database schema:\n" + schema, "Question: " + question]
        if evidence:
            parts.append("Evidence: " + evidence)
        parts.append(self.format.instruction)
        return "\n\n".join(parts)

    def demo_messages(self) -> list[dict[str, str]]:
        """The demonstration exchange (user, assistant), or [] without `demo`."""
        if not self.demo:
            return []
        return [{"role": "user", "content": self._prompt(DEMO_SCHEMA, DEMO_QUESTION)},
                {"role": "assistant", "content": self.format.render(DEMO_SQL)}]

    # --- rewards ---------------------------------------------------------------------------
    def rewards(self, example: Example) -> list[Reward]:
        return list(self._rewards)

    def reference(self, example: Example) -> str:
        return self.format.render(self._reference_sql(example))

    def probe_edits(self, example: Example) -> list[ProbeEdit]:
        """Targeted edits of the reference for the credit probe (see mrtpo.tasks.probe_edits)."""
        from mrtpo.tasks.probe_edits import text2sql_edits

        return text2sql_edits(self, example)

    def score_batch(self, pairs: Sequence[tuple[Example, str]]) -> list[list[Verdict]]:
        """Verdicts for many (example, response) pairs, the queries run in parallel worker
        processes (see mrtpo.verifiers.sql_pool); same verdicts as `score` one by one."""
        parsed = [self.format.parse(resp) for _, resp in pairs]
        keys = {(ex.data["db_path"], ex.data["gold"]) for ex, _ in pairs}
        keys |= {(ex.data["db_path"], p.answer) for (ex, _), p in zip(pairs, parsed) if p.answer}
        known = {k: self._cache.get(k) for k in keys}
        todo = sorted(k for k, v in known.items() if v is None)
        for k, res in zip(todo, execute_many(todo, self.timeout, self.max_rows, self.workers)):
            known[k] = res
            self._cache.put(k, res)
        out = []
        for (ex, _), p in zip(pairs, parsed):
            db = ex.data["db_path"]
            gold = known[(db, ex.data["gold"])]
            pred = known[(db, p.answer)] if p.answer else None
            out.append([self._format_verdict(p), self._executes_verdict(p, pred),
                        self._result_verdict(ex, p, pred, gold)])
        return out

    def score(self, example: Example, response: str) -> list[Verdict]:
        """All three verdicts from one execution of the response's query (see score_batch)."""
        return self.score_batch([(example, response)])[0]

    def _run(self, db: str, sql: str) -> ExecResult:
        """One query, cached; run in a worker process (workers=0: in this one), so a query
        stuck inside one SQLite function call is stopped by the pool's hard deadline."""
        key = (db, sql)
        res = self._cache.get(key)
        if res is None:
            res = execute_many([key], self.timeout, self.max_rows, self.workers)[0]
            self._cache.put(key, res)
        return res

    def _mode(self, example: Example) -> str:
        return self.mode or example.data.get("mode", "bag")

    def _verify_format(self, example: Example, response: str) -> Verdict:
        return self._format_verdict(self.format.parse(response))

    def _verify_executes(self, example: Example, response: str) -> Verdict:
        p = self.format.parse(response)
        pred = self._run(example.data["db_path"], p.answer) if p.answer else None
        return self._executes_verdict(p, pred)

    def _verify_result(self, example: Example, response: str) -> Verdict:
        p = self.format.parse(response)
        db = example.data["db_path"]
        pred = self._run(db, p.answer) if p.answer else None
        return self._result_verdict(example, p, pred, self._run(db, example.data["gold"]))

    @staticmethod
    def _format_verdict(p: Parsed) -> Verdict:
        return Verdict(1.0) if p.strict else Verdict(0.0, p.error)

    @staticmethod
    def _executes_verdict(p: Parsed, pred: ExecResult | None) -> Verdict:
        if pred is None:
            return Verdict(0.0, f"{NO_QUERY}: {p.error}")
        if not pred.ok:
            return Verdict(0.0, SQLITE_ERROR + pred.error)
        n = len(pred.rows)
        if pred.truncated:
            return Verdict(1.0, f"the query ran; its result was cut at {n} rows (over the row or size cap)")
        return Verdict(1.0, f"the query ran and returned {n} row{'s' if n != 1 else ''}")

    def _result_verdict(self, example: Example, p: Parsed, pred: ExecResult | None,
                        gold: ExecResult) -> Verdict:
        if pred is None:
            return Verdict(0.0, f"no query to compare: {p.error}")
        if not pred.ok:
            return Verdict(0.0, "the query did not run, so there is no result to compare")
        ok, why = match_executed(pred, gold, example.data["gold"], self._mode(example))
        return Verdict(1.0, "the result matches the reference") if ok else Verdict(0.0, why)

    # --- blocks ----------------------------------------------------------------------------
    def _format_block(self, example: Example, verdict: Verdict) -> str:
        """P0's format sentence, which ends the prompt: the in-prompt rule (P_without_format
        removes it from the prompt; appending the rule again would repeat what P0 says)."""
        return self.format.instruction

    @staticmethod
    def _executes_block(example: Example, verdict: Verdict) -> str:
        if verdict.score >= 1 or not verdict.feedback.startswith(SQLITE_ERROR):
            return ""
        error = verdict.feedback[len(SQLITE_ERROR):]
        return f"The query in the response fails on this database with the SQLite error: {error}"

    def _result_block(self, example: Example, verdict: Verdict) -> str:
        # Only the fenced query: the block is an answer in the policy's own form (it parses
        # strictly with the task's format and scores 1 on `result`).
        return self.format.render_body(self._reference_sql(example))

    def _reference_sql(self, example: Example) -> str:
        gold = example.data["gold"]
        if not self.pretty:
            return gold
        key = (example.data["db_path"], gold)
        if key not in self._pretty:
            self._pretty[key] = _pretty_if_same(key[0], gold, self._run)
        return self._pretty[key]


def _weights(weights) -> dict[str, float]:
    if weights is None:
        return {n: 1.0 for n in REWARD_NAMES}
    if isinstance(weights, Mapping):
        unknown = set(weights) - set(REWARD_NAMES)
        if unknown:
            raise ValueError(f"weights: unknown reward(s) {sorted(unknown)}; the rewards are "
                             f"{', '.join(REWARD_NAMES)}")
        given = {n: weights.get(n, 1.0) for n in REWARD_NAMES}
    else:
        ws = list(weights)
        if len(ws) != len(REWARD_NAMES):
            raise ValueError(f"weights: expected {len(REWARD_NAMES)} numbers for "
                             f"{', '.join(REWARD_NAMES)}, got {len(ws)}")
        given = dict(zip(REWARD_NAMES, ws))
    from mrtpo.tasks.base import reward_weight_problem
    from mrtpo.textio import brief

    for k, v in given.items():  # checked as given (float(true) would be a weight of 1), but
        if isinstance(v, str):  # YAML 1.1 reads -o weights={result: 1e3} as the text '1e3'
            try:
                given[k] = v = float(v)
            except ValueError:
                pass
        problem = reward_weight_problem(v)
        if problem:
            raise ValueError(f"weights: {k}={brief(v, 60)}: {problem}")
    return {k: float(v) for k, v in given.items()}


def _to_sqlite(row: SQLRow) -> str:
    """The gold query in SQLite: as written, or transpiled with sqlglot from `row.dialect`."""
    if row.dialect == "sqlite":
        return row.gold
    import sqlglot

    try:
        out = sqlglot.transpile(row.gold, read=row.dialect, write="sqlite")
    except Exception as exc:  # ParseError, or an unknown dialect name (ValueError)
        raise DataError(f"{row.source}, field 'query': cannot transpile the gold query from "
                        f"{row.dialect!r} to SQLite: {exc}") from exc
    if len(out) != 1:
        raise DataError(f"{row.source}, field 'query': expected one statement, found {len(out)}")
    return out[0]


def _pretty_if_same(db: str, gold: str, run) -> str:
    """sqlglot's pretty-printed form of `gold`, or `gold` itself if the printed form does not
    give exactly the same rows (reformatting must never change the reference's meaning)."""
    import sqlglot

    try:
        printed = sqlglot.transpile(gold, read="sqlite", write="sqlite", pretty=True)[0]
    except Exception:
        return gold
    a, b = run(db, gold), run(db, printed)
    if a.ok and b.ok and a.rows == b.rows and not a.truncated:
        return printed
    return gold
