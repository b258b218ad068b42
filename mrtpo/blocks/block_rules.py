"""One block in its context (example, verdict, reward, format): R2's "nothing taken from the
example", R4 (only this response's own feedback), R5 (references in the policy's own form) and
R6's in-prompt presence. `check_block` runs them with `check_text`; `infer_kind` says which
apply when a reward does not state its block's kind.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Sequence

from mrtpo.blocks.findings import FULL_MARKS, Finding
from mrtpo.blocks.prose import GENERIC, STOPWORDS, _FENCE_RE, _TOOL_RE, _norm, _payload_groups, split_text
from mrtpo.blocks.text_rules import check_text
from mrtpo.formats import CodeBlockFormat, Format, TextFormat, ToolCallFormat
from mrtpo.tasks.base import Example, Reward, Verdict
from mrtpo.tasks.contract import USER_CODE_ERRORS

def format_markers(fmt: Format | None) -> list[str]:
    """Text a statement of this format's rule necessarily mentions: the format's `markers`
    (a fence opener, a tag, "\\boxed{"), and "<think>" when it asks for reasoning first."""
    if fmt is None:
        return []
    rule_markers = getattr(fmt, "rule_markers", None)
    if callable(rule_markers):
        return list(rule_markers())
    return list(getattr(fmt, "markers", ())) + (["<think>"] if getattr(fmt, "think", False) else [])


def has_format_payload(block: str, fmt: Format | None) -> bool:
    """Whether the block holds an answer written in the format (a fence, tool-call tags, a
    marked answer such as `\\boxed{12}`)."""
    if isinstance(fmt, CodeBlockFormat):
        return bool(_FENCE_RE.search(block))
    if isinstance(fmt, ToolCallFormat):
        return any(m.group(1).strip() for m in _TOOL_RE.finditer(block))
    if fmt is None or isinstance(fmt, TextFormat) or not getattr(fmt, "markers", ()):
        return False
    if not any(m in block for m in fmt.markers):
        return False
    try:
        return fmt.parse(as_response(block, fmt)).answer is not None
    except USER_CODE_ERRORS:
        return False


def infer_kind(block: str, *, reward: Reward | None = None, fmt: Format | None = None,
               placement: str = "append") -> str:
    """The block's kind: `reward.kind` when set, else worked out from the structure.

    Inference (used only when the reward does not say): a response-dependent reward's block
    is "feedback"; a block equal to the format's rule is "format"; with "in_prompt"
    placement, "constraint"; a block holding an answer in the task's format (a ```sql fence,
    <tool_call> tags) is "reference"; a block that is one JSON value is "schema"; else "".
    """
    if reward is not None and getattr(reward, "kind", ""):
        return reward.kind
    if reward is not None and reward.response_dependent:
        return "feedback"
    if fmt is not None and _norm(block) and _norm(block) == _norm(fmt.rule):
        return "format"
    if placement == "in_prompt":
        return "constraint"
    if has_format_payload(block, fmt):
        return "reference"
    try:
        if isinstance(json.loads(block), (dict, list)):
            return "schema"
    except (ValueError, TypeError):
        pass
    return ""


def flatten_strings(value: Any) -> list[str]:
    """Every string and number inside a nested structure (dict values, list items)."""
    out: list[str] = []
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, (int, float)):
        if not (isinstance(value, float) and math.isnan(value)):
            out.append(str(value))
    elif isinstance(value, dict):
        for v in value.values():
            out += flatten_strings(v)
    elif isinstance(value, (list, tuple, set)):
        for v in value:
            out += flatten_strings(v)
    return out


def distinctive_tokens(text: str) -> set[str]:
    """Tokens that can carry example-specific information: identifiers, numbers, and words
    that are neither stop words nor generic task vocabulary."""
    out = set()
    for tok in re.findall(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?", text):
        low = tok.lower()
        if any(c.isdigit() for c in tok) or ("_" in tok and len(tok) > 1):
            out.add(low)
        elif len(low) >= 3 and low not in STOPWORDS and low not in GENERIC:
            out.add(low)
    return out


def score_of(result: Any) -> float | None:
    """The score of what a verifier returned, when it is a Verdict with a finite real score and
    text (or no) feedback: what the lint may compare and quote. None for anything else (the
    lint reports that as R6 where the response is checked, and must not crash on it)."""
    if not isinstance(result, Verdict) or not isinstance(result.feedback, (str, type(None))):
        return None
    s = result.score
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
        return None
    return float(s)


def check_feedback(block: str, verdict: Verdict | None) -> list[Finding]:
    """R4 for one built block: empty when the verifier gave no feedback, else its own words."""
    if not block.strip() or verdict is None:
        return []
    fb = verdict.feedback or ""
    if not fb.strip():
        return [Finding("R4", "invented-feedback",
                        "the verifier gave no feedback for this response, yet the block says "
                        "something; return '' when the verdict's feedback is empty", block[:60])]
    nb, nf = _norm(block).lower(), _norm(fb).lower().rstrip(".")
    if nf in nb or (len(nf) > 40 and nf[:40] in nb):
        return []
    return [Finding("R4", "not-own-feedback",
                    "the block does not quote this response's feedback from the verifier; build "
                    "it from verdict.feedback (quoted verbatim, optionally in a sentence)",
                    block[:60])]


def try_feedback_builder(reward: Reward, example: Example) -> list[Finding]:
    """R4 by trying the builder: with an empty feedback it must return '' (any score)."""
    found = []
    for score in sorted({reward.floor, FULL_MARKS}):
        try:
            text = reward.block(example, Verdict(score=score, feedback=""))
        except USER_CODE_ERRORS as exc:  # a builder that cannot handle "no feedback" is a finding
            return [Finding("R4", "builder-error",
                            f"the block builder raised {type(exc).__name__}: {exc} when the "
                            "verdict has no feedback; it must return '' then")]
        if isinstance(text, str) and text.strip():
            found.append(Finding(
                "R4", "invented-feedback",
                f"with no feedback from the verifier (score {score:g}) the block builder still "
                "writes text; return '' when the verdict's feedback is empty", text[:60]))
            break
    return found


def as_response(block: str, fmt: Format) -> str:
    """The block as the policy would write it: a think format gets an empty thought first."""
    if fmt.think and not block.lstrip().startswith("<think>"):
        return "<think>\n</think>\n" + block.strip()
    return block


def reference_payload(block: str) -> str | None:
    """The answer inside a block that has exactly one payload (one fence, or adjacent tool
    calls), without the prose around it; None otherwise."""
    split = split_text(block)
    if _payload_groups(split) != 1:
        return None
    return "\n".join(text for kind, text in split.payloads if kind != "json") or None


def check_reference(block: str, *, fmt: Format | None, reward: Reward | None = None,
                    example: Example | None = None) -> list[Finding]:
    """R5: the reference parses strictly with the task's format and gets full marks."""
    if not block.strip() or fmt is None:
        return []
    response = as_response(block, fmt)
    parsed = fmt.parse(response)
    if not parsed.strict:
        return [Finding("R5", "not-policy-form",
                        f"the reference does not parse with the task's {fmt.name} format "
                        f"({parsed.error}); render it with task.format.render(answer)", block[:60])]
    if reward is None or example is None:
        return []
    try:
        verdict = reward.verify(example, response)
    except USER_CODE_ERRORS as exc:
        return [Finding("R5", "verify-error",
                        f"scoring the reference raised {type(exc).__name__}: {exc}")]
    if score_of(verdict) is None:  # not a usable verdict: R6 reports it where the response is checked
        return []
    if not (verdict.score >= FULL_MARKS):
        why = f": {verdict.feedback}" if verdict.feedback else ""
        return [Finding("R5", "not-full-marks",
                        f"scored by its own reward the reference gets {verdict.score:g}, not "
                        f"{FULL_MARKS:g}{why}; the reference must be an answer that reward accepts "
                        "(same tags, fences and argument types)", block[:60])]
    return []


