"""mrtpo/edits.py: the per-format edit primitives that the blocks' corrupted copy,
the benchmarks' wrong answers and the credit probe's edits select from, each user's SQL
misspelling pinned to what it wrote before the three were folded into one module."""
from __future__ import annotations

import random

import mrtpo.blocks.samples as blocks_samples
import benchmarks.lib.wrong_answers as wrong_answers
import mrtpo.tasks.probe_edits as probe_edits
from mrtpo.edits import (SQL_KEYWORDS, SQL_WORDS, call_arguments, change_last_letter, drop_last_letter,
                         first_sql_name, misspell_first_word, other_string, respell, sentences, sql_literals,
                         sql_names, sql_numbers, swap_letters, unknown_function)

Q = "SELECT t.name, count(*) FROM singer AS t WHERE city = 'grand old town' AND age2 > 30"


def _texts(spans, text=Q):
    return [text[a:b] for a, b in spans]


def test_sql_primitives():
    assert _texts(sql_names(Q)) == ["name", "singer", "city"]  # no function, no keyword, no quoted word
    assert _texts(sql_names(Q, SQL_WORDS, unqualified=True)) == ["singer", "city", "age2"]  # not t.name
    assert _texts([first_sql_name(Q)]) == ["name"] and first_sql_name("") is None
    assert [m.group(0) for m in sql_literals(Q)] == ["'grand old town'", "30"]
    assert [m.group(1) for m in sql_numbers(Q)] == ["30"]
    assert SQL_KEYWORDS < SQL_WORDS and "select" in SQL_KEYWORDS and "case" in SQL_WORDS - SQL_KEYWORDS


def test_word_text_and_tool_primitives():
    assert (swap_letters("Paris"), swap_letters("aaa"), drop_last_letter("singer"),
            change_last_letter("name"), change_last_letter("max")) == ("Prais", "aaax", "singe", "namx", "maz")
    assert respell("a singer b", (2, 8), str.upper) == "a SINGER b"
    assert misspell_first_word("x = singer") == "x = sniger" and misspell_first_word("1 2") == "1 2 ?"
    assert sentences("One. Two!  Three? ") == ["One.", "Two!", "Three?"] and sentences("") == []
    assert call_arguments([{"name": "f", "arguments": {"a": 1}}, {"name": "g"}]) == [(0, "a", 1)]
    assert unknown_function("get_weather") == "get_weather_v2"
    assert [other_string(v, "s", 3) for v in ("New York", "Chicago", "ab", "aba")] == ["New", "ogacihC", "abs", "abas"]
    assert [other_string(v, "x") for v in ("ab", "")] == ["ba", "x"]


def test_each_user_misspells_sql_as_it_did():
    """One module, three selections: the blocks swap two letters of the first name SQLite reads,
    the benchmarks' wrong answers drop the last letter of a random name, the probe changes the last letter
    of a random name SQLite resolves (not a qualified one, not inside quotes)."""
    assert blocks_samples._misspell_sql(Q) == Q.replace("t.name", "t.nmae")
    assert wrong_answers._misspell_column(Q, random.Random(0)) == Q.replace("singer", "singe")
    assert probe_edits._misspell_column(Q, random.Random(0)) == Q.replace("city", "citx")
    assert blocks_samples._misspell_sql("1 + 1") == "1 + 1 ?"  # no name: the first word rule, then " ?"
    assert wrong_answers._misspell_column("SELECT 1", random.Random(0)) is None
    assert probe_edits._misspell_column("SELECT 'name'", random.Random(0)) is None
    for module in (blocks_samples, wrong_answers, probe_edits):  # no SQL word list or misspeller of their own
        assert not any(hasattr(module, name) for name in ("_SQL_KEYWORDS", "_SQL_WORDS", "_swap", "_misspell_first"))
