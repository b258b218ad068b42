"""open-instruct's single IF-RLVR reward, computed with this project's checkers.

open-instruct trains on IF-RLVR with `ground_truth_utils.IFEvalVerifier`: it cuts the response
to its answer (`remove_thinking_section`: drop `<|assistant|>`, keep the text after the last
`</think>`, drop `<answer>` tags, strip), scores 0 when that answer is empty, and otherwise
returns the *fraction* of the row's constraints whose strict check passes on it. This project
instead gives each constraint its own 0/1 reward (so the estimator and MRTPO can place each
one's credit), checked on the text after a leading `<think>...</think>` block, unstripped.
The mean of our rewards and open-instruct's fraction agree wherever the two cuts give the
same checks; `mrtpo eval instruct` prints both for IF-RLVR data (data_cards/if-rlvr.md).
"""
from __future__ import annotations

from typing import Iterable

from mrtpo.verifiers.ifeval.scoring import check


def remove_thinking_section(prediction: str) -> str:
    """open-instruct's answer extraction (`ground_truth_utils.remove_thinking_section`)."""
    prediction = prediction.replace("<|assistant|>", "").strip()
    prediction = prediction.split("</think>")[-1]
    prediction = prediction.replace("<answer>", "").replace("</answer>", "")
    return prediction.strip()


def open_instruct_reward(constraints: Iterable[tuple[str, dict]], response: str) -> float:
    """`IFEvalVerifier`'s score for `response`: the fraction of `(instruction_id, kwargs)`
    constraints followed (strict) by its answer; 0.0 for an empty answer or no constraints."""
    constraints = list(constraints)
    if not isinstance(response, str):
        return 0.0
    answer = remove_thinking_section(response)
    if not response or not answer or not constraints:
        return 0.0
    return sum(check(iid, kw, answer) for iid, kw in constraints) / len(constraints)