def _bare_answer(block: str, fmt: Format):
    """The answer a block would be if it were a reference written without the format's
    wrapping (a bare query, a call as plain JSON); None when it does not look like one."""
    text = block.strip()
    if isinstance(fmt, CodeBlockFormat):
        return None if "```" in text or "\n\n" in text else text
    if isinstance(fmt, ToolCallFormat):
        try:
            obj = json.loads(text)
        except ValueError:
            return None
        calls = [obj] if isinstance(obj, dict) else obj
        if isinstance(calls, list) and calls and all(
                isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("arguments"), dict)
                for c in calls):
            return calls
    return None


def check_bare_answer(block: str, *, fmt: Format | None, reward: Reward | None,
                      example: Example | None) -> list[Finding]:
    """R5 for a block whose reward does not say it is a reference: if the block, wrapped in the
    task's format, is an answer that gets full marks from its reward, it is a reference
    written outside the policy's form (a bare query, a call without its tags)."""
    if fmt is None or reward is None or example is None or not block.strip():
        return []
    if fmt.parse(as_response(block, fmt)).strict:
        return []
    answer = _bare_answer(block, fmt)
    if answer is None:
        return []
    try:
        score = score_of(reward.verify(example, fmt.render(answer)))
    except USER_CODE_ERRORS:
        return []
    if score is not None and score >= FULL_MARKS:
        return [Finding("R5", "not-policy-form",
                        f"the block is this example's answer but not in the task's {fmt.name} "
                        "format (the policy writes it wrapped); render it with "
                        "task.format.render(answer)", block[:60])]
    return []


