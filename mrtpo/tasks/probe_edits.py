"""The built-in tasks' probe edits: one targeted change of the reference per reward.

`mrtpo credit probe` (mrtpo.credit.probe) replays each edited reference and asks whether the
distance of the reward an edit is about lands on the edited characters more than the other
rewards' distances do. Each edit changes one thing that one reward checks and as little else
as it can; the probe keeps an edit only where it lowers that reward's score.

| task     | edit             | about      | what changes                                     |
|----------|------------------|------------|--------------------------------------------------|
| toolcall | argument value   | `correct`  | one argument's value (another enum member, a     |
|          |                  |            | different number or string)                      |
| toolcall | function name    | `schema`   | the first call's name (a function not offered)   |
| toolcall | tags             | `format`   | the first opening tag (`[tool_call]`)            |
| text2sql | literal          | `result`   | a number or string literal of the query          |
| text2sql | column           | `executes` | a column name misspelt (the SQLite error names   |
|          |                  |            | it in the response's `executes` block)           |
| text2sql | fence            | `format`   | the fence's language tag dropped (```sql -> ```) |
| instruct | per constraint   | that one   | end phrase, comma, case of a word, title marks,  |
|          |                  |            | P.S., quotation mark, keyword, forbidden word... |

Edits are deterministic (a seed from the example id), so the probe's figures are reproducible.
"""
from __future__ import annotations

import copy
import random
import re
import zlib
from typing import Callable

from mrtpo.edits import (SQL_WORDS, call_arguments, change_last_letter, other_string, respell, sql_literals,
                         sql_names, unknown_function)
from mrtpo.formats import split_think
from mrtpo.tasks import runner
from mrtpo.tasks.base import Example, ProbeEdit


def _rng(example: Example) -> random.Random:
    return random.Random(zlib.crc32(example.id.encode()))


# ------------------------------------------------------------------------------ toolcall
def toolcall_edits(task, example: Example) -> list[ProbeEdit]:
    ref = runner.reference(task, example)
    calls = task.format.parse(ref).answer or []
    if not calls:
        return []
    rng = _rng(example)
    out = []
    edited = _other_argument_value(calls, example.data["functions"], rng)
    if edited is not None:
        out.append(ProbeEdit.between("correct", "argument value", ref, task.format.render(edited)))
    named = copy.deepcopy(calls)
    named[0]["name"] = unknown_function(named[0]["name"])
    out.append(ProbeEdit.between("schema", "function name", ref, task.format.render(named)))
    out.append(ProbeEdit.between("format", "tags", ref, ref.replace("<tool_call>", "[tool_call]", 1)))
    return [e for e in out if e is not None]


def _other_argument_value(calls: list[dict], functions: list[dict], rng: random.Random) -> list[dict] | None:
    """The calls with one argument's value changed (strings first: names, places, dates)."""
    spec = {f["name"]: f.get("parameters", {}).get("properties", {}) for f in functions}
    options = [(i, k, v) for i, k, v in call_arguments(calls)
               if isinstance(v, (str, int, float)) and not isinstance(v, bool)]
    if not options:
        return None
    strings = [o for o in options if isinstance(o[2], str) and o[2]]
    i, key, value = rng.choice(strings or options)
    enum = spec.get(calls[i]["name"], {}).get(key, {}).get("enum") or []
    others = [e for e in enum if e != value and type(e) is type(value)]
    if others:
        new = rng.choice(others)
    elif isinstance(value, str):
        new = other_string(value, "x")
    elif isinstance(value, int):
        new = value + rng.choice([1, 2, 10])
    else:
        new = round(value * 2 + 1, 3)
    out = copy.deepcopy(calls)
    out[i]["arguments"][key] = new
    return out


# ------------------------------------------------------------------------------ text2sql
def text2sql_edits(task, example: Example) -> list[ProbeEdit]:
    ref = runner.reference(task, example)
    sql = task.format.parse(ref).answer
    if not sql:
        return []
    rng = _rng(example)
    out = []
    literal = _change_literal(str(sql), rng)
    if literal is not None:
        out.append(ProbeEdit.between("result", "literal", ref, ref.replace(str(sql), literal, 1)))
    column = _misspell_column(str(sql), rng)
    if column is not None:
        out.append(ProbeEdit.between("executes", "column", ref, ref.replace(str(sql), column, 1)))
    out.append(ProbeEdit.between("format", "fence", ref, ref.replace("```sql", "```", 1)))
    return [e for e in out if e is not None]


def _change_literal(sql: str, rng: random.Random) -> str | None:
    """A number (+1) or a quoted string (its last character changed) of the query."""
    found = sql_literals(sql)
    if not found:
        return None
    m = rng.choice(found)
    if m.group(1) is not None:
        s = m.group(1)
        new = s[:-1] + ("a" if s[-1] != "a" else "e")
        return sql[: m.start(1)] + new + sql[m.end(1):]
    return sql[: m.start(2)] + str(int(m.group(2)) + 1) + sql[m.end(2):]


