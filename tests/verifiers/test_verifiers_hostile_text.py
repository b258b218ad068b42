"""Verifiers on arbitrary text are linear, bounded, and report timeouts."""
from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from limits import time_limit
from mrtpo.formats import TextFormat, ToolCallFormat, _tag_spans
from mrtpo.harness.scoring import Scorer
from mrtpo.tasks import get_task
from mrtpo.tasks.base import Example, Reward, Task, Verdict
from mrtpo.verifiers.ifeval import check, verify
from mrtpo.verifiers.ifeval.examples import EXAMPLE_KWARGS
from mrtpo.verifiers.ifeval.ifeval_checks import _count_line_starts, _count_placeholders
from mrtpo.verifiers.ifeval.scoring import MAX_RESPONSE_CHARS

pytestmark = pytest.mark.timeout(120)


# --- deep nesting scores 0 with feedback --------------------------------------------------------
def test_deeply_nested_json_is_not_followed_and_does_not_raise():
    ok, why = verify("detectable_format:json_format", {}, "[" * 9999 + "]" * 9999)
    assert not ok and "too deeply" in why
    task = get_task("instruct")
    ex = Example("j", "Wrap the answer in JSON.", data={"constraints": [
        {"id": "detectable_format:json_format", "kwargs": {}, "sentence": "", "match": ""}]})
    (v,) = task.score(ex, "[" * 9999 + "]" * 9999)
    assert v.score == 0.0 and v.feedback


# --- checkers are linear on hostile text -------------------------------------------------------
# The reported reproducers (100 KB; 'A. ' * 300000 is 900 KB), through the public `check`.
REPRODUCERS = [
    ("detectable_content:number_placeholders", "[" * 100_000),
    ("detectable_format:number_bullet_lists", "x" + "\n" * 100_000 + "x"),
    ("detectable_content:postscript", "x" + " " * 100_000 + "x"),
    ("detectable_format:title", "<" * 100_000 + "x"),
    ("format:title_case", "A. " * 300_000),
    ("change_case:capital_word_frequency", "A. " * 300_000),
    ("words:words_position", "A. " * 300_000),
]


@pytest.mark.parametrize("iid, text", REPRODUCERS, ids=[h[0] for h in REPRODUCERS])
def test_checkers_are_fast_on_the_reproducers(iid, text):
    with time_limit(4.0, iid):
        check(iid, EXAMPLE_KWARGS[iid], text, "Describe the sea.")


# Below the cap, the checkers whose official regexes are quadratic are linear: the checker
# functions themselves (no cap) on 400 KB of the worst text for each.
LINEAR = [
    ("detectable_content:number_placeholders", "[" * 400_000),
    ("detectable_format:number_bullet_lists", "x" + "\n" * 400_000 + "x"),
    ("detectable_format:number_bullet_lists", "x" + " \n" * 200_000 + "*x"),
    ("detectable_content:postscript", "x" + " " * 400_000 + "x"),
    ("detectable_format:title", "<" * 400_000 + "x"),
    ("detectable_format:title", "<<" + "x" * 400_000 + ">"),
]


@pytest.mark.parametrize("iid, text", LINEAR, ids=[f"{h[0]}-{i}" for i, h in enumerate(LINEAR)])
def test_checkers_are_linear_below_the_cap(iid, text):
    from mrtpo.verifiers.ifeval import get_instruction

    with time_limit(3.0, iid):
        get_instruction(iid).check(text, EXAMPLE_KWARGS[iid], "Describe the sea.")


def test_text_over_the_cap_is_not_followed_with_the_reason():
    ok, why = verify("punctuation:no_comma", {}, "a" * (MAX_RESPONSE_CHARS + 1))
    assert not ok and f"{MAX_RESPONSE_CHARS:,}" in why
    assert verify("punctuation:no_comma", {}, "a" * MAX_RESPONSE_CHARS)[0]


def test_toolcall_tags_are_found_in_linear_time():
    fmt = ToolCallFormat()
    with time_limit(3.0, "ToolCallFormat.parse"):
        p = fmt.parse("<tool_call>" * 200_000)
    assert p.answer is None and not p.strict
    call = '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'
    p = fmt.parse(f"{call}\nhello {call}<tool_call>dangling")
    assert p.answer == [{"name": "f", "arguments": {"a": 1}}] * 2
    assert "hello" in p.error and "dangling" in p.error


# The linear scans count exactly what IFEval's regular expressions count.
_TEXT = st.text(alphabet=list("[]\n *-<>ab\t\u2028\x0b.pPsS"), max_size=50)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(_TEXT)
def test_linear_scans_equal_the_official_regexes(s):
    assert _count_placeholders(s) == len(re.findall(r"\[.*?\]", s))
    assert _count_line_starts(s, "*") == len(re.findall(r"^\s*\*[^\*].*$", s, flags=re.MULTILINE))
    assert _count_line_starts(s, "-") == len(re.findall(r"^\s*-.*$", s, flags=re.MULTILINE))
    if s.strip():
        titles = re.findall(r"<<[^\n]+>>", s)
        assert check("detectable_format:title", {}, s) == any(
            t.lstrip("<").rstrip(">").strip() for t in titles)
        for marker, pattern in (("P.S.", r"\s*p\.\s?s\..*$"), ("P.P.S", r"\s*p\.\s?p\.\s?s.*$")):
            assert check("detectable_content:postscript", {"postscript_marker": marker}, s) == bool(
                re.findall(pattern, s.lower(), flags=re.MULTILINE))
    t = s.replace("<", "<tool_call>").replace(">", "</tool_call>")
    tags = re.findall(r"<tool_call>(.*?)</tool_call>", t, re.DOTALL)
    assert [t[a + 11:b - 12] for a, b in _tag_spans(t, "<tool_call>", "</tool_call>")] == tags


# --- the toolcall parse cache is bounded by bytes ----------------------------------------------
def test_toolcall_parse_cache_is_bounded_by_bytes():
    import gc
    import tracemalloc

    task = get_task("toolcall")
    ex = task.load()[0]
    tracemalloc.start()
    try:
        for i in range(40):  # 40 distinct 2 MB responses: 80 MB if the cache kept them
            task.score(ex, f"<tool_call>{i}" + "x" * 2_000_000)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held < 40_000_000, f"{held / 1e6:.0f} MB still held after scoring"


# --- the scorer's deadline is reported as a timeout, even inside Format.parse -----------------
class _SlowFormat(TextFormat):
    def parse_body(self, body):
        end = time.monotonic() + 5.0
        while time.monotonic() < end:  # a parser stuck on its input
            pass
        return super().parse_body(body)


class _SlowParseTask(Task):
    name = "slow-parse"
    format = _SlowFormat()

    def load(self, path=None, split=None):
        return [Example("s0", "Say something.")]

    def rewards(self, example):
        def verify(ex, response):
            p = self.format.parse(response)
            return Verdict(1.0 if p.strict else 0.0, p.error)

        return [Reward("format", verify, lambda ex, v: self.format.rule)]


def test_deadline_inside_format_parse_reads_timed_out():
    task = _SlowParseTask()
    with Scorer(task, workers=1, timeout=0.5) as scorer:
        s = scorer.score(task.load(), ["hello"])
    assert s.verdicts[0][0].feedback == "timed out after 0.5 s", s.verdicts[0][0]
