"""Small tasks shaped like the built-in ones, for the replay and context tests."""
from __future__ import annotations

from mrtpo.tasks.base import Example, Reward, Task, Verdict

FORMAT = "Answer with one SQL statement in a ```sql code block."


class SQLishTask(Task):
    """Text-to-SQL-shaped: a format rule and a reference query (response-independent) and the
    response's SQLite error (response-dependent, listed between them on purpose)."""

    name = "test-sqlish"
    placement = "append"

    def rewards(self, example):
        return [
            Reward("format", lambda e, r: Verdict(float(r.lstrip().startswith("```sql"))), lambda e, v: FORMAT),
            Reward("execution", _execute, lambda e, v: f"SQLite error: {v.feedback}" if v.feedback else "",
                   response_dependent=True),
            Reward("reference", lambda e, r: Verdict(0.0), lambda e, v: "A correct query: " + e.data["gold"]),
        ]


def _execute(example, response):
    if "nme" in response:
        return Verdict(0.0, "no such column: nme")
    return Verdict(1.0)


class ConstraintTask(Task):
    """Instruction-following-shaped: one reward per constraint sentence already in the prompt."""

    name = "test-constraints"
    placement = "in_prompt"

    def rewards(self, example):
        return [Reward(f"c{i}", lambda e, r: Verdict(1.0), (lambda s: lambda e, v: s)(s))
                for i, s in enumerate(example.data["constraints"])]


EX = Example(id="ex1", prompt=("How many singers are older than 30?\n\n"
                              "CREATE TABLE singer (singer_id INTEGER, name TEXT, age INTEGER)"),
             system="You write SQLite queries.", data={"gold": "SELECT count(*) FROM singer WHERE age > 30"},
             source="sample.jsonl:1")
