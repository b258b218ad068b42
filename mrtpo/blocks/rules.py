"""The block writing rules, as lint checks.

A block Z_k is only useful to MRTPO if removing it changes exactly the information reward k
checks, so blocks are written to six rules (docs/writing-blocks.md has each with a good and a
bad block). Each rule has an id, and each check a short name and a message that says what to
change:

  R1 one reward, one block      a block never merges constraints, verifiers or a feedback
                                text with a reference; each reward has one block builder
  R2 specific information       built from this example's label or the verifier's output,
                                never a generic requirement
  R3 a plain statement          no instructions to the model, no headings or labels, no
                                words about training, replay, rewards, scores or verifiers
  R4 only this response's       a feedback block is empty when the verifier said nothing,
     own feedback               and quotes the verifier's own words otherwise
  R5 references in the          a reference block parses with the task's format and gets
     policy's own form          full marks from its paired reward
  R6 consistency                prompt, rewards and blocks agree (P_without_k is P_all minus
                                block k, P0 is what sampling used, declared dependence holds)

Three layers, from cheap to complete:
- `check_text(text)`: text alone (R1 merges that show in the text, all of R3, and R2's
  generic requirements such as "The answer must be correct."). Custom tasks call it on their
  own blocks.
- `check_block(...)`: one block in its context (example, verdict, reward, format): R2's
  "nothing taken from the example", R4, R5 and R6's in-prompt presence, plus `check_text`.
- dataset-level checks over checked examples, in `mrtpo.blocks.lint`, which call the
  functions of `dataset_rules` (R1 structure, R2 identical blocks, R6 contexts).

This module is the rules' one import path; the code is in the modules named for what they hold:
`findings` (RULES, KINDS, Finding), `prose` (what in a block is prose and what is payload),
`text_rules` (check_text: R1 in the text, R2's generic requirements, R3), `block_rules`
(check_block: R2, R4, R5, R6 in the prompt; infer_kind) and `dataset_rules` (R1, R2, R6 over a
dataset; waivers).

Kinds. A block's kind says which checks apply: "format", "feedback", "reference",
"constraint", "schema" or "" (other). A reward states it with `Reward.kind`; when that is
empty, `infer_kind` works it out from the block's structure (see there). A reward can waive
one rule, or one check of a rule, with a reason (`Reward.waive`); `split_waived` sets such
findings apart, and the lint summary lists them with the reason.

Heuristics are measured, not assumed: tests/blocks/test_blocks_corpus.py runs the lint over a
corpus of good and bad blocks and reports precision and recall.
"""
from __future__ import annotations

from mrtpo.blocks.block_rules import (as_response, score_of, check_bare_answer, check_block, check_feedback,
                                      check_in_prompt, check_reference, check_specific, distinctive_tokens,
                                      flatten_strings, format_markers, has_format_payload, infer_kind,
                                      prompt_text, reference_payload, try_feedback_builder)
from mrtpo.blocks.dataset_rules import (check_contexts, check_declared_dependence, check_identical_across,
                                        check_rewards, check_shared_blocks, check_verdict, check_waivers,
                                        split_waived, waiver)
from mrtpo.blocks.findings import FULL_MARKS, KINDS, RULES, Finding
from mrtpo.blocks.prose import GENERIC, STOPWORDS, own_words, split_text
from mrtpo.blocks.text_rules import VAGUE, check_generic_requirement, check_text

__all__ = [
    "FULL_MARKS", "Finding", "GENERIC", "KINDS", "RULES", "STOPWORDS", "VAGUE", "as_response",
    "check_bare_answer", "check_block", "check_contexts", "check_declared_dependence",
    "check_feedback", "check_generic_requirement", "check_identical_across", "check_in_prompt",
    "check_reference", "check_rewards", "check_shared_blocks", "check_specific", "check_text",
    "check_verdict", "score_of", "check_waivers", "distinctive_tokens", "flatten_strings", "format_markers",
    "has_format_payload", "infer_kind", "own_words", "prompt_text", "reference_payload",
    "split_text", "split_waived", "try_feedback_builder", "waiver",
]
