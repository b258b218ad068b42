"""Dataset-level checks, called by mrtpo.blocks.lint with checked examples: R1's structure
(one block per reward), R2's identical blocks across examples, R6's contexts (P_without_k is
P_all minus block k, P0 is what sampling used, declared dependence holds), and waivers.
"""
from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any, Iterable, Mapping, Sequence

from mrtpo.blocks.block_rules import prompt_text
from mrtpo.blocks.findings import KINDS, Finding
from mrtpo.blocks.prose import _norm
from mrtpo.tasks.base import Reward, Verdict

def check_rewards(rewards: Sequence[Reward]) -> list[Finding]:
    """R1/R6 structure of one example's rewards: unique names, one callable builder each."""
    found = []
    seen: set[str] = set()
    for r in rewards:
        if not isinstance(r, Reward):
            found.append(Finding("R6", "not-a-reward",
                                 f"rewards() returned a {type(r).__name__}, not a Reward"))
            continue
        if r.name in seen:
            found.append(Finding("R1", "duplicate-reward",
                                 f"two rewards are named {r.name!r}; each reward needs its own "
                                 "name (suffix a repeated constraint: 'id', 'id#2')", reward=r.name))
        seen.add(r.name)
        if not callable(r.block):
            found.append(Finding("R1", "no-builder", "the reward has no callable block builder; "
                                 "give it block(example, verdict) -> str", reward=r.name))
        if r.kind not in KINDS:
            found.append(Finding("R6", "unknown-kind", f"kind {r.kind!r} is not one of "
                                 f"{', '.join(repr(k) for k in KINDS)}", reward=r.name))
        found += check_waivers(r)
    return found


_WAIVER_KEY_RE = re.compile(r"(R[1-6])(?::([a-z0-9\-]+))?")


def check_waivers(reward: Reward) -> list[Finding]:
    """R6: `Reward.waive` maps a rule id ("R3") or a rule and check ("R3:label") to a reason."""
    waive = getattr(reward, "waive", None) or {}
    if not isinstance(waive, Mapping):
        return [Finding("R6", "bad-waiver", f"waive is a {type(waive).__name__}; give a dict "
                        '{"R3": "why this rule does not apply"}', reward=reward.name)]
    found = []
    for key, reason in waive.items():
        if not isinstance(key, str) or not _WAIVER_KEY_RE.fullmatch(key):
            found.append(Finding("R6", "bad-waiver", f"waive key {key!r} is not a rule id "
                                 '("R1".."R6") or a rule and check ("R3:label")', reward=reward.name))
        elif not isinstance(reason, str) or not reason.strip():
            found.append(Finding("R6", "bad-waiver", f"waive[{key!r}] gives no reason; say why "
                                 "the rule does not apply to this reward", reward=reward.name))
    return found


def waiver(finding: Finding, waive: Mapping[str, str] | None) -> str:
    """The reason `waive` gives for `finding` ("" when it is not waived): a "rule:check" key
    first, then the rule id. Findings about the waivers themselves are never waived."""
    if not waive or not isinstance(waive, Mapping) or finding.check == "bad-waiver":
        return ""
    for key in (f"{finding.rule}:{finding.check}", finding.rule):
        reason = waive.get(key)
        if isinstance(reason, str) and reason.strip():
            return reason.strip()
    return ""


def split_waived(findings: Iterable[Finding], waivers: Mapping[str, Mapping[str, str]]
                 ) -> tuple[list[Finding], list[Finding]]:
    """(kept, waived): `waivers` maps a reward name to its `waive`; a waived finding carries
    the reason in `Finding.waived`."""
    kept, waived = [], []
    for f in findings:
        reason = waiver(f, waivers.get(f.reward)) if f.reward else ""
        if reason:
            waived.append(replace(f, waived=reason))
        else:
            kept.append(f)
    return kept, waived


def check_shared_blocks(names: Sequence[str], blocks: Sequence[str]) -> list[Finding]:
    """R1 across one example's blocks: no block repeats or contains another reward's block."""
    found = []
    for i, a in enumerate(blocks):
        for j, b in enumerate(blocks):
            if i == j or not isinstance(a, str) or not isinstance(b, str):
                continue
            na, nb = _norm(a), _norm(b)
            if not na or not nb or len(nb) < 10:
                continue
            if na == nb and i < j:
                found.append(Finding("R1", "shared-block",
                                     f"rewards {names[i]!r} and {names[j]!r} have the same block; "
                                     "each block carries only its own reward's information",
                                     a[:60], reward=names[j]))
            elif na != nb and nb in na:
                found.append(Finding("R1", "merged",
                                     f"the block of {names[i]!r} contains the block of "
                                     f"{names[j]!r}; each block carries only its own reward's "
                                     "information", b[:60], reward=names[i]))
    return found


def check_declared_dependence(reward: Reward, built: Sequence[str]) -> list[Finding]:
    """R6: a reward declared response-independent builds the same block for every verdict."""
    texts = {b for b in built if isinstance(b, str)}
    if not reward.response_dependent and len(texts) > 1:
        return [Finding("R6", "undeclared-dependence",
                        "the block changes with the verdict but the reward says "
                        "response_dependent=False; set it to True (contexts order blocks by it)",
                        reward=reward.name)]
    return []


