"""Preview records: what each reward scores, says and writes for one example and response.

One record per (example, response), as plain data (JSON-ready) so the CLI can print it as
rich tables, plain text or JSON lines:

    task, example, source, response_name, response,
    P0            the prompt sampling uses (chat messages),
    rewards       per reward: name, kind, weight, response_dependent, score, feedback, block,
    contexts      placement; P_all as its changes from P0; each P_without_k as its changes
                  from P_all (what was removed, what was added), so only what differs shows,
    findings      the lint's findings for this example and response,
    waived        findings a reward waives (`Reward.waive`), each with its reason.
"""
from __future__ import annotations

from typing import Iterator

from mrtpo.blocks.check import Messages, ResponseCheck, check_response
from mrtpo.blocks.samples import NamedResponse, sample_responses
from mrtpo.tasks.base import Example, Task


def _one_hunk(a: str, b: str) -> tuple[str, str]:
    """(removed, added): the middle of `a` and `b` once their common prefix and suffix are cut,
    with the cuts moved back to whitespace so a word shared by chance ("<tool" in "<tools>"
    and "<tool_call>") does not split the piece. A context differs from its neighbour by one
    contiguous edit (blocks appended, or one block removed), so one hunk says it exactly."""
    def ws(t: str, i: int) -> bool:
        return 0 <= i < len(t) and t[i].isspace()

    p = 0
    while p < min(len(a), len(b)) and a[p] == b[p]:
        p += 1
    while p > 0 and not (p in (len(a), len(b)) or ws(a, p - 1) or ws(a, p) or ws(b, p)):
        p -= 1
    s = 0
    while s < min(len(a), len(b)) - p and a[len(a) - 1 - s] == b[len(b) - 1 - s]:
        s += 1
    while s > 0 and not (p in (len(a) - s, len(b) - s) or ws(a, len(a) - s)
                         or ws(a, len(a) - s - 1) or ws(b, len(b) - s - 1)):
        s -= 1
    return a[p:len(a) - s], b[p:len(b) - s]


def message_changes(before: Messages | None, after: Messages | None) -> list[dict]:
    """What differs between two message lists, per message: the removed and added text."""
    if before is None or after is None:
        return []
    out = []
    n = max(len(before), len(after))
    for i in range(n):
        a = before[i] if i < len(before) else {"role": "", "content": ""}
        b = after[i] if i < len(after) else {"role": "", "content": ""}
        if a == b:
            continue
        removed, added = _one_hunk(str(a.get("content", "")), str(b.get("content", "")))
        out.append({"message": i, "role": b.get("role") or a.get("role"),
                    "removed": [removed.strip()] if removed.strip() else [],
                    "added": [added.strip()] if added.strip() else []})
    return out


def record(task: Task, checked: ResponseCheck) -> dict:
    """The preview record of one checked (example, response)."""
    ex = checked.example
    rewards = []
    for k, r in enumerate(checked.rewards):
        v = checked.verdicts[k] if k < len(checked.verdicts) else None
        rewards.append({
            "name": r.name,
            "kind": checked.kinds[k] if k < len(checked.kinds) else r.kind,
            "weight": r.weight,
            "response_dependent": r.response_dependent,
            "score": None if v is None else v.score,
            "feedback": None if v is None else v.feedback,
            "block": checked.blocks[k] if k < len(checked.blocks) else None,
        })
    without = []
    if checked.p_without is not None:
        for r, pw in zip(checked.rewards, checked.p_without):
            without.append({"reward": r.name, "changes": message_changes(checked.p_all, pw)})
    return {
        "task": task.name,
        "example": ex.id,
        "source": ex.source,
        "response_name": checked.response_name,
        "response": checked.response,
        "P0": checked.p0,
        "rewards": rewards,
        "contexts": {
            "placement": task.placement,
            "P_all": {"changes_from_P0": message_changes(checked.p0, checked.p_all)} if checked.p_all is not None else None,
            "P_without": without,
        },
        "findings": [f.to_dict() for f in checked.findings],
        "waived": [f.to_dict() for f in checked.waived],
    }


def preview(task: Task, examples: list[Example],
            responses: dict[str, list[NamedResponse]] | None = None) -> Iterator[dict]:
    """Preview records for each example and each of its responses (the reference and a
    corrupted copy when `responses` has none for the example)."""
    for example in examples:
        pr = (responses.get(example.id) if responses is not None else None) or sample_responses(task, example)
        for i, (name, text) in enumerate(pr):
            yield record(task, check_response(task, example, name, text, try_builders=(i == 0)))
