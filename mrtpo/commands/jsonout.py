"""Machine-readable output: one convention for every command (docs/json-output.md).

`--json` prints ONE JSON object on stdout, with a `"schema"` field naming its layout and
version (`"mrtpo.tasks/1"`, `"mrtpo.blocks.lint/1"`...); `--jsonl` prints one JSON object per
line (a stream of records, for `blocks preview`). Anything else a command says (progress,
warnings, "wrote FILE") goes to stderr, so stdout parses as it is. NaN and infinities are
written as null, and lone surrogates as their \\u escapes: the output is strict JSON in UTF-8
(`mrtpo.textio.strict_json`, which library code such as `mrtpo.credit.text_view` uses too).
"""
from __future__ import annotations

from typing import Any



def tasks_document(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """`mrtpo tasks ls --json`: {"schema": "mrtpo.tasks/1", "tasks": [{"name", "origin",
    "rewards": [str], "error": str | null}]}."""
    return {"schema": "mrtpo.tasks/1", "tasks": rows}


def lint_document(report, task: str) -> dict[str, Any]:
    """`mrtpo blocks lint --json`: {"schema": "mrtpo.blocks.lint/1", "task", "examples", "responses",
    "blocks", "clean": bool, "rules": {rule: {"title", "findings": int}}, "findings": [{"rule",
    "check", "message", "excerpt", "example", "reward", "response"}], "unlisted": int, "cut":
    [str]}: `rules` counts every finding, `findings` lists the first MAX_LISTED_FINDINGS
    (`unlisted`: how many more), and `cut` says what else the report left out."""
    from mrtpo.blocks.rules import RULES

    rules = dict.fromkeys(RULES, 0) | dict(report.per_rule)
    return {"schema": "mrtpo.blocks.lint/1", "task": task, "examples": report.examples,
            "responses": report.responses, "blocks": report.blocks, "clean": not report.total,
            "rules": {rule: {"title": RULES.get(rule, ""), "findings": n} for rule, n in rules.items()},
            "findings": [f.to_dict() for f in report.findings], "unlisted": report.unlisted,
            "cut": report.cut()}


def preview_document(records: list[dict[str, Any]], task: str) -> dict[str, Any]:
    """`mrtpo blocks preview --json`: {"schema": "mrtpo.blocks.preview/1", "task", "records": [one
    preview record per (example, response), as `--jsonl` prints them one per line]}."""
    return {"schema": "mrtpo.blocks.preview/1", "task": task, "records": records}
