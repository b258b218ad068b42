"""Wrong answers made from a correct one: plausible mistakes of many kinds, for the experiments.

`candidate_errors` turns a reference (a correct response in a task's format) into corrupted
variants: format errors (a missing fence or tag, text around the answer), then content errors
(a wrong argument, another real value, a changed SQL literal or comparison, a broken
instruction constraint). `experiments/block_reading.py` draws its counterfactual references
from them and keeps those the task's own verifiers score lower. They were `mrtpo-tiny`'s warm
start's injected errors (`mrtpo.models.injected`) until that toy policy was retired; the
primitives they compose are `mrtpo.edits`'s. Every function is pure given its `random.Random`.
"""
from __future__ import annotations

import copy
import json
import random
import re
from typing import Any, Callable

from mrtpo.edits import (SQL_KEYWORDS, call_arguments, drop_last_letter, other_string, respell, sentences,
                         sql_names, sql_numbers)
from mrtpo.formats import CodeBlockFormat, Format, TextFormat, ToolCallFormat, split_think

Candidate = tuple[str, str]  # (kind of error, corrupted response)


def candidate_errors(fmt: Format, reference: str, rng: random.Random, n_content: int = 12,
                     values: dict[str, list] | None = None) -> list[Candidate]:
    """Corrupted variants of `reference` (a correct response in `fmt`): format errors first,
    then up to `n_content` content errors. Duplicates and the reference itself are dropped.

    `values` (tool calls): argument name -> values other references give it; a wrong
    argument is then usually another real value ("Lisbon" for "Chicago"), as a policy's
    mistakes are, rather than a mangled one.
    """
    out: list[Candidate] = []
    out += _format_errors(fmt, reference)
    makers = _content_makers(fmt, values or {})
    for _ in range(n_content * 3):
        if sum(1 for k, _ in out if not k.startswith("format:")) >= n_content or not makers:
            break
        kind, make = rng.choice(makers)
        try:
            bad = make(fmt, reference, rng)
        except Exception:  # an edit that does not apply to this reference
            bad = None
        if bad is not None:
            out.append((kind, bad))
    seen, unique = {reference}, []
    for kind, text in out:
        if text not in seen and text.strip():
            seen.add(text)
            unique.append((kind, text))
    return unique


# --- format errors -------------------------------------------------------------------------

def _format_errors(fmt: Format, reference: str) -> list[Candidate]:
    _, body = split_think(reference)
    out: list[Candidate] = []
    if isinstance(fmt, CodeBlockFormat):
        parsed = fmt.parse(reference)
        if parsed.answer is not None:
            code = str(parsed.answer)
            out.append(("format:missing_fence", code))
            out.append(("format:untagged_fence", f"```\n{code}\n```"))
            out.append(("format:text_after", f"{body.strip()}\nThis query answers the question."))
            out.append(("format:text_before", f"The query is:\n{body.strip()}"))
    elif isinstance(fmt, ToolCallFormat):
        calls = fmt.parse(reference).answer
        if calls:
            raw = "\n".join(json.dumps(c, ensure_ascii=False) for c in calls)
            out.append(("format:missing_tags", raw))
            out.append(("format:unclosed_tag", body.strip().rsplit("</tool_call>", 1)[0].rstrip()))
            out.append(("format:text_before", f"I will call the function.\n{body.strip()}"))
    if fmt.think:
        out.append(("format:no_think", body.strip()))
    return out


# --- content errors ------------------------------------------------------------------------

def _content_makers(fmt: Format, values: dict[str, list]) -> list[tuple[str, Callable[[Format, str, random.Random], str | None]]]:
    if isinstance(fmt, CodeBlockFormat):
        return [("sql:" + f.__name__.lstrip("_"), _on_code(f)) for f in _SQL_EDITS]
    if isinstance(fmt, ToolCallFormat):
        edits = [(f.__name__.lstrip("_"), f) for f in _CALL_EDITS]
        if values:
            edits += [("other_value", _other_value(values))] * 3
        return [("call:" + name, _on_calls(f)) for name, f in edits]
    if isinstance(fmt, TextFormat):
        return [("text:" + f.__name__.lstrip("_"), _on_text(f)) for f in _TEXT_EDITS]
    return []


