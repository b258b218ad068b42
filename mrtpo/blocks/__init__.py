"""Blocks (Z_k): the writing-rules lint and the preview of what each reward writes.

- `mrtpo.blocks.rules`: the rules R1-R6 as checks; `check_text(text)` lints one block's text
  (custom tasks call it on their own blocks), `check_block(...)` one block in its context.
- `mrtpo.blocks.lint`: `lint_task(task, examples)` over a dataset (`mrtpo blocks lint`).
- `mrtpo.blocks.preview`: preview records (`mrtpo blocks preview`).
"""
from mrtpo.blocks.rules import RULES, Finding, check_block, check_text

__all__ = ["RULES", "Finding", "check_block", "check_text"]
