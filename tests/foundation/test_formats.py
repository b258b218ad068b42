"""Output formats: parse never raises, parse(render(x)) == x, strict checks."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mrtpo.formats import CodeBlockFormat, TextFormat, ToolCallFormat, get_format, split_think

ALL = [CodeBlockFormat("sql"), CodeBlockFormat("sql", think=True), ToolCallFormat(),
       ToolCallFormat(think=True), TextFormat(), TextFormat(think=True)]


@settings(max_examples=200, deadline=None)
@given(st.text(), st.sampled_from(range(len(ALL))))
def test_parse_never_raises(text, i):
    p = ALL[i].parse(text)
    assert isinstance(p.strict, bool)
    assert p.strict or p.error


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["```", "```sql\n", "<tool_call>", "</tool_call>", "<think>", "</think>",
                        "{", "}", '"name"', "\n", "SELECT 1", '"arguments": {}', "x"]).flatmap(
    lambda _: st.lists(st.sampled_from(["```", "```sql\n", "<tool_call>", "</tool_call>",
                                        "<think>", "</think>", "{", "}", '"name": "f"', "\n",
                                        "SELECT 1", '"arguments": {}', ",", "x"]), max_size=12)))
def test_parse_never_raises_on_format_fragments(parts):
    text = "".join(parts)
    for fmt in ALL:
        fmt.parse(text)
    assert ToolCallFormat().parse(None).answer is None


sql_text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1).map(str.strip).filter(
    lambda s: s and "```" not in s)


@settings(max_examples=150, deadline=None)
@given(sql_text, st.booleans())
def test_code_block_roundtrip(sql, think):
    fmt = CodeBlockFormat("sql", think=think)
    out = fmt.render(sql, think="step 1")
    p = fmt.parse(out)
    assert p.answer == sql and p.strict, (out, p)


json_scalars = st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False),
                         st.text(max_size=10), st.booleans(), st.none())
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(
    st.text(max_size=5), c, max_size=3), max_leaves=8)
calls = st.lists(st.fixed_dictionaries({
    "name": st.text(min_size=1, max_size=12).filter(lambda s: "</tool_call>" not in s),
    "arguments": st.dictionaries(st.text(max_size=8), json_values, max_size=4)}), min_size=1, max_size=3)


@settings(max_examples=150, deadline=None)
@given(calls)
def test_tool_call_roundtrip(cs):
    fmt = ToolCallFormat()
    p = fmt.parse(fmt.render(cs))
    assert p.strict and p.answer == cs


@settings(max_examples=100, deadline=None)
@given(st.text().map(str.strip).filter(bool).filter(lambda s: not s.startswith("<think>")))
def test_text_roundtrip(t):
    # a text that starts with "<think>" is read as (the start of) a think block, by design
    assert TextFormat().parse(TextFormat().render(t)).answer == t


def test_code_block_strict_and_lenient():
    fmt = CodeBlockFormat("sql")
    assert fmt.check("```sql\nSELECT 1\n```")
    assert fmt.check("  ```sql\nSELECT 1;\n```\n")
    p = fmt.parse("Here you go:\n```sql\nSELECT 1\n```")
    assert p.answer == "SELECT 1" and not p.strict and "outside" in p.error
    p = fmt.parse("```\nSELECT 2\n```")
    assert p.answer == "SELECT 2" and not p.strict and "not tagged" in p.error
    p = fmt.parse("```sql\nSELECT 1\n```\n```sql\nSELECT 3\n```")
    assert p.answer == "SELECT 3" and "2 code blocks" in p.error
    assert fmt.parse("SELECT 1").answer is None
    assert fmt.parse("```sql\n\n```").answer is None


def test_think_rules():
    plain, thinking = CodeBlockFormat("sql"), CodeBlockFormat("sql", think=True)
    with_think = "<think>the singers table</think>\n```sql\nSELECT 1\n```"
    assert thinking.check(with_think) and not plain.check(with_think)
    assert plain.parse(with_think).answer == "SELECT 1"
    assert not thinking.check("```sql\nSELECT 1\n```")
    assert "not closed" in thinking.parse("<think>oops ```sql\nSELECT 1\n```").error
    assert split_think("<think>a</think>b") == ("a", "b")
    assert "<think>" in thinking.instruction and "<think>" in thinking.rule


def test_tool_call_errors_are_feedback():
    fmt = ToolCallFormat()
    p = fmt.parse('<tool_call>{"name": "f", "arguments": {"a": 1}</tool_call>')
    assert p.answer is None and "not valid JSON" in p.error
    p = fmt.parse('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>')
    assert p.answer == [{"name": "f", "arguments": {"a": 1}}]
    p = fmt.parse('Sure! <tool_call>{"name": "f", "arguments": {}}</tool_call>')
    assert p.answer == [{"name": "f", "arguments": {}}] and not p.strict and "outside" in p.error
    p = fmt.parse('<tool_call>{"name": "f"}</tool_call>\n<tool_call>[1]</tool_call>')
    assert p.answer == [{"name": "f", "arguments": {}}] and "tool call 2" in p.error
    assert fmt.parse("no calls here").answer is None


def test_instruction_and_rule_are_sentences():
    for fmt in ALL:
        assert fmt.instruction.endswith(".") and fmt.rule.endswith(".")
    assert "```sql" in CodeBlockFormat("sql").instruction
    with pytest.raises(KeyError, match="known formats"):
        get_format("yaml")


def test_a_think_tag_inside_the_answer_is_answer_text():
    # only a leading <think> opens a think block; one inside a code block or mid-text is text
    assert CodeBlockFormat("sql").parse("```sql\nSELECT '<think>'\n```").answer == "SELECT '<think>'"
    assert TextFormat().parse("The tag <think> opens a thought.").strict
    assert "not closed" in TextFormat().parse("  <think> unfinished").error