def _on_code(edit):
    def make(fmt: CodeBlockFormat, reference: str, rng: random.Random) -> str | None:
        thought, _ = split_think(reference)
        code = fmt.parse(reference).answer
        if code is None:
            return None
        new = edit(str(code), rng)
        return None if new is None or new == code else fmt.render(new, thought)
    return make


def _on_calls(edit):
    def make(fmt: ToolCallFormat, reference: str, rng: random.Random) -> str | None:
        thought, _ = split_think(reference)
        calls = fmt.parse(reference).answer
        if not calls:
            return None
        new = edit(copy.deepcopy(calls), rng)
        return None if not new or new == calls else fmt.render(new, thought)
    return make


def _on_text(edit):
    def make(fmt: TextFormat, reference: str, rng: random.Random) -> str | None:
        thought, body = split_think(reference)
        new = edit(body.strip(), rng)
        return None if not new or new == body.strip() else fmt.render(new, thought)
    return make


# SQL: wrong comparison, wrong literal, wrong order, dropped condition, misspelt column.
_CMP_SWAP = {">": "<", "<": ">", ">=": "<=", "<=": ">=", "=": "!=", "!=": "="}


def _swap_comparison(sql: str, rng: random.Random) -> str | None:
    ms = list(re.finditer(r"(>=|<=|!=|=|>|<)", sql))
    if not ms:
        return None
    m = rng.choice(ms)
    return sql[:m.start()] + _CMP_SWAP[m.group(1)] + sql[m.end():]


def _change_number(sql: str, rng: random.Random) -> str | None:
    ms = sql_numbers(sql)
    if not ms:
        return None
    m = rng.choice(ms)
    value = int(m.group(1))
    new = value + rng.choice([1, 2, 5, 10]) if value < 1000 else value + 1
    return sql[:m.start()] + str(new) + sql[m.end():]


def _flip_order(sql: str, rng: random.Random) -> str | None:
    if re.search(r"\bDESC\b", sql, re.I):
        return re.sub(r"\bDESC\b", "ASC", sql, count=1, flags=re.I)
    if re.search(r"\bASC\b", sql, re.I):
        return re.sub(r"\bASC\b", "DESC", sql, count=1, flags=re.I)
    m = re.search(r"\bORDER\s+BY\s+[\w.()*]+", sql, re.I)
    return sql[:m.end()] + " DESC" + sql[m.end():] if m else None


def _drop_condition(sql: str, rng: random.Random) -> str | None:
    m = re.search(r"\s+WHERE\s+.*?(?=\s+(GROUP|ORDER|LIMIT|HAVING)\b|$)", sql, re.I | re.S)
    if not m:
        return None
    return sql[:m.start()] + sql[m.end():]


def _misspell_column(sql: str, rng: random.Random) -> str | None:
    names = sql_names(sql, SQL_KEYWORDS)
    return respell(sql, rng.choice(names), drop_last_letter) if names else None


def _change_aggregate(sql: str, rng: random.Random) -> str | None:
    swaps = [("max(", "min("), ("min(", "max("), ("avg(", "sum("), ("sum(", "avg(")]
    rng.shuffle(swaps)
    for a, b in swaps:
        i = sql.lower().find(a)
        if i >= 0:
            return sql[:i] + b.upper() + sql[i + len(a):]
    return None


_SQL_EDITS = [_swap_comparison, _change_number, _flip_order, _drop_condition, _misspell_column,
              _change_aggregate]


# Tool calls: wrong argument value, dropped or extra argument, wrong function name.
def _pick_arg(calls: list[dict], rng: random.Random) -> tuple[dict, str] | None:
    options = [(calls[i], k) for i, k, _ in call_arguments(calls)]
    return rng.choice(options) if options else None


