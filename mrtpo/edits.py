"""Edits of a correct response: the per-format primitives that every corruptor selects from.

Three users break a reference on purpose, each for its own reason, and compose these:
`mrtpo.blocks.samples` (a corrupted copy for the preview and the lint: deterministic, the first
name), `mrtpo.tasks.probe_edits` (one targeted edit per reward for the credit probe) and the
benchmarks' wrong answers (`benchmarks/lib/wrong_answers.py`: random, many kinds). Pure functions
of their input (and of a `random.Random` where they choose).

- words: `swap_letters`, `drop_last_letter`, `change_last_letter`, `misspell_first_word`,
  `respell` (a span of a text rewritten by one of them);
- SQL: the keywords never misspelt (`SQL_KEYWORDS`, `SQL_WORDS`), the names a query uses
  (`sql_names`: column and table names; `first_sql_name`: by SQLite's own tokens), its
  literals (`sql_literals`) and numbers (`sql_numbers`);
- tool calls: the arguments a call can have edited (`call_arguments`), a function that is not
  offered (`unknown_function`), another string value (`other_string`);
- text: its sentences (`sentences`).
"""
from __future__ import annotations

import re
from typing import Any, Callable

Span = tuple[int, int]  # [start, end) character range

# --- words ------------------------------------------------------------------------------------


def swap_letters(word: str) -> str:
    """Two neighbouring different letters swapped, the first such pair after the first letter
    (Paris -> Prais); a word with none gets an "x"."""
    for i in range(1, len(word) - 1):
        if word[i] != word[i + 1]:
            return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    return word + "x"


def drop_last_letter(word: str) -> str:
    """The word without its last letter (singer -> singe)."""
    return word[:-1]


def change_last_letter(word: str) -> str:
    """The word with its last letter changed to x (z for a word ending in x)."""
    return word[:-1] + ("x" if word[-1].lower() != "x" else "z")


def respell(text: str, span: Span, misspell: Callable[[str], str]) -> str:
    """`text` with the characters of `span` rewritten by `misspell`."""
    start, end = span
    return text[:start] + misspell(text[start:end]) + text[end:]


def misspell_first_word(text: str) -> str:
    """The first run of three or more letters with two letters swapped; " ?" appended to a
    text that has none."""
    m = re.search(r"[A-Za-z_]{3,}", text)
    if not m:
        return text + " ?"
    return respell(text, m.span(), swap_letters)


# --- SQL --------------------------------------------------------------------------------------

#: SQL words the corruptors never misspell
SQL_KEYWORDS = frozenset({
    "select", "from", "where", "and", "or", "not", "order", "by", "group", "having", "limit",
    "join", "on", "as", "in", "asc", "desc", "count", "avg", "sum", "max", "min", "distinct",
    "like", "between", "is", "null", "union", "intersect", "except", "inner", "left", "outer",
})
#: and a few more the probe's queries use
SQL_WORDS = SQL_KEYWORDS | {"case", "when", "then", "else", "end", "cast", "offset", "exists", "all", "any"}

_NAME_NEAR_QUOTES = re.compile(r"(?<![\w'\"])([A-Za-z_][A-Za-z_]{3,})(?![\w'\"(])")
_NAME_UNQUALIFIED = re.compile(r"(?<![\w.])([A-Za-z_][A-Za-z0-9_]{3,})(?![\w(])")


def sql_names(sql: str, keywords=SQL_KEYWORDS, unqualified: bool = False) -> list[Span]:
    """Spans of the names (four or more characters, not a keyword, not a function call) a query
    uses, in order. Default: letters and underscores, not touching a quote (the benchmarks'
    wrong answers' column errors). `unqualified`: digits allowed, not after a dot, nor inside a quoted string
    (the probe's column edit, which must change a name SQLite resolves)."""
    if not unqualified:
        return [m.span(1) for m in _NAME_NEAR_QUOTES.finditer(sql) if m.group(1).lower() not in keywords]
    quoted = [(m.start(), m.end()) for m in re.finditer(r"'[^']*'|\"[^\"]*\"", sql)]
    return [m.span(1) for m in _NAME_UNQUALIFIED.finditer(sql)
            if m.group(1).lower() not in keywords and not any(a <= m.start() < b for a, b in quoted)]


def first_sql_name(sql: str) -> Span | None:
    """The span of the query's first table or column name of three or more characters (not a
    function), by SQLite's tokens (sqlglot); None where there is none or it cannot tokenize."""
    try:
        import sqlglot
        from sqlglot.tokens import TokenType

        toks = sqlglot.tokenize(sql, read="sqlite")
    except Exception:
        return None
    for i, t in enumerate(toks):
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if t.token_type == TokenType.VAR and len(t.text) >= 3 and not (
                nxt is not None and nxt.token_type == TokenType.L_PAREN):
            start, end = t.start, t.end + 1
            if sql[start:end] == t.text:
                return start, end
    return None


def sql_literals(sql: str) -> list[re.Match]:
    """The query's literals: quoted strings (group 1, the text inside) and whole numbers not part
    of a name or a decimal (group 2)."""
    return list(re.finditer(r"'([^']+)'|(?<![\w.])(\d+)(?![\w.])", sql))


def sql_numbers(sql: str) -> list[re.Match]:
    """The query's whole numbers (group 1) not part of a name, a decimal or a quoted string."""
    return list(re.finditer(r"(?<![\w.'])(\d+)(?![\w.'])", sql))


# --- tool calls -------------------------------------------------------------------------------


def call_arguments(calls: list[dict[str, Any]]) -> list[tuple[int, str, Any]]:
    """(call index, argument name, value) of every argument of the calls, in order."""
    return [(i, k, v) for i, c in enumerate(calls) for k, v in c.get("arguments", {}).items()]


def unknown_function(name: str) -> str:
    """A function name that is not offered: the name with a "_v2" suffix."""
    return name + "_v2"


def other_string(value: str, suffix: str, min_reverse: int = 0) -> str:
    """Another string value: a phrase without its last word, else the word reversed (when that
    differs and it has at least `min_reverse` characters), else the word plus `suffix`."""
    words = value.split()
    if len(words) > 1:
        return " ".join(words[:-1])
    return value[::-1] if len(value) >= min_reverse and value[::-1] != value else value + suffix


# --- text -------------------------------------------------------------------------------------


def sentences(text: str) -> list[str]:
    """The text's sentences (split after . ! or ? and white space), empty ones dropped."""
    return [s for s in re.split(r"(?<=[.!?])\s+", text) if s]
