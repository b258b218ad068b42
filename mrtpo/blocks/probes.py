"""Responses to show blocks for: the reference, a corrupted copy of it, or the user's own.

Blocks that depend on the response (the SQLite error) only appear for a response that gets
something wrong, so without responses from the user the preview and the lint use two per
example: the task's reference answer and a corrupted copy of it. The corruption is a small,
deterministic edit that keeps the format but breaks the answer:
- a ```sql block: one table or column name is misspelt (two letters swapped), so SQLite
  answers with its own error (`no such column: ...`);
- another code block: the first identifier is misspelt the same way;
- tool calls: the first numeric argument becomes a string (a type error), or else the first
  function name gets a suffix (an unknown function);
- plain text: only the first sentence is kept, with its letter case swapped and a comma
  after its first word (so length, case, punctuation and keyword constraints fail).
A task can override this with a method `corrupt(example, response) -> str`.
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from mrtpo.formats import CodeBlockFormat, TextFormat, ToolCallFormat
from mrtpo.tasks.base import Example, Task
from mrtpo.tasks.files import lines, read_text

#: (name, response text)
Probe = tuple[str, str]


class ResponsesFileError(ValueError):
    """A --responses file that cannot be used; the message names file, row and field."""


def probes(task: Task, example: Example) -> list[Probe]:
    """The reference and a corrupted copy; an empty response when the task has no reference."""
    try:
        ref = task.reference(example)
    except Exception as exc:  # a broken reference() should not stop the preview
        ref = None
        err = f" (reference() raised {type(exc).__name__}: {exc})"
    else:
        err = ""
    if not isinstance(ref, str) or not ref.strip():
        return [("empty" + err, "")]
    bad = corrupt(task, example, ref)
    return [("reference", ref)] + ([("corrupted", bad)] if bad != ref else [])


def corrupt(task: Task, example: Example, response: str) -> str:
    """A copy of `response` in the same format with its answer broken (see module doc)."""
    custom = getattr(task, "corrupt", None)
    if callable(custom):
        return custom(example, response)
    fmt = getattr(task, "format", None)
    if fmt is None:
        return response.swapcase()
    parsed = fmt.parse(response)
    if parsed.answer is None:
        return response.swapcase()
    if isinstance(fmt, CodeBlockFormat):
        code = str(parsed.answer)
        bad = _misspell_sql(code) if fmt.language.lower() in ("sql", "sqlite") else _misspell_first(code)
        return fmt.render(bad, think=parsed.think)
    if isinstance(fmt, ToolCallFormat):
        return fmt.render(_break_calls(parsed.answer), think=parsed.think)
    if isinstance(fmt, TextFormat):
        return fmt.render(_break_text(str(parsed.answer)), think=parsed.think)
    return response.swapcase()


def _swap(word: str) -> str:
    for i in range(1, len(word) - 1):
        if word[i] != word[i + 1]:
            return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    return word + "x"


def _misspell_sql(sql: str) -> str:
    """Swap two letters of the first table/column name (not a function) of a query."""
    try:
        import sqlglot
        from sqlglot.tokens import TokenType

        toks = sqlglot.tokenize(sql, read="sqlite")
    except Exception:
        return _misspell_first(sql)
    for i, t in enumerate(toks):
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if t.token_type == TokenType.VAR and len(t.text) >= 3 and not (
                nxt is not None and nxt.token_type == TokenType.L_PAREN):
            start, end = t.start, t.end + 1
            if sql[start:end] == t.text:
                return sql[:start] + _swap(t.text) + sql[end:]
    return _misspell_first(sql)


def _misspell_first(code: str) -> str:
    m = re.search(r"[A-Za-z_]{3,}", code)
    if not m:
        return code + " ?"
    return code[:m.start()] + _swap(m.group(0)) + code[m.end():]


def _break_text(text: str) -> str:
    first = re.split(r"(?<=[.!?])\s+", text.strip(), maxsplit=1)[0]
    words = first.split(" ", 1)
    if len(words) == 2:
        first = words[0] + ", " + words[1]
    return first.swapcase()


def _break_calls(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    calls = copy.deepcopy(calls)
    for call in calls:
        for key, value in call.get("arguments", {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                call["arguments"][key] = str(value)
                return calls
    if calls:
        calls[0]["name"] = calls[0]["name"] + "_v2"
    return calls


def read_responses(path: str | Path, examples: list[Example]) -> dict[str, list[Probe]]:
    """Responses from a JSONL file, by example id.

    Each row: `{"id": <example id>, "response": <text>}` or `{"id": ..., "responses":
    [<text>, ...]}`, optionally with `"name"` (shown instead of "response 1", "response 2").
    """
    path = Path(path)
    shape = '--responses takes a JSONL file with rows {"id": <example id>, "response": <text>}'
    if not path.exists():
        raise ResponsesFileError(f"{path}: no such file; {shape}")
    known = {e.id for e in examples}
    out: dict[str, list[Probe]] = {}
    for n, line in lines(read_text(path, ResponsesFileError, "responses file (JSONL)")):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ResponsesFileError(f"{path}, row {n}: not valid JSON ({exc}); each line is "
                                     'one object {"id": ..., "response": ...}') from None
        if not isinstance(row, dict):
            raise ResponsesFileError(f"{path}, row {n}: a JSON {type(row).__name__}, not an object")
        ex_id = row.get("id", row.get("example_id"))
        if ex_id is None:
            raise ResponsesFileError(f"{path}, row {n}: field 'id' is missing; give the id of "
                                     "the example the response answers")
        ex_id = str(ex_id)
        if ex_id not in known:
            sample = ", ".join(sorted(known)[:5])
            raise ResponsesFileError(f"{path}, row {n}: field 'id' is {ex_id!r}, which is not an "
                                     f"example of the data (ids look like: {sample})")
        if "responses" in row:
            texts = row["responses"]
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                raise ResponsesFileError(f"{path}, row {n}: field 'responses' must be a list "
                                         "of strings")
        elif "response" in row:
            texts = [row["response"]]
            if not isinstance(texts[0], str):
                raise ResponsesFileError(f"{path}, row {n}: field 'response' must be a string, "
                                         f"not {type(texts[0]).__name__}")
        else:
            raise ResponsesFileError(f"{path}, row {n}: field 'response' is missing")
        got = out.setdefault(ex_id, [])
        for t in texts:
            name = str(row["name"]) if "name" in row and len(texts) == 1 else f"response {len(got) + 1}"
            got.append((name, t))
    if not out:
        raise ResponsesFileError(f"{path}: the file holds no responses (it is empty); {shape}")
    return out
