"""`math-word`: a math word problem, answered with the final number in \\boxed{}.

Three rewards, each with the block (Z_k) that carries what its verifier checks:

| reward    | score                                        | block (kind)                                   |
|-----------|----------------------------------------------|------------------------------------------------|
| `format`  | 1 if the response ends with one \\boxed{...}  | the format rule (format)                       |
| `correct` | 1 if the boxed number equals the reference   | the reference answer, boxed (reference)        |
| `length`  | 1 up to `max_chars`, then falling to 0 at    | the response's own length, when it is too long |
|           | twice that                                   | ("" otherwise) (feedback, response-dependent)  |

docs/custom-tasks.md in the mrtpo repository builds this file step by step.
"""
from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

from mrtpo.formats import DelimitedFormat
from mrtpo.tasks import Example, ProbeEdit, Reward, Task, Verdict

REQUIRED = ("question", "solution", "answer")


class DataError(ValueError):
    """A dataset row that cannot be used; the message names the file, line and field."""


class MathWordTask(Task):
    """Math word problems (the bundled 10-row sample, or a JSONL file in its layout).

    Keyword arguments (`-o KEY=VALUE` on the command line):
    - `max_chars`: responses up to this many characters get full `length` marks;
    - `think`: ask for reasoning inside <think></think> before the answer.
    """

    name = "math-word"
    placement = "append"
    description = "Math word problems: the final number in \\boxed{}; rewards format, correct, length."
    reward_names = ("format", "correct", "length")

    def __init__(self, max_chars: int = 200, think: bool = False) -> None:
        if not isinstance(max_chars, int) or max_chars < 1:
            raise ValueError(f"max_chars={max_chars!r}: give a whole number >= 1")
        self.max_chars = max_chars
        self.format = DelimitedFormat("\\boxed{", "}", think=think, name="boxed")

    # --- data ------------------------------------------------------------------------------
    def load(self, path: str | None = None, split: str | None = None) -> list[Example]:
        """One example per JSONL line: {"id", "question", "solution", "answer"}."""
        if path is None:
            source = resources.files("mrtpo_example_math").joinpath("data/sample.jsonl")
            name, text = "mrtpo_example_math/data/sample.jsonl", source.read_text(encoding="utf-8")
        else:
            p = Path(path)
            if not p.is_file():
                raise DataError(f"{p}: no such file; give a JSONL file with one "
                                '{"question", "solution", "answer"} object per line')
            name, text = str(p), p.read_text(encoding="utf-8")
        examples = [self._example(_row(line, name, n), name, n)
                    for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        if not examples:
            raise DataError(f"{name}: no rows")
        return examples

    def _example(self, row: dict, name: str, n: int) -> Example:
        prompt = f"{row['question']}\n\n{self.format.instruction}"
        return Example(id=str(row.get("id", f"row-{n}")), prompt=prompt, source=f"{name}:{n}",
                       data={"question": row["question"], "solution": row["solution"],
                             "answer": str(row["answer"]).strip()})

    # --- rewards ---------------------------------------------------------------------------
    def rewards(self, example: Example) -> list[Reward]:
        return [
            Reward("format", self._verify_format, self._format_block, kind="format"),
            Reward("correct", self._verify_correct, self._correct_block, kind="reference"),
            Reward("length", self._verify_length, self._length_block, kind="feedback",
                   response_dependent=True),
        ]

    def _verify_format(self, example: Example, response: str) -> Verdict:
        parsed = self.format.parse(response)
        return Verdict(1.0 if parsed.strict else 0.0, parsed.error)

    def _format_block(self, example: Example, verdict: Verdict) -> str:
        return self.format.rule

    def _verify_correct(self, example: Example, response: str) -> Verdict:
        parsed = self.format.parse(response)  # lenient: text after the box still counts here
        if parsed.answer is None:
            return Verdict(0.0, parsed.error)
        got, want = _number(parsed.answer), _number(example.data["answer"])
        if got is not None and got == want:
            return Verdict(1.0)
        return Verdict(0.0, f"the boxed answer is {parsed.answer}")

    def _correct_block(self, example: Example, verdict: Verdict) -> str:
        return self.format.render_body(example.data["answer"])  # "\boxed{12}", as the policy writes it

    def _verify_length(self, example: Example, response: str) -> Verdict:
        n = len(response)
        if n <= self.max_chars:
            return Verdict(1.0)
        over = n - self.max_chars
        return Verdict(max(0.0, 1.0 - over / self.max_chars),
                       f"the response has {n} characters, {over} more than the {self.max_chars} allowed")

    def _length_block(self, example: Example, verdict: Verdict) -> str:
        return (verdict.feedback[0].upper() + verdict.feedback[1:] + ".") if verdict.feedback else ""

    # --- a correct response, and edits of it -------------------------------------------------
    def reference(self, example: Example) -> str:
        if self.format.think:
            return self.format.render(example.data["answer"], think=example.data["solution"])
        return example.data["solution"] + "\n" + self.format.render(example.data["answer"])

    def probe_edits(self, example: Example) -> list[ProbeEdit]:
        """One edit of the reference per reward, `span` covering the changed characters."""
        ref = self.reference(example)
        box = self.format.render_body(example.data["answer"])
        at = ref.rindex(box)
        answer = example.data["answer"]
        wrong = str(int(answer) + 1) if answer.isdigit() else answer + "0"
        a = at + len(self.format.open)  # the answer inside the box
        correct = ref[:a] + wrong + ref[a + len(answer):]
        extra = " That is the answer."  # text after the box: the format fails, the answer holds
        pad = "I check the sum once more. " * (self.max_chars // 27 + 1)  # too long
        return [
            ProbeEdit("correct", "answer value", correct, (a, a + len(wrong))),
            ProbeEdit("format", "text after the answer", ref + extra, (len(ref), len(ref) + len(extra))),
            ProbeEdit("length", "padding", ref[:at] + pad + ref[at:], (at, at + len(pad))),
        ]


def _row(line: str, name: str, n: int) -> dict:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"{name}, line {n}: not valid JSON ({exc})") from None
    if not isinstance(row, dict):
        raise DataError(f"{name}, line {n}: a JSON {type(row).__name__}, not an object")
    for key in REQUIRED:
        if not isinstance(row.get(key), (str, int, float)) or not str(row[key]).strip():
            raise DataError(f"{name}, line {n}, field {key!r}: missing or empty; each row needs "
                            f"{', '.join(REQUIRED)}")
    return row


def _number(text: str) -> float | None:
    """"1,200", "$14", "14.0" -> 1200.0, 14.0, 14.0; None when the text is not a number."""
    t = re.sub(r"[,\s$]", "", str(text)).removesuffix(".")
    try:
        return float(t)
    except ValueError:
        return None
