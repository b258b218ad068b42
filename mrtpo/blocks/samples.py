"""The sample responses the preview and the lint show blocks for: the reference, a corrupted
copy of it, or the user's own.

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
  after its first word (so length, case, punctuation and keyword constraints fail);
- any other format (a `DelimitedFormat` such as `\\boxed{}`, a custom `Format`): the answer
  `format.parse` finds is broken in place and written back with `format.render`, so the
  format still holds and only the answer is wrong: its first number changes (12 -> 13,
  0.5 -> 0.6), or else two letters of its first word swap (Paris -> Prais); a list or dict
  answer has its first such value broken.
A task overrides this with `Task.corrupt(example, response)`, returning the text to show (or
None for this default).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Container, Iterable

from mrtpo.edits import first_sql_name, misspell_first_word, respell, sentences, swap_letters, unknown_function
from mrtpo.formats import CodeBlockFormat, TextFormat, ToolCallFormat
from mrtpo.tasks.base import Example, Task
from mrtpo.tasks import runner
from mrtpo.tasks.contract import USER_CODE_ERRORS
from mrtpo.tasks.files import read_records

#: (name, response text)
NamedResponse = tuple[str, str]


class ResponsesFileError(ValueError):
    """A --responses file that cannot be used; the message names file, row and field."""


def sample_responses(task: Task, example: Example) -> list[NamedResponse]:
    """The reference and a corrupted copy; an empty response when the task has no reference."""
    try:
        ref = runner.reference(task, example)
    except USER_CODE_ERRORS as exc:  # a broken reference() should not stop the preview
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
        own = custom(example, response)
        if own is not None:
            return own
    fmt = getattr(task, "format", None)
    if fmt is None:
        return response.swapcase()
    parsed = fmt.parse(response)
    if parsed.answer is None:
        return response.swapcase()
    if isinstance(fmt, CodeBlockFormat):
        code = str(parsed.answer)
        bad = _misspell_sql(code) if fmt.language.lower() in ("sql", "sqlite") else misspell_first_word(code)
        return fmt.render(bad, think=parsed.think)
    if isinstance(fmt, ToolCallFormat):
        return fmt.render(_break_calls(parsed.answer), think=parsed.think)
    if isinstance(fmt, TextFormat):
        return fmt.render(_break_text(str(parsed.answer)), think=parsed.think)
    return _break_in_format(fmt, response, parsed)


def _break_in_format(fmt, response: str, parsed) -> str:
    """The answer broken (`break_answer`) and written back in place: the text around the
    answer (the working before `\\boxed{}`) is kept when the answer appears in it once; else
    the broken answer is rendered alone."""
    bad = break_answer(parsed.answer)
    if bad == parsed.answer:
        return response.swapcase()
    try:
        old_body, new_body = fmt.render_body(parsed.answer), fmt.render_body(bad)
        if old_body and response.count(old_body) == 1:
            return response.replace(old_body, new_body)
        return fmt.render(bad, think=parsed.think)
    except USER_CODE_ERRORS:  # a format that cannot render the broken answer
        return response.swapcase()


def break_answer(answer: Any) -> Any:
    """A wrong answer of the same shape: the first number changed, else two letters of the
    first word swapped; in a list or dict, the first value that can be broken."""
    if isinstance(answer, bool):
        return not answer
    if isinstance(answer, int):
        return answer + 1
    if isinstance(answer, float):
        return answer + 1.0
    if isinstance(answer, str):
        m = re.search(r"\d+(?:\.\d+)?", answer)
        if m:
            return answer[:m.start()] + _bump(m.group(0)) + answer[m.end():]
        return misspell_first_word(answer) if re.search(r"[A-Za-z_]{3,}", answer) else answer + "?"
    if isinstance(answer, (list, tuple)):
        items = list(answer)
        for i, v in enumerate(items):
            b = break_answer(v)
            if b != v:
                items[i] = b
                return type(answer)(items) if isinstance(answer, tuple) else items
        return answer
    if isinstance(answer, dict):
        out = dict(answer)
        for k, v in out.items():
            b = break_answer(v)
            if b != v:
                out[k] = b
                return out
    return answer


def _bump(number: str) -> str:
    """The number with its last digit raised by one (9 wraps to 0): 12 -> 13, 0.5 -> 0.6."""
    last = number[-1]
    return number[:-1] + str((int(last) + 1) % 10)


def _misspell_sql(sql: str) -> str:
    """Swap two letters of the first table/column name (not a function) of a query."""
    span = first_sql_name(sql)
    return respell(sql, span, swap_letters) if span else misspell_first_word(sql)


def _break_text(text: str) -> str:
    first = (sentences(text.strip()) or [""])[0]
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
        calls[0]["name"] = unknown_function(calls[0]["name"])
    return calls


def read_responses(path: str | Path, examples: Iterable[Example] | None = None
                   ) -> dict[str, list[NamedResponse]]:
    """Responses from a JSONL file (read by `mrtpo.tasks.files.read_records`), by example id.

    Each row: `{"id": <example id>, "response": <text>}` or `{"id": ..., "responses":
    [<text>, ...]}`, optionally with `"name"` (shown instead of "response 1", "response 2").
    With `examples`, an id that is none of theirs is refused, naming its row.
    """
    known = None if examples is None else {e.id for e in examples}
    return ResponsesFile.read(path, known).by_id


@dataclass
class ResponsesFile:
    """A --responses file read and checked row by row: the responses by example id, and the
    row that first named each id (for `check_ids`, which a streaming reader of the examples
    calls once it has seen them all)."""

    path: Path
    by_id: dict[str, list[NamedResponse]]
    row_of: dict[str, int]

    @classmethod
    def read(cls, path: str | Path, known: Collection[str] | None = None) -> "ResponsesFile":
        """The file's responses; an id not in `known` (when given) is refused at its row."""
        path = Path(path)
        shape = '--responses takes a JSONL file with rows {"id": <example id>, "response": <text>}'
        if not path.exists():
            raise ResponsesFileError(f"{path}: no such file; {shape}")
        out: dict[str, list[NamedResponse]] = {}
        row_of: dict[str, int] = {}
        records = read_records(path, ResponsesFileError, where="row",
                               hint='; each line is one object {"id": ..., "response": ...}')
        for n, row in records:
            if not isinstance(row, dict):
                raise ResponsesFileError(f"{path}, row {n}: a JSON {type(row).__name__}, not an object")
            ex_id = row.get("id", row.get("example_id"))
            if ex_id is None:
                raise ResponsesFileError(f"{path}, row {n}: field 'id' is missing; give the id of "
                                         "the example the response answers")
            ex_id = str(ex_id)
            if known is not None and ex_id not in known:
                raise ResponsesFileError(_unknown_id(path, n, ex_id, sorted(known)[:5]))
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
            row_of.setdefault(ex_id, n)
            got = out.setdefault(ex_id, [])
            for t in texts:
                name = str(row["name"]) if "name" in row and len(texts) == 1 else f"response {len(got) + 1}"
                got.append((name, t))
        if not out:
            raise ResponsesFileError(f"{path}: the file holds no responses (it is empty); {shape}")
        return cls(path, out, row_of)

    def check_ids(self, known: Container[str], sample: Iterable[str]) -> None:
        """ResponsesFileError naming the first row whose id is not in `known` (the examples'
        ids; `sample`: a few of them, shown as what ids look like)."""
        for ex_id, n in self.row_of.items():
            if ex_id not in known:
                raise ResponsesFileError(_unknown_id(self.path, n, ex_id, sample))


def _unknown_id(path: Path, n: int, ex_id: str, sample: Iterable[str]) -> str:
    return (f"{path}, row {n}: field 'id' is {ex_id!r}, which is not an example of the data (ids "
            f"look like: {', '.join(sample)})")