def check_verdict(reward: Reward, verdict: Any) -> list[Finding]:
    """R6: a verdict is a Verdict with a finite score not below the reward's floor."""
    if not isinstance(verdict, Verdict):
        return [Finding("R6", "bad-verdict", f"verify returned {type(verdict).__name__}, not a "
                        "Verdict", reward=reward.name)]
    s = verdict.score
    if not isinstance(s, (int, float)) or isinstance(s, bool) or math.isnan(s) or math.isinf(s):
        return [Finding("R6", "bad-score", f"verify returned the score {s!r}; scores are finite "
                        "numbers", reward=reward.name)]
    if not isinstance(verdict.feedback, (str, type(None))):
        return [Finding("R6", "bad-feedback", f"verify returned feedback of type "
                        f"{type(verdict.feedback).__name__}; feedback is text (\"\" for none)",
                        reward=reward.name)]
    if s < reward.floor:
        return [Finding("R6", "below-floor", f"score {s:g} is below the reward's floor "
                        f"{reward.floor:g}; lower the floor or fix the verifier", reward=reward.name)]
    return []


def check_contexts(p0: Sequence[dict[str, str]], p_all: Sequence[dict[str, str]],
                   p_without: Sequence[Sequence[dict[str, str]]], names: Sequence[str],
                   blocks: Sequence[str], placement: str,
                   dropped: Sequence[Sequence[dict[str, str]]] | None = None) -> list[Finding]:
    """R6: P_all starts from P0 (is P0 for in_prompt), and P_without_k is P_all with exactly
    block k removed (whitespace aside); an empty block leaves P_without_k equal to P_all.
    `dropped[k]`: whole messages of P0 that the task says carry block k's information too
    (`Task.without_messages`, e.g. a worked example); P_without_k may lack exactly those."""
    found = []
    if len(p_without) != len(names):
        return [Finding("R6", "context-count", f"{len(p_without)} P_without contexts for "
                        f"{len(names)} rewards; there is one per reward")]
    if placement == "in_prompt":
        if list(p_all) != list(p0):
            found.append(Finding("R6", "p_all-not-p0", "with in_prompt placement P_all must be "
                                 "P0 exactly (the blocks are already in the prompt)"))
    elif not _extends(p0, p_all):
        found.append(Finding("R6", "p_all-not-from-p0", "P_all must be P0 with the blocks "
                             "appended to one message (the user turn); it changes P0 itself"))
    full_text = prompt_text(p_all)
    for k, (name, block, pw) in enumerate(zip(names, blocks, p_without)):
        gone = list(dropped[k]) if dropped else []
        ref = [m for m in p_all if m not in gone] if gone else p_all
        all_text = prompt_text(ref) if gone else full_text
        wo = prompt_text(pw)
        if not isinstance(block, str) or not block.strip():
            if list(pw) != list(p_all):
                found.append(Finding("R6", "empty-block-changes-context", "the block is empty "
                                     "but P_without_k differs from P_all", reward=name))
            continue
        if block.strip() not in all_text:
            found.append(Finding("R6", "block-not-in-p_all", "the block is not in P_all",
                                 block[:60], reward=name))
            continue
        if not _removes_once(all_text, block.strip(), wo) or \
                [m.get("role") for m in pw] != [m.get("role") for m in ref]:
            found.append(Finding("R6", "without-k-differs", "P_without_k is not P_all with "
                                 "exactly this block removed", block[:60], reward=name))
    return found


def _removes_once(text: str, block: str, without: str) -> bool:
    """`without` is `text` with one occurrence of `block` cut out, whitespace aside."""
    target = _norm(without)
    i = text.find(block)
    while i >= 0:
        if _norm(text[:i] + " " + text[i + len(block):]) == target:
            return True
        i = text.find(block, i + 1)
    return False


def _extends(p0: Sequence[dict[str, str]], p_all: Sequence[dict[str, str]]) -> bool:
    """P_all is P0 with text appended to at most one message."""
    if len(p0) != len(p_all) or [m.get("role") for m in p0] != [m.get("role") for m in p_all]:
        return False
    changed = [i for i, (a, b) in enumerate(zip(p0, p_all)) if a != b]
    if not changed:
        return True
    i = changed[0]
    return len(changed) == 1 and str(p_all[i].get("content", "")).startswith(
        str(p0[i].get("content", "")).rstrip())


def check_identical_across(reward_name: str, block: str, examples: Sequence[tuple[str, bool]]) -> list[Finding]:
    """R2 across examples: `examples` lists (location, labels_differ) for examples that got
    this same block; a finding when any pair's labels differ."""
    differing = [loc for loc, differ in examples if differ]
    if not differing:
        return []
    return [Finding("R2", "identical-across-examples",
                    f"the same block appears for examples whose labels differ ({', '.join(differing[:3])}"
                    f"{'...' if len(differing) > 3 else ''}); a block built from each example's "
                    "label differs with it", block[:60], reward=reward_name)]
