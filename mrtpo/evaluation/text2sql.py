"""Text-to-SQL metrics: execution accuracy and the share of predicted queries that execute.

Execution accuracy is the share of examples whose predicted query gives the gold query's
result under the comparison mode: `bag` (Spider's test-suite metric: rows as a multiset,
ordered when the gold has ORDER BY, columns may be permuted), `set` (BIRD's `calculate_ex`:
`set(rows)`, column order kept) or `ordered`. The mode is `--mode` when given, else the
task's, else each dataset row's own (Spider and JSONL bag, BIRD set). Comparison and the
sandboxed execution are `mrtpo.verifiers.sql.verify_batch`'s, run in parallel processes with
a deadline per query.

The prediction is the query in the response's ```sql block (the task's format, parsed
leniently: text around the block is tolerated); a response with no code block is taken as
the query itself, after any `<think>` block, which is how the official evaluators read
prediction files (one raw query per line). `format` reports the share that follows the
task's format strictly, for comparison with the training reward.
"""
from __future__ import annotations

from typing import Sequence

from mrtpo.evaluation.report import EvalReport, mean
from mrtpo.formats import CodeBlockFormat, Format, split_think
from mrtpo.tasks.base import Example, Task
from mrtpo.verifiers.sql import MODES, verify_batch
from mrtpo.verifiers.sql_sandbox import DEFAULT_TIMEOUT

OPTIONS = ("mode", "timeout", "workers")


def per_example(records: Sequence[dict]) -> dict[str, list[float]]:
    """Each metric's value on each example (`evaluate`'s records, in order): every metric here
    is the mean of its list."""
    return {"execution_accuracy": [float(r["match"]) for r in records],
            "executes": [float(r["executes"]) for r in records],
            "format": [float(r["format"]) for r in records]}


def extract_sql(fmt: Format, response: str) -> tuple[str | None, bool]:
    """(the predicted query or None, whether the response follows `fmt` strictly)."""
    parsed = fmt.parse(response)
    if isinstance(parsed.answer, str) and parsed.answer.strip():
        return parsed.answer.strip(), parsed.strict
    if not isinstance(response, str):
        return None, False
    body = split_think(response)[1].strip()
    return (body or None), False


def evaluate(task: Task, examples: Sequence[Example], responses: Sequence[str], mode: str | None = None,
             timeout: float | None = None, workers: int | None = None) -> EvalReport:
    if mode is not None and mode not in MODES:
        raise ValueError(f"unknown comparison mode {mode!r}; use one of {', '.join(MODES)}")
    fmt = getattr(task, "format", None) or CodeBlockFormat("sql")
    timeout = timeout or getattr(task, "timeout", DEFAULT_TIMEOUT)
    jobs, preds, modes = [], [], []
    for ex in examples:
        for key in ("gold", "db_path"):
            if key not in ex.data:
                raise ValueError(f"example {ex.id!r} ({ex.source}) has no {key!r} in its data; "
                                 "text2sql evaluation needs the gold query and the database path")
    for ex, response in zip(examples, responses):
        sql, strict = extract_sql(fmt, response)
        m = mode or getattr(task, "mode", None) or ex.data.get("mode") or "bag"
        preds.append((sql, strict))
        modes.append(m)
        jobs.append((sql, ex.data["gold"], ex.data["db_path"], m))
    checks = verify_batch(jobs, timeout=timeout, workers=workers)
    records = []
    for ex, response, (sql, strict), m, c in zip(examples, responses, preds, modes, checks):
        if not c.gold.ok:  # the loader checks golds; a gold failing now is a data/db problem
            raise ValueError(f"example {ex.id!r} ({ex.source}): the gold query fails on "
                             f"{ex.data['db_path']}: {c.gold.error}")
        records.append({
            "id": ex.id, "db_id": ex.data.get("db_id"), "question": ex.data.get("question"),
            "response": response, "sql": sql, "gold": ex.data["gold"], "mode": m,
            "format": strict, "executes": c.executes, "match": c.match,
            "error": c.error, "reason": c.reason,
        })
    metrics = {
        "execution_accuracy": mean(r["match"] for r in records),
        "executes": mean(r["executes"] for r in records),
        "format": mean(r["format"] for r in records),
    }
    used = sorted(set(modes))
    groups = {}
    if len(used) > 1:  # a mix of datasets: show each mode's accuracy
        groups = {f"mode={m}": {"execution_accuracy": mean(r["match"] for r in records if r["mode"] == m),
                                "n": sum(r["mode"] == m for r in records)} for m in used}
    return EvalReport("text2sql", len(records), metrics, groups, records,
                      settings={"mode": used[0] if len(used) == 1 else "per row", "timeout": timeout})
