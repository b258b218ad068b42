"""A small real task for the block-lint tests: questions on a real SQLite database.

`MiniSQL` is written to the rules (format rule, the response's own SQLite error, the
reference query fenced as the policy writes it); `broken(rule)` returns a variant that breaks
exactly one rule, the way a task author could, so the lint can be tested against both.
Scoring uses the project's SQLite verifier (`mrtpo.verifiers.sql`), not a stand-in.
"""
from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

from mrtpo.formats import CodeBlockFormat
from mrtpo.tasks.base import Example, Reward, Task, Verdict

DATA = Path(__file__).resolve().parents[1] / "data"

QUESTIONS = [
    ("How many singers are there?", "SELECT count(*) FROM singer"),
    ("List the names of singers older than 30, oldest first.",
     "SELECT name FROM singer WHERE age > 30 ORDER BY age DESC"),
    ("What is the average capacity of the stadiums in Berlin?",
     "SELECT avg(capacity) FROM stadium WHERE city = 'Berlin'"),
    ("Which singers have no known country?", "SELECT name FROM singer WHERE country IS NULL"),
    ("How many concerts took place in each year?", "SELECT year, count(*) FROM concert GROUP BY year"),
]


def build_db(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.executescript((DATA / "blocks_corpus.sql").read_text())
    con.close()
    return path


def write_jsonl(path: Path, db: Path, questions=QUESTIONS) -> Path:
    with path.open("w") as fh:
        for i, (q, gold) in enumerate(questions):
            fh.write(json.dumps({"id": f"q{i}", "question": q, "query": gold, "db_path": str(db)}) + "\n")
    return path


class MiniSQL(Task):
    """Questions about the concert database; three rewards written to the block rules."""

    name = "minisql"
    placement = "append"

    def __init__(self, db: Path):
        self.db = Path(db)
        self.format = CodeBlockFormat("sql")

    # --- data
    def load(self, path=None, split=None) -> list[Example]:
        if path is None:
            rows = [{"id": f"q{i}", "question": q, "query": g, "db_path": str(self.db)}
                    for i, (q, g) in enumerate(QUESTIONS)]
            src = "minisql-sample"
        else:
            rows, src = [], str(path)
            for n, line in enumerate(Path(path).read_text().splitlines(), 1):
                row = json.loads(line)
                if "query" not in row:
                    raise ValueError(f"{path}, row {n}: field 'query' is missing")
                rows.append(row)
        return [self.example(r, f"{src}:{i + 1}") for i, r in enumerate(rows)]

    def example(self, row: dict, source: str) -> Example:
        schema = "\n".join(line for line in (DATA / "blocks_corpus.sql").read_text().splitlines()
                           if line and not line.startswith(("--", "INSERT", "  (")))
        prompt = f"Database schema:\n{schema}\n\nQuestion: {row['question']}\n\n{self.format.instruction}"
        return Example(id=row["id"], prompt=prompt, data={"query": row["query"], "db_path": row["db_path"]},
                       source=source)

    def reference(self, example: Example) -> str:
        return self.format.render(example.data["query"])

    # --- rewards
    def rewards(self, example: Example) -> list[Reward]:
        return [
            Reward("format", self.verify_format, self.format_block, kind="format"),
            Reward("executes", self.verify_executes, self.executes_block, response_dependent=True,
                   kind="feedback"),
            Reward("result", self.verify_result, self.result_block, kind="reference"),
        ]

    def verify_format(self, ex: Example, response: str) -> Verdict:
        p = self.format.parse(response)
        return Verdict(1.0 if p.strict else 0.0, p.error)

    def _run(self, ex: Example, response: str):
        from mrtpo.verifiers.sql_sandbox import execute

        p = self.format.parse(response)
        if p.answer is None:
            return None, p.error
        res = execute(ex.data["db_path"], p.answer)
        return res, res.error or ""

    def verify_executes(self, ex: Example, response: str) -> Verdict:
        res, err = self._run(ex, response)
        if res is None:
            return Verdict(0.0, "")  # no query: nothing for SQLite to say
        return Verdict(1.0 if res.ok else 0.0, err)

    def verify_result(self, ex: Example, response: str) -> Verdict:
        from mrtpo.verifiers.sql import exec_match

        p = self.format.parse(response)
        if p.answer is None:
            return Verdict(0.0, p.error)
        ok = exec_match(p.answer, ex.data["query"], ex.data["db_path"])
        return Verdict(1.0 if ok else 0.0, "" if ok else "the result differs from the reference's")

    def format_block(self, ex: Example, v: Verdict) -> str:
        return self.format.rule

    def executes_block(self, ex: Example, v: Verdict) -> str:
        return f"The query fails on this database with the SQLite error: {v.feedback}" if v.feedback else ""

    def result_block(self, ex: Example, v: Verdict) -> str:
        return self.format.render_body(ex.data["query"])


# --------------------------------------------------------------------------------------------
# One rule broken at a time
# --------------------------------------------------------------------------------------------
class MergedBlocks(MiniSQL):
    """R1: the feedback block carries the reference too."""

    def executes_block(self, ex, v):
        base = super().executes_block(ex, v)
        return (base + "\n" + self.format.render_body(ex.data["query"])) if base else ""


class DuplicateNames(MiniSQL):
    """R1: two rewards under one name (one block standing for two verifiers)."""

    def rewards(self, ex):
        rs = super().rewards(ex)
        return rs + [Reward("result", self.verify_executes, self.result_block, kind="reference")]


class GenericResult(MiniSQL):
    """R2: the result block is a generic requirement, the same for every example."""

    def result_block(self, ex, v):
        return "The query returns the rows the question asks for."


class InstructingFormat(MiniSQL):
    """R3: the format block instructs the model."""

    def format_block(self, ex, v):
        return "Make sure to give exactly one ```sql code block and nothing else."


class InventedFeedback(MiniSQL):
    """R4: the feedback block says something when SQLite said nothing."""

    def executes_block(self, ex, v):
        return v.feedback and f"The query fails with the SQLite error: {v.feedback}" or \
            "The query on singer runs without an error."


class ParaphrasedFeedback(MiniSQL):
    """R4: the feedback block paraphrases instead of quoting the verifier."""

    def executes_block(self, ex, v):
        return "The query names a table or column that singer and concert do not have." if v.feedback else ""


class BareReference(MiniSQL):
    """R5: the reference block is the bare query, not the fenced form the policy writes."""

    def result_block(self, ex, v):
        return ex.data["query"]


class WrongReference(MiniSQL):
    """R5: the reference block is in form but wrong (descending order turned ascending)."""

    def result_block(self, ex, v):
        return self.format.render_body(ex.data["query"].replace(" DESC", " ASC").replace("count(*)", "count(*) + 1"))


class UndeclaredDependence(MiniSQL):
    """R6: the feedback block depends on the verdict, but the reward says it does not."""

    def rewards(self, ex):
        rs = super().rewards(ex)
        return [rs[0], Reward("executes", self.verify_executes, self.executes_block, kind="feedback"), rs[2]]


class RaisingVerifier(MiniSQL):
    """R6: the verifier raises on bad model output instead of scoring the floor."""

    def verify_executes(self, ex, response):
        res, err = self._run(ex, response)
        if err:
            raise RuntimeError(err)
        return Verdict(1.0, "")


class UnstablePrompt(MiniSQL):
    """R6: P0 changes between calls (sampling and replay would see different prompts)."""

    def __init__(self, db):
        super().__init__(db)
        self._rng = random.Random(0)

    def messages(self, ex):
        msgs = super().messages(ex)
        msgs[-1]["content"] += f"\n(seed {self._rng.randint(0, 10**6)})"
        return msgs


BROKEN = {
    "R1": [MergedBlocks, DuplicateNames],
    "R2": [GenericResult],
    "R3": [InstructingFormat],
    "R4": [InventedFeedback, ParaphrasedFeedback],
    "R5": [BareReference, WrongReference],
    "R6": [UndeclaredDependence, RaisingVerifier, UnstablePrompt],
}


class MiniConstraints(Task):
    """In-prompt placement: constraint sentences already in P0, one reward per constraint."""

    name = "miniconstraints"
    placement = "in_prompt"

    def __init__(self, paraphrase: bool = False, custom_without: bool = False):
        from mrtpo.formats import TextFormat

        self.format = TextFormat()
        self.paraphrase = paraphrase
        if custom_without:
            # removes the constraint and the word before it: more than block k
            self.prompt_without = lambda ex, k: ex.prompt.replace(" " + ex.data["sentences"][k], "", 1) \
                .replace("short ", "", 1)

    ROWS = [
        ("Write a short note about a lost cat.", ["Your entire response should be in lowercase letters.",
                                                   "Include the keyword whiskers in the response."]),
        ("Write a short note about a found dog.", ["Your entire response should be in lowercase letters.",
                                                    "Include the keyword collar in the response."]),
    ]

    def load(self, path=None, split=None):
        return [Example(id=f"c{i}", prompt=base + " " + " ".join(s), data={"sentences": s},
                        source=f"mini-constraints:{i + 1}") for i, (base, s) in enumerate(self.ROWS)]

    def reference(self, ex):
        kw = ex.data["sentences"][1].split("keyword ")[1].split(" ")[0]
        return f"i am looking for my pet. it answers to {kw}."

    def rewards(self, ex):
        def lower(e, r):
            ok = r.strip() != "" and r == r.lower()
            return Verdict(1.0 if ok else 0.0, "" if ok else "the response has capital letters")

        kw = ex.data["sentences"][1].split("keyword ")[1].split(" ")[0]

        def keyword(e, r):
            ok = kw in r.lower()
            return Verdict(1.0 if ok else 0.0, "" if ok else f"the keyword {kw!r} is missing")

        s0, s1 = ex.data["sentences"]
        b1 = f"The response contains the keyword {kw}." if self.paraphrase else s1
        return [Reward("change_case:english_lowercase", lower, lambda e, v: s0, kind="constraint"),
                Reward("keywords:existence", keyword, lambda e, v: b1, kind="constraint")]
