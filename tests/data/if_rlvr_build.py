"""Writes if_rlvr_sample.jsonl: rows in IF-RLVR's format, built the way IF-RLVR was built.

`allenai/IF_multi_constraints_upto5` is Tulu-style prompts with one to five constraints
appended, drawn from IFEvalG's 54 ids under its conflict dictionary; each constraint's text is
its class's `build_description(...)` and its kwargs are `get_instruction_args()` (None where
the class has none). This script does the same with the vendored reference code
(tests/oracle/vendor, open-instruct's IFEvalG), so kwargs have the real shapes and values
(random keywords, letters, languages, phrases, spans). Columns are the data set's: `key`,
`messages`, `ground_truth` (a Python-literal string), `dataset`, `constraint_type`,
`constraint` (the constraint texts joined by spaces, appended to the request after a space).

Run `python tests/data/if_rlvr_build.py` after editing; the JSONL is what the tests read.
Needs NLTK (imported by the reference code; no NLTK data is used while building).
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "oracle" / "vendor"))

from open_instruct.IFEvalG import instructions_registry, instructions_util  # noqa: E402

SEED = 21
ROWS = 200
BASES = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how vaccines train the immune system.",
    "What are the main differences between TCP and UDP?",
    "Summarize the plot of Romeo and Juliet for a ten-year-old.",
    "Give me three tips for keeping houseplants alive in winter.",
    "Translate the following sentence to French: The library opens at nine.",
    "Write a limerick about a cat who loves to swim.",
    "Premise: A man is playing a guitar on stage.\nHypothesis: A musician performs.\nDoes the premise entail the hypothesis?",
    "Describe the water cycle in simple terms.",
    "Draft an email to a colleague asking to move our meeting to Thursday.",
    "Why is the sky blue?",
    "List some advantages of learning a second language.",
    "Write a product description for a reusable water bottle.",
    "How do I compute the median of a list in Python?",
    "Compose a haiku about autumn leaves.",
    "What should I pack for a three-day hiking trip?",
    "Explain the rules of chess to a beginner.",
    "Write a motivational message for a student before an exam.",
    "Q: If a train travels 60 miles in 1.5 hours, what is its average speed?\nA:",
    "Describe your ideal weekend.",
]
#: kwargs the request supplies (IF-RLVR passes the base request to these classes)
FROM_PROMPT = {"combination:repeat_prompt", "copy:copy", "new:copy_span_idx", "copy:copying_simple",
               "copy:copying_multiple"}


def build_rows(seed: int = SEED, n: int = ROWS) -> list[dict]:
    rng = random.Random(seed)
    random.seed(seed)  # the reference classes draw from the global generator
    ids = list(instructions_registry.INSTRUCTION_DICT)
    conflicts = instructions_registry.conflict_make(
        {k: set(v) for k, v in instructions_registry.INSTRUCTION_CONFLICTS.items()})
    rows = []
    for i in range(n):
        base = BASES[i % len(BASES)]
        # every id at least once, in order, then random draws; up to five per row
        chosen = [ids[i % len(ids)]] if i < 2 * len(ids) else []
        for _ in range(rng.randint(1, 5) - len(chosen)):
            free = [c for c in ids if c not in chosen and not any(c in conflicts.get(x, ()) for x in chosen)]
            if free:
                chosen.append(rng.choice(free))
        texts, kwargs = [], []
        for iid in chosen:
            inst = instructions_registry.INSTRUCTION_DICT[iid](iid)
            if iid in FROM_PROMPT:
                texts.append(inst.build_description(prompt_to_repeat=base))
            elif iid == "keywords:exclude_word_harder":
                texts.append(inst.build_description(instruction=base))
            elif iid == "count:count_increment_word":  # its own draw gives lists, which its check cannot read
                k1, k2 = instructions_util.generate_keywords(num_keywords=2)
                texts.append(inst.build_description(keyword1=k1, keyword2=k2))
            else:
                texts.append(inst.build_description())
            kwargs.append(inst.get_instruction_args() or None)
        constraint = " ".join(t.strip() for t in texts)
        rows.append({
            "key": f"if-rlvr-sample-{i}",
            "messages": [{"role": "user", "content": f"{base} {constraint}"}],
            "ground_truth": str([{"instruction_id": chosen, "kwargs": kwargs}]),
            "dataset": "ifeval",
            "constraint_type": "multi",
            "constraint": constraint,
        })
    return rows


if __name__ == "__main__":
    out = HERE / "if_rlvr_sample.jsonl"
    with open(out, "w", encoding="utf-8") as f:
        for row in build_rows():
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {out}")
