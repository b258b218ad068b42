"""The lint and its sample responses on custom formats: a `Format` written with the public API, answer
markers that are not JSON (`\\boxed{}`, `{}`, `<answer>`), generic requirements for every kind,
excerpts in the user's own words, waivers, and the default corruption inside the format."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mrtpo.blocks.check import check_response
from mrtpo.blocks.lint import lint_task
from mrtpo.blocks.samples import break_answer, corrupt, sample_responses
from mrtpo.blocks.rules import check_block, check_text
from mrtpo.blocks.show import report_plain
from mrtpo.formats import DelimitedFormat, Format, Parsed
from mrtpo.tasks.base import Example, Reward, Task, Verdict

MARKS = re.compile("[\u220e\u25a0\u25b2\u25c6\u2591]")


class AnswerLineFormat(Format):
    """A custom format written with the public API only: working, then a last line `Answer: X`."""

    name = "answer_line"
    markers = ("Answer:",)

    def body_instruction(self) -> str:
        return "your working, then the final answer on a last line that starts with 'Answer:'."

    def body_rule(self) -> str:
        return "its working and then a last line Answer: followed by the final answer."

    def parse_body(self, body: str) -> Parsed:
        lines = body.strip().splitlines()
        found = [i for i, line in enumerate(lines) if line.startswith("Answer:")]
        if not found:
            return Parsed(None, False, "no line starts with 'Answer:'")
        answer = lines[found[-1]][len("Answer:"):].strip() or None
        if answer is None:
            return Parsed(None, False, "the Answer: line is empty")
        if found[-1] != len(lines) - 1:
            return Parsed(answer, False, "there is text after the Answer: line")
        return Parsed(answer, True)

    def render_body(self, answer) -> str:
        return f"Answer: {answer}"


ROWS = [("Mia has 5 apples and buys 7 more. How many apples does she have?", "5 + 7 = 12.", "12"),
        ("A box holds 6 eggs. How many eggs are in 4 boxes?", "4 * 6 = 24.", "24"),
        ("Tom had 30 marbles and gave 12 away. How many are left?", "30 - 12 = 18.", "18")]


class MathTask(Task):
    """Three rewards on a custom format; `format_block`, `waive` and `fmt` vary per test."""

    name = "test-math"
    placement = "append"

    def __init__(self, fmt: Format | None = None, format_block: str | None = None,
                 waive: dict | None = None):
        self.format = fmt or DelimitedFormat("\\boxed{", "}")
        self.format_block = format_block
        self.waive = waive or {}

    def load(self, path=None, split=None):
        return [Example(f"m{i}", f"{q}\n\n{self.format.instruction}", source=f"rows:{i + 1}",
                        data={"solution": s, "answer": a}) for i, (q, s, a) in enumerate(ROWS)]

    def rewards(self, example):
        fmt = self.format

        def strict(ex, response):
            p = fmt.parse(response)
            return Verdict(1.0 if p.strict else 0.0, p.error)

        def correct(ex, response):
            p = fmt.parse(response)
            ok = p.answer is not None and p.answer == ex.data["answer"]
            return Verdict(1.0 if ok else 0.0, "" if ok else f"the answer is {p.answer}")

        return [Reward("format", strict, lambda ex, v: self.format_block or fmt.rule, kind="format",
                       waive=self.waive),
                Reward("correct", correct, lambda ex, v: fmt.render_body(ex.data["answer"]),
                       kind="reference")]

    def reference(self, example):
        return example.data["solution"] + "\n" + self.format.render(example.data["answer"])


# --- the public Format API --------------------------------------------------------------------
def test_a_format_written_with_the_public_api_parses_renders_and_wraps_think():
    fmt = AnswerLineFormat()
    assert fmt.instruction == "Give your working, then the final answer on a last line that starts with 'Answer:'."
    assert fmt.rule.startswith("A correct response gives its working")
    assert fmt.parse("5 + 7 = 12.\n" + fmt.render("12")) == Parsed("12", True)
    assert fmt.parse("Answer: 12\nso there").strict is False
    think = AnswerLineFormat(think=True)
    assert think.rule_markers() == ["Answer:", "<think>"]
    assert think.parse(think.render("12", think="5 + 7")).strict
    assert not think.parse("Answer: 12").strict  # the think block is required
    assert fmt.parse(None).answer is None  # never raises


def test_delimited_format_nests_braces_and_rejects_text_after_the_answer():
    boxed = DelimitedFormat("\\boxed{", "}")
    assert boxed.parse("so \\boxed{\\frac{1}{2}}").answer == "\\frac{1}{2}"
    assert boxed.parse("\\boxed{12} done").strict is False
    assert boxed.parse("\\boxed{1} and \\boxed{2}").answer == "2"
    assert "not closed" in boxed.parse("\\boxed{12").error
    tags = DelimitedFormat("<answer>", "</answer>", text_before=False)
    assert tags.parse("<answer>Paris</answer>") == Parsed("Paris", True)
    assert not tags.parse("It is <answer>Paris</answer>").strict


# --- lint precision on custom formats -----------------------------------------------------------
@pytest.mark.parametrize("fmt", [DelimitedFormat("\\boxed{", "}"), DelimitedFormat("<answer>", "</answer>"),
                                 AnswerLineFormat()])
def test_a_task_on_a_custom_format_lints_clean(fmt):
    task = MathTask(fmt)
    report = lint_task(task, task.load())
    assert report.findings == [], [str(f) for f in report.findings]
    assert report.examples == 3 and report.responses == 6


@pytest.mark.parametrize("text", [
    "A correct response gives the final answer inside \\boxed{}, with nothing after it.",
    "The final line holds the number in place of {} in 'Answer: {}'.",
    "A correct response gives the final answer inside <answer></answer>, with nothing after it.",
    "\\boxed{12}", "<answer>12</answer>",
])
def test_answer_markers_are_not_payloads(text):
    assert check_text(text) == []


@pytest.mark.parametrize("text", ["The answer must be correct.", "The response should be short and concise.",
                                  "A correct response has the right format."])
@pytest.mark.parametrize("kind", ["format", "feedback", "reference", "constraint", "schema", ""])
def test_generic_requirements_are_caught_for_every_kind(text, kind):
    ex = MathTask().load()[0]
    assert ("R2", "generic-requirement") in {(f.rule, f.check) for f in check_text(text)}
    found = check_block(text, kind=kind, example=ex, verdict=Verdict(0.0, ""), fmt=MathTask().format,
                        try_builder=False)
    assert "R2" in {f.rule for f in found}, (kind, found)


def test_a_format_block_that_states_no_format_is_caught_for_a_custom_format():
    task = MathTask(AnswerLineFormat(), format_block="A correct response ends with its final result.")
    report = lint_task(task, task.load())
    assert {(f.rule, f.check, f.reward) for f in report.findings} == {("R2", "generic", "format")}


def test_excerpts_quote_the_users_own_text():
    found = check_text("Put the total in \\boxed{} and then stop.")
    assert found and found[0].excerpt == "Put the total in \\boxed{} and then stop."
    found = check_text('Note that {"a": 1} is the schema.')
    assert found and not MARKS.search(found[0].excerpt) and "Note that" in found[0].excerpt
    corpus = Path(__file__).resolve().parents[1] / "data" / "blocks_corpus.jsonl"
    for line in corpus.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        for f in check_text(rec["block"], placement=rec["placement"]):
            assert not MARKS.search(f.excerpt), (rec["id"], f.excerpt)


# --- waivers ----------------------------------------------------------------------------------
def test_a_waived_rule_is_set_apart_with_its_reason_and_shown_in_the_summary():
    block = "## Format\nA correct response gives the final answer inside \\boxed{}, with nothing after it."
    broken = lint_task(MathTask(format_block=block), MathTask().load())
    assert {(f.rule, f.check) for f in broken.findings} == {("R3", "label")}
    why = "the heading is part of the user's own style guide"
    task = MathTask(format_block=block, waive={"R3:label": why})
    report = lint_task(task, task.load())
    assert report.findings == [] and len(report.waived) == 3  # one per example
    assert {f.waived for f in report.waived} == {why}
    text = report_plain(report, task.name)
    assert f"waived R3 label [format] in 3 example(s): {why}" in text
    assert text.rstrip().endswith("no findings, 3 waived")
    # a waiver of another rule leaves the finding in place
    other = lint_task(MathTask(format_block=block, waive={"R1": "not this one"}), MathTask().load())
    assert {(f.rule, f.check) for f in other.findings} == {("R3", "label")}


@pytest.mark.parametrize("waive,message", [({"R9": "x"}, "not a rule id"), ({"R3": " "}, "no reason")])
def test_a_malformed_waiver_is_a_finding(waive, message):
    task = MathTask(waive=waive)
    report = lint_task(task, task.load())
    assert any(f.check == "bad-waiver" and message in f.message for f in report.findings)


# --- the default corruption -------------------------------------------------------------------
@pytest.mark.parametrize("fmt,good,bad", [
    (DelimitedFormat("\\boxed{", "}"), "5 + 7 = 12.\n\\boxed{12}", "5 + 7 = 12.\n\\boxed{13}"),
    (DelimitedFormat("<answer>", "</answer>"), "5 + 7 = 12.\n<answer>12</answer>", "5 + 7 = 12.\n<answer>13</answer>"),
    (AnswerLineFormat(), "5 + 7 = 12.\nAnswer: 12", "5 + 7 = 12.\nAnswer: 13"),
])
def test_the_default_corruption_breaks_the_answer_inside_the_format(fmt, good, bad):
    task = MathTask(fmt)
    ex = task.load()[0]
    assert task.reference(ex) == good
    assert sample_responses(task, ex) == [("reference", good), ("corrupted", bad)]
    assert fmt.parse(bad).strict  # the format still holds: only the answer is wrong
    checked = check_response(task, ex, "corrupted", bad)
    assert [v.score for v in checked.verdicts] == [1.0, 0.0]


def test_break_answer_keeps_the_shape():
    assert break_answer("Paris") == "Prais" and break_answer("0.5") == "0.6"
    assert break_answer(3) == 4 and break_answer({"a": "x", "n": 2}) == {"a": "x?", "n": 2}


def test_a_task_overrides_the_corruption():
    class Own(MathTask):
        def corrupt(self, example, response):
            return response.replace("\\boxed{", "\\boxed{-")

    task = Own()
    ex = task.load()[0]
    assert corrupt(task, ex, task.reference(ex)).endswith("\\boxed{-12}")