def check_specific(block: str, *, kind: str, example: Example | None, verdict: Verdict | None,
                   fmt: Format | None, reference: str | None = None) -> list[Finding]:
    """R2: the block carries something from this example's label or the verifier's output.

    A format block must mention its format's markers (```sql, <tool_call>...). Other blocks
    must share at least one distinctive token (identifier, number, non-generic word) with the
    example's prompt or data, the reference, or the verdict's feedback.
    """
    if not block.strip():
        return []
    if kind == "format":
        marks = format_markers(fmt)
        if marks and not any(m in block for m in marks):
            return [Finding("R2", "generic",
                            "the format block does not state the format (it mentions none of "
                            f"{', '.join(marks)}); use task.format.rule", block[:60])]
        if not marks and fmt is not None and not (distinctive_tokens(block) & distinctive_tokens(
                _safe_rule(fmt))):
            return [Finding("R2", "generic",
                            "the format block shares nothing with the format's own rule "
                            f"({_safe_rule(fmt)[:60]!r}); use task.format.rule, and give the "
                            "format `markers` so the lint knows what a statement of it mentions",
                            block[:60])]
        return []
    if kind == "constraint" or example is None:
        return []
    sources = [example.prompt, example.system or ""] + flatten_strings(example.data)
    sources += [reference or "", verdict.feedback if verdict else ""]
    have = set()
    for s in sources:
        have |= distinctive_tokens(s)
    mine = distinctive_tokens(block)
    if mine & have:
        return []
    return [Finding("R2", "generic",
                    "the block holds nothing taken from this example (its label, prompt, "
                    "reference) or the verifier's output: a generic requirement carries no "
                    "information; build it from the example's data or the verdict", block[:60])]


def _safe_rule(fmt: Format) -> str:
    try:
        return str(fmt.rule)
    except USER_CODE_ERRORS:
        return ""


def prompt_text(messages: Sequence[dict[str, str]]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages)


def check_in_prompt(block: str, p0_messages: Sequence[dict[str, str]]) -> list[Finding]:
    """R6 for in-prompt placement: the block is found verbatim in P0, so it can be removed."""
    if not block.strip():
        return []
    if block.strip() in prompt_text(p0_messages):
        return []
    return [Finding("R6", "not-in-prompt",
                    "with in_prompt placement the block must be the exact text of P0 it stands "
                    "for, so P_without_k can remove it; this text is not in P0", block[:60])]


def check_block(block: str, *, kind: str = "", example: Example | None = None,
                verdict: Verdict | None = None, reward: Reward | None = None,
                fmt: Format | None = None, placement: str = "append",
                p0_messages: Sequence[dict[str, str]] | None = None,
                reference: str | None = None, try_builder: bool = True) -> list[Finding]:
    """Every single-block check: `check_text` plus R2, R4, R5 and R6's in-prompt presence.

    `kind` overrides the reward's; when both are empty it is inferred (`infer_kind`).
    `try_builder=True` also calls the reward's builder with synthetic verdicts (R4). A reference
    block is always scored by `reward.verify` when a reward and example are given (R5).
    """
    if not isinstance(block, str):
        return check_text(block)  # reports the type error
    kind = kind or infer_kind(block, reward=reward, fmt=fmt, placement=placement)
    found: list[Finding] = []
    if kind == "feedback" and reward is not None and example is not None and try_builder:
        found += try_feedback_builder(reward, example)
    if not block.strip():
        return found
    quoted = [verdict.feedback] if verdict and verdict.feedback else []
    # the format's own markers ("Answer:", "\\boxed{") are the answer's form, not prose: a
    # marker that reads like a label or an imperative is not one
    quoted += [m for m in getattr(fmt, "markers", ()) if isinstance(m, str)]
    if example is not None:
        quoted += [s for s in flatten_strings(example.data) if len(s) >= 3]
    found += check_text(block, placement=placement, quoted=quoted)
    if not any(f.check == "generic-requirement" for f in found):
        found += check_specific(block, kind=kind, example=example, verdict=verdict, fmt=fmt,
                                reference=reference)
    if kind == "feedback":
        found += check_feedback(block, verdict)
    if kind == "reference" and not any(f.rule == "R1" for f in found):
        # R5 judges the answer itself: a label around it is R3's finding, a second payload
        # R1's, so with a label the payload alone is checked (a merged block is not)
        payload = reference_payload(block) if any(f.check == "label" for f in found) else None
        found += check_reference(payload or block, fmt=fmt, reward=reward, example=example)
    if kind == "" and not any(f.rule == "R1" for f in found):
        found += check_bare_answer(block, fmt=fmt, reward=reward, example=example)
    if placement == "in_prompt" and p0_messages is not None:
        found += check_in_prompt(block, p0_messages)
    return found
