"""The block lint on whole tasks: a task written to the rules passes, and a task that breaks
one rule is caught for that rule (tests/blocks_minitask.py); plus `check_text` itself."""
from __future__ import annotations

import pytest

from blocks_minitask import BROKEN, MiniConstraints, MiniSQL, build_db
from mrtpo.blocks.check import check_response
from mrtpo.blocks.lint import lint_task
from mrtpo.blocks.samples import corrupt, sample_responses
from mrtpo.blocks.rules import RULES, Finding, check_text
from mrtpo.tasks.base import Example, Reward, Verdict


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return build_db(tmp_path_factory.mktemp("minisql") / "concert.sqlite")


def rules_of(findings: list[Finding]) -> set[str]:
    return {f.rule for f in findings}


# --- check_text: one violating and one passing text per check ---------------------------------
@pytest.mark.parametrize("text,rule,check", [
    ("Make sure the query orders singers by age.", "R3", "imperative"),
    ("Please compare the name column of singer.", "R3", "imperative"),
    ("Do not group concerts by stadium.", "R3", "imperative"),
    ("Your query should filter on city = 'Berlin'.", "R3", "addresses-model"),
    ("Reference: the query counts singers.", "R3", "label"),
    ("## Feedback\nThe query fails on singer.", "R3", "label"),
    ("<hint>The stadium table has a city column.</hint>", "R3", "label"),
    ("The expected call:\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "R3", "label"),
    ("The reward is 1 when the rows match.", "R3", "training-words"),
    ("This block is removed during replay.", "R3", "training-words"),
    ("The query fails: no such column: nme.\n```sql\nSELECT name FROM singer\n```", "R1", "merged"),
    ("```sql\nSELECT 1\n```\n```sql\nSELECT 2\n```", "R1", "merged"),
    ("- The rows are singers.\n- The order is by age.", "R1", "merged"),
    ("The response is in lowercase letters. It mentions whiskers.", "R1", "merged"),
])
def test_check_text_flags(text, rule, check):
    found = check_text(text)
    assert (rule, check) in {(f.rule, f.check) for f in found}, found
    assert all(f.message for f in found)


@pytest.mark.parametrize("text", [
    "A correct response gives exactly one ```sql code block holding the SQL statement and nothing outside the block.",
    "The query fails on this database with the SQLite error: no such column: nme",
    'SQLite rejects the query: near "FROM": syntax error',
    "```sql\nSELECT name FROM singer WHERE age > 30 ORDER BY age DESC\n```",
    '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>',
    '{"name": "book_table", "description": "Please give the restaurant name.", "parameters": {}}',
    "The rows do not include singers whose age is unknown.",
    "There should be 3 paragraphs. Paragraphs are separated with the markdown divider: ***",
    "",
])
def test_check_text_passes(text):
    assert check_text(text) == []


def test_check_text_in_prompt_allows_the_users_own_imperatives():
    s = "Do not include the keyword 'moon' in the response."
    assert "R3" in rules_of(check_text(s))
    assert check_text(s, placement="in_prompt") == []
    # a label or training talk is still wrong inside the prompt
    assert rules_of(check_text("Note: the reward counts commas.", placement="in_prompt")) == {"R3"}


def test_check_text_quoted_material_is_not_prose():
    assert check_text("The query fails with the SQLite error: no such column: score") != []
    assert check_text("The query fails with the SQLite error: no such column: score",
                      quoted=["no such column: score"]) == []
    assert check_text("Include the word 'reward' twice.", placement="in_prompt") == []


def test_check_text_rejects_non_text():
    assert rules_of(check_text(None)) == {"R6"}  # type: ignore[arg-type]


# --- whole tasks ------------------------------------------------------------------------------
def test_a_task_written_to_the_rules_is_clean(db):
    task = MiniSQL(db)
    report = lint_task(task, task.load())
    assert report.findings == [], [str(f) for f in report.findings]
    assert report.examples == 5 and report.responses == 10
    # the corrupted copy really produced a response-dependent block
    checked = check_response(task, task.load()[0], *sample_responses(task, task.load()[0])[1])
    assert checked.verdicts[1].score == 0.0 and "SQLite error" in checked.blocks[1]


@pytest.mark.parametrize("rule,cls", [(r, c) for r, cs in BROKEN.items() for c in cs],
                         ids=lambda x: x if isinstance(x, str) else x.__name__)
def test_a_task_breaking_one_rule_is_caught_for_it(db, rule, cls):
    task = cls(db)
    report = lint_task(task, task.load())
    found = rules_of(report.findings)
    assert rule in found, [str(f) for f in report.findings]
    flagged = [f for f in report.findings if f.rule == rule]
    assert all(f.example for f in flagged)  # every finding says where
    assert all(f.message for f in flagged)


def test_identical_block_is_fine_when_labels_agree(db):
    """The format block is the same for every example, and every example's format verifier
    agrees: no R2 finding. The generic result block is the same while the gold differs: R2."""
    clean = lint_task(MiniSQL(db), MiniSQL(db).load())
    assert not [f for f in clean.findings if f.check == "identical-across-examples"]
    generic = BROKEN["R2"][0](db)
    rep = lint_task(generic, generic.load())
    assert any(f.check == "identical-across-examples" and f.reward == "result" for f in rep.findings)


def test_in_prompt_task(db):
    clean = MiniConstraints()
    rep = lint_task(clean, clean.load())
    # the lowercase constraint is identical in both examples, and so is its label: fine
    assert rep.findings == [], [str(f) for f in rep.findings]
    para = MiniConstraints(paraphrase=True)
    rep = lint_task(para, para.load())
    assert {(f.rule, f.check) for f in rep.findings} >= {("R6", "not-in-prompt")}
    custom = MiniConstraints(custom_without=True)
    rep = lint_task(custom, custom.load())
    assert ("R6", "without-k-differs") in {(f.rule, f.check) for f in rep.findings}


def test_responses_given_by_the_user(db):
    task = MiniSQL(db)
    ex = task.load()[:1]
    responses = {ex[0].id: [("typo", "```sql\nSELECT count(*) FROM singr\n```"), ("prose", "I think 7.")]}
    rep = lint_task(task, ex, responses)
    assert rep.responses == 2 and rep.findings == []


def test_sample_responses_corrupt_in_the_same_format(db):
    task = MiniSQL(db)
    for ex in task.load():
        (n1, ref), (n2, bad) = sample_responses(task, ex)
        assert (n1, n2) == ("reference", "corrupted")
        assert task.format.check(bad) and bad != ref
        assert task.verify_executes(ex, bad).score == 0.0  # SQLite now has something to say


def test_corrupt_tool_calls_and_text():
    from mrtpo.formats import TextFormat, ToolCallFormat
    from mrtpo.tasks.base import Task

    class T(Task):
        format = ToolCallFormat()

    ex = Example(id="x", prompt="p")
    ref = ToolCallFormat().render([{"name": "book", "arguments": {"size": 4, "who": "Ana"}}])
    bad = ToolCallFormat().parse(corrupt(T(), ex, ref)).answer
    assert bad == [{"name": "book", "arguments": {"size": "4", "who": "Ana"}}]
    T.format = TextFormat()
    assert corrupt(T(), ex, "All good here. Two sentences.") == "aLL, GOOD HERE."


def test_nothing_a_task_does_stops_the_lint():
    """A block builder that raises, returns a non-string, or a rewards() that raises: findings."""
    from mrtpo.formats import TextFormat
    from mrtpo.tasks.base import Task

    class Broken(Task):
        name = "broken"
        format = TextFormat()

        def load(self, path=None, split=None):
            return [Example(id="a", prompt="Say hi.", source="x:1")]

        def reference(self, ex):
            return "hi"

        def rewards(self, ex):
            return [Reward("boom", lambda e, r: Verdict(1.0), lambda e, v: 1 / 0),
                    Reward("num", lambda e, r: Verdict(float("nan")), lambda e, v: 42)]  # type: ignore[arg-type,return-value]

    rep = lint_task(Broken(), Broken().load())
    checks = {(f.rule, f.check, f.reward) for f in rep.findings}
    assert ("R1", "builder-error", "boom") in checks
    assert ("R6", "not-text", "num") in checks
    assert ("R6", "bad-score", "num") in checks
    assert set(RULES) >= rules_of(rep.findings)
