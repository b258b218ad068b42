"""Tool-calling metrics: BFCL's AST accuracy per category, overall, and BFCL's summaries.

A response is correct when the calls read from it pass BFCL v4's single-turn AST check
(`mrtpo.verifiers.toolcall.ast_check_reason`) for the example's category. Calls are read
from the task's format (JSON in `<tool_call>` tags) or, failing that, from BFCL's Python-call
text `[f(a=1)]` (what BFCL asks prompting models to write); nothing readable is a failure,
as BFCL scores an output it cannot decode.

Figures:
- per category (`groups`): correct / total in the category (BFCL's per-category accuracy);
- `ast_accuracy`: correct / total over every example (a micro-average; BFCL prints none);
- `non_live_ast` and `live_ast` (only when the data holds such categories): BFCL's summary
  columns, computed as BFCL does over the categories present. Non-live is the unweighted mean
  of simple (itself the unweighted mean of simple_python/java/javascript), multiple, parallel
  and parallel_multiple; live is the mean of live_simple, live_multiple, live_parallel and
  live_parallel_multiple weighted by their sizes. BFCL counts a category that was not run as
  0; here it is left out, so the figures equal BFCL's when every category is present.
"""
from __future__ import annotations

from typing import Sequence

from mrtpo.evaluation.report import EvalReport, mean
from mrtpo.formats import ToolCallFormat
from mrtpo.tasks.base import Example, Task
from mrtpo.verifiers.toolcall import ast_check_reason, parse_calls

OPTIONS: tuple[str, ...] = ()

NON_LIVE_SIMPLE = ("simple_python", "simple", "simple_java", "simple_javascript")
NON_LIVE_OTHERS = ("multiple", "parallel", "parallel_multiple")
LIVE = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")


def per_example(records: Sequence[dict]) -> dict[str, list[float]]:
    """`ast_accuracy` and `format` on each example (`evaluate`'s records, in order), each metric
    the mean of its list; BFCL's summaries are means over categories, not over examples, and
    have none."""
    return {"ast_accuracy": [float(r["valid"]) for r in records],
            "format": [float(r["format"]) for r in records]}


def evaluate(task: Task, examples: Sequence[Example], responses: Sequence[str]) -> EvalReport:
    fmt = getattr(task, "format", None) or ToolCallFormat()
    records = []
    for ex, response in zip(examples, responses):
        for key in ("functions", "ground_truth", "category"):
            if key not in ex.data:
                raise ValueError(f"example {ex.id!r} ({ex.source}) has no {key!r} in its data; "
                                 "toolcall evaluation needs functions, ground_truth and category")
        parsed = parse_calls(response, fmt)
        d = ex.data
        res = ast_check_reason(d["functions"], parsed.calls, d["ground_truth"], d["category"])
        records.append({
            "id": ex.id, "category": d["category"], "response": response, "calls": parsed.calls,
            "syntax": parsed.syntax, "format": parsed.strict, "valid": res.valid,
            "error": res.reason or ("" if parsed.calls else parsed.error),
            "error_type": res.error_type,
        })
    categories = list(dict.fromkeys(r["category"] for r in records))
    groups = {c: {"accuracy": mean(r["valid"] for r in records if r["category"] == c),
                  "n": sum(r["category"] == c for r in records)} for c in categories}
    metrics = {"ast_accuracy": mean(r["valid"] for r in records)}
    metrics.update(bfcl_summaries(groups))
    metrics["format"] = mean(r["format"] for r in records)
    return EvalReport("toolcall", len(records), metrics, groups, records)


def bfcl_summaries(groups: dict[str, dict[str, float]]) -> dict[str, float]:
    """BFCL's non-live (unweighted) and live (size-weighted) AST summaries over present categories."""
    out = {}
    simple = [groups[c]["accuracy"] for c in NON_LIVE_SIMPLE if c in groups]
    parts = ([sum(simple) / len(simple)] if simple else []) + \
            [groups[c]["accuracy"] for c in NON_LIVE_OTHERS if c in groups]
    if parts:
        out["non_live_ast"] = sum(parts) / len(parts)
    live = [c for c in LIVE if c in groups]
    if live:
        total = sum(groups[c]["n"] for c in live)
        out["live_ast"] = sum(groups[c]["accuracy"] * groups[c]["n"] for c in live) / total
    return out