def _wrong_value(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.choice([1, 2, 10, -1]) if value else 1
    if isinstance(value, float):
        return round(value * rng.choice([2.0, 0.5, 10.0]) + 1.0, 3)
    if isinstance(value, str):
        return other_string(value, "s", min_reverse=3)
    if isinstance(value, list) and value:
        return value[:-1] if len(value) > 1 else [_wrong_value(value[0], rng)]
    if isinstance(value, dict) and value:
        key = rng.choice(sorted(value))
        return {**value, key: _wrong_value(value[key], rng)}
    return None


def _wrong_argument(calls: list[dict], rng: random.Random) -> list[dict] | None:
    picked = _pick_arg(calls, rng)
    if not picked:
        return None
    call, key = picked
    call["arguments"][key] = _wrong_value(call["arguments"][key], rng)
    return calls


def _other_value(values: dict[str, list]):
    def edit(calls: list[dict], rng: random.Random) -> list[dict] | None:
        options = [(calls[i], k) for i, k, v in call_arguments(calls) if any(o != v for o in values.get(k, []))]
        if not options:
            return None
        call, key = rng.choice(options)
        call["arguments"][key] = rng.choice([o for o in values[key] if o != call["arguments"][key]])
        return calls
    return edit


def argument_values(fmt: Format, references) -> dict[str, list]:
    """Argument name -> the distinct values the references' tool calls give it."""
    out: dict[str, list] = {}
    if not isinstance(fmt, ToolCallFormat):
        return out
    for ref in references:
        for call in fmt.parse(ref).answer or []:
            for k, v in call.get("arguments", {}).items():
                if v not in out.setdefault(k, []):
                    out[k].append(v)
    return out


def _drop_argument(calls: list[dict], rng: random.Random) -> list[dict] | None:
    picked = _pick_arg(calls, rng)
    if not picked:
        return None
    call, key = picked
    del call["arguments"][key]
    return calls


def _extra_argument(calls: list[dict], rng: random.Random) -> list[dict] | None:
    call = rng.choice(calls)
    call.setdefault("arguments", {})[rng.choice(["verbose", "format", "limit"])] = rng.choice([True, "json", 5])
    return calls


def _wrong_name(calls: list[dict], rng: random.Random) -> list[dict] | None:
    call = rng.choice(calls)
    name = call["name"]
    parts = name.split("_")
    call["name"] = "_".join(parts[:-1]) if len(parts) > 1 else name + "_info"
    return calls


def _drop_call(calls: list[dict], rng: random.Random) -> list[dict] | None:
    if len(calls) < 2:
        return None
    del calls[rng.randrange(len(calls))]
    return calls


_CALL_EDITS = [_wrong_argument, _wrong_argument, _wrong_argument, _drop_argument, _extra_argument,
               _wrong_name, _drop_call]


# Text: edits that tend to break one instruction constraint (case, length, ending, structure).
def _upper(text: str, rng: random.Random) -> str:
    return text.upper()


def _lower(text: str, rng: random.Random) -> str:
    return text.lower()


def _capitalise_words(text: str, rng: random.Random) -> str:
    return text.title()


def _drop_last_sentence(text: str, rng: random.Random) -> str | None:
    s = sentences(text)
    return " ".join(s[:-1]) if len(s) > 1 else None


def _drop_first_paragraph(text: str, rng: random.Random) -> str | None:
    paras = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    return "\n\n".join(paras[1:]) if len(paras) > 1 else None


def _join_paragraphs(text: str, rng: random.Random) -> str | None:
    new = re.sub(r"\s*\n\s*", " ", text)
    return new if new != text else None


def _add_sentence(text: str, rng: random.Random) -> str:
    extra = rng.choice(["Thanks for reading, friend.", "That is all, and I hope it helps!",
                        "Let me know if you have more questions."])
    return f"{text} {extra}" if rng.random() < 0.5 else f"{extra} {text}"


def _halve(text: str, rng: random.Random) -> str | None:
    words = text.split(" ")
    return " ".join(words[: len(words) // 2]) if len(words) > 8 else None


def _double(text: str, rng: random.Random) -> str:
    return f"{text}\n\n{text}"


def _strip_punctuation(text: str, rng: random.Random) -> str | None:
    new = re.sub(r"[,\"*#]", "", text)
    return new if new != text else None


def _drop_keyword(text: str, rng: random.Random) -> str | None:
    words = re.findall(r"\b[A-Za-z]{5,}\b", text)
    if not words:
        return None
    word = rng.choice(words)
    return re.sub(rf"\b{re.escape(word)}\b", "", text).replace("  ", " ")


_TEXT_EDITS = [_upper, _lower, _capitalise_words, _drop_last_sentence, _drop_first_paragraph,
               _join_paragraphs, _add_sentence, _halve, _double, _strip_punctuation, _drop_keyword]