def _misspell_column(sql: str, rng: random.Random) -> str | None:
    """One identifier (not a keyword, a function or inside quotes) with its last letter changed."""
    names = sql_names(sql, SQL_WORDS, unqualified=True)
    return respell(sql, rng.choice(names), change_last_letter) if names else None


# ------------------------------------------------------------------------------ instruct
def instruct_edits(task, example: Example) -> list[ProbeEdit]:
    ref = runner.reference(task, example)
    if ref is None:
        return []
    thought, body = split_think(ref)
    rng = _rng(example)
    out = []
    for name, c in zip(task.reward_name_list(example), example.data["constraints"]):
        make = _INSTRUCT_EDITS.get(c["id"])
        if make is None:
            continue
        new = make(body, c.get("kwargs") or {}, rng)
        if new is not None and new != body:
            out.append(ProbeEdit.between(name, c["id"], ref, task.format.render(new, thought)))
    return [e for e in out if e is not None]


def _end_phrase(text: str, kw: dict, rng) -> str | None:
    phrase = kw.get("end_phrase")
    if not phrase or not text.rstrip().endswith(phrase):
        return None
    return text.rstrip()[: -len(phrase)] + "Thank you!"


def _add_comma(text: str, kw: dict, rng) -> str | None:
    m = re.search(r"\b\w+\b(?= )", text)
    return text[: m.end()] + "," + text[m.end():] if m else None


def _recase_word(text: str, pattern: str, recase: Callable[[str], str], rng) -> str | None:
    """One word matching `pattern` (chosen by `rng`) rewritten by `recase`."""
    words = list(re.finditer(pattern, text))
    if not words:
        return None
    m = rng.choice(words)
    return text[: m.start()] + recase(m.group()) + text[m.end():]


def _capitalise_word(text: str, kw: dict, rng) -> str | None:
    return _recase_word(text, r"\b[a-z]{4,}\b", str.upper, rng)


def _lowercase_word(text: str, kw: dict, rng) -> str | None:
    return _recase_word(text, r"\b[A-Z]{4,}\b", str.lower, rng)


def _title_marks(text: str, kw: dict, rng) -> str | None:
    m = re.search(r"<<([^\n]+?)>>", text)
    return text[: m.start()] + "[" + m.group(1) + "]" + text[m.end():] if m else None


def _postscript(text: str, kw: dict, rng) -> str | None:
    marker = kw.get("postscript_marker") or "P.S."
    i = text.find(marker)
    return text[:i] + "Note:" + text[i + len(marker):] if i >= 0 else None


def _quotation(text: str, kw: dict, rng) -> str | None:
    t = text.strip()
    return "'" + t[1:] if t.startswith('"') else None


def _drop_keyword(text: str, kw: dict, rng) -> str | None:
    for word in kw.get("keywords") or []:
        found = list(re.finditer(rf"\b{re.escape(word)}\b", text, re.I))
        if len(found) == 1:
            m = found[0]
            return text[: m.start()] + "thing" + text[m.end():]
    return None


def _forbidden_word(text: str, kw: dict, rng) -> str | None:
    words = kw.get("forbidden_words") or []
    m = re.search(r"\b\w+\b", text)
    return text[: m.start()] + words[0] + " " + text[m.start():] if words and m else None


def _highlight(text: str, kw: dict, rng) -> str | None:
    m = re.search(r"\*([^*\n]+)\*", text)
    return text[: m.start()] + "_" + m.group(1) + "_" + text[m.end():] if m else None


def _json_break(text: str, kw: dict, rng) -> str | None:
    i = text.rfind("}")
    return text[:i] + ")" + text[i + 1:] if i >= 0 else None


_INSTRUCT_EDITS: dict[str, Callable[[str, dict, random.Random], str | None]] = {
    "startend:end_checker": _end_phrase,
    "punctuation:no_comma": _add_comma,
    "change_case:english_lowercase": _capitalise_word,
    "change_case:english_capital": _lowercase_word,
    "detectable_format:title": _title_marks,
    "detectable_content:postscript": _postscript,
    "startend:quotation": _quotation,
    "keywords:existence": _drop_keyword,
    "keywords:forbidden_words": _forbidden_word,
    "detectable_format:number_highlighted_sections": _highlight,
    "detectable_format:json_format": _json_break,
}
#: the instruct constraint ids the built-in probe has an edit for
INSTRUCT_EDIT_IDS = tuple(sorted(_INSTRUCT_EDITS))

__all__ = ["INSTRUCT_EDIT_IDS", "instruct_edits", "text2sql_edits", "toolcall_edits"]
