"""Machine-readable output: one convention for every command (docs/json-output.md).

`--json` prints ONE JSON object on stdout, with a `"schema"` field naming its layout and
version (`"mrtpo.tasks/1"`, `"mrtpo.blocks.lint/1"`...); `--jsonl` prints one JSON object per
line (a stream of records, for `blocks preview`). Anything else a command says (progress,
warnings, "wrote FILE", and what a task's code prints: `documents_only`) goes to stderr, so
stdout parses as it is. NaN and infinities are
written as null, and lone surrogates as their \\u escapes: the output is strict JSON in UTF-8
(`mrtpo.textio.strict_json`, which library code such as `mrtpo.credit.text_view` uses too).
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any, Iterator

#: flags that make a command print machine-readable documents on stdout
DOCUMENT_FLAGS = ("--json", "--jsonl")

_documents: list[Any] = []  # the standard output the documents go to, while `documents_only` holds


@contextlib.contextmanager
def documents_only() -> Iterator[None]:
    """While a command runs with --json or --jsonl: standard output carries its documents
    (`emit`) and nothing else. Whatever else writes to sys.stdout meanwhile (a task's code that
    prints, in this process: its factory, `rewards`, `messages`; its verifiers print in the
    runner's workers, which send stdout to stderr) goes to stderr. The CLI enters this for
    every command given one of DOCUMENT_FLAGS (mrtpo.cli), so no command does it on its own."""
    _documents.append(sys.stdout)
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = _documents.pop()


def emit(text: str) -> None:
    """Write one document (or JSON Lines record) and a newline to standard output: the real one
    while `documents_only` holds."""
    out = _documents[-1] if _documents else sys.stdout
    out.write(text + "\n")
    out.flush()



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
