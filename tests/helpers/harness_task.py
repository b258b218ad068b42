"""A small task for the harness tests: real verifiers on real strings, varying K, real blocks.

The policy is asked to answer with a word in lowercase inside <answer></answer> tags. Its
rewards are graded so that even a random tiny model's outputs spread (a group needs spread
for advantages to be non-zero):
- `format`: 1 if the response is exactly `<answer>...</answer>`, else the share of the two
  tags present (0, 0.5); block: the format rule.
- `short`: 1 - len/40, clipped to [0, 1]; block: the response's own length (response-dependent).
- `letters`: share of the response's characters that are ASCII letters; block: the rule.
- `word` (only on examples with a target word: K varies per example): 1 if the word occurs;
  block: the reference answer.
"""
from __future__ import annotations

import re

from mrtpo.tasks.base import Example, Reward, Task, Verdict

WORDS = ["select", "count", "singer", "weather", "poem", "table", "name", "answer"]


def _format(ex: Example, response: str) -> Verdict:
    if re.fullmatch(r"\s*<answer>[^<]*</answer>\s*", response):
        return Verdict(1.0)
    present = ("<answer>" in response) + ("</answer>" in response)
    return Verdict(present / 2, f"{2 - present} of the two <answer> tags missing")


def _short(ex: Example, response: str) -> Verdict:
    return Verdict(max(0.0, 1.0 - len(response) / 40), f"{len(response)} characters")


def _letters(ex: Example, response: str) -> Verdict:
    if not response:
        return Verdict(0.0, "empty response")
    n = sum(c.isascii() and c.isalpha() for c in response)
    return Verdict(n / len(response))


def _word(ex: Example, response: str) -> Verdict:
    ok = ex.data["word"] in response.lower()
    return Verdict(1.0 if ok else 0.0, "" if ok else f"the word {ex.data['word']!r} is missing")


class WordTask(Task):
    name = "harness-words"
    placement = "append"
    reward_names = ["format", "short", "letters", "word (some examples)"]

    def __init__(self, n: int = 8):
        self.n = n

    def load(self, path=None, split=None):
        if path is not None:
            import json
            from pathlib import Path

            rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
            return [Example(str(i), r["prompt"], data={"word": r.get("word")}, source=f"{path}:{i + 1}")
                    for i, r in enumerate(rows)]
        out = []
        for i in range(self.n):
            word = WORDS[i % len(WORDS)] if i % 2 == 0 else None
            prompt = (f"Write the word {word} in lowercase inside <answer></answer> tags." if word
                      else "Write any short word in lowercase inside <answer></answer> tags.")
            out.append(Example(f"w{i}", prompt, data={"word": word}, source=f"sample:{i}"))
        return out

    def rewards(self, example):
        rs = [
            Reward("format", _format, lambda ex, v: "A correct response is exactly <answer>word</answer>."),
            Reward("short", _short, lambda ex, v: f"Your response has {v.feedback}.", weight=0.5,
                   response_dependent=True),
            Reward("letters", _letters, lambda ex, v: "Use letters only inside the tags."),
        ]
        if example.data.get("word"):
            rs.append(Reward("word", _word, lambda ex, v: f"The answer is <answer>{ex.data['word']}</answer>."))
        return rs

    def reference(self, example):
        return f"<answer>{example.data.get('word') or 'yes'}</answer>"


class BrokenTask(WordTask):
    """WordTask with one reward that breaks the contract in the way `mode` says."""

    name = "harness-broken"

    def __init__(self, mode: str = "nan", n: int = 4):
        super().__init__(n)
        self.mode = mode

    def rewards(self, example):
        def verify(ex, response):
            if self.mode == "nan":
                return Verdict(float("nan"))
            if self.mode == "list":
                return [Verdict(1.0), Verdict(0.0)]
            if self.mode == "raise":
                raise KeyError("gold")
            if self.mode == "sleep":
                import time

                time.sleep(30)
            return Verdict(1.0)

        return super().rewards(example) + [Reward("fragile", verify, lambda ex, v: "")]


def register() -> None:
    """Make both tasks available by name (registering the same class again is harmless)."""
    from mrtpo.tasks import register_task

    register_task("harness-words")(WordTask)
    register_task("harness-broken")(BrokenTask)
