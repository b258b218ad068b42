"""Lint a whole dataset's blocks: every example, every response, every reward.

Each example is checked with its sample responses (the reference and a corrupted copy, or
the user's responses) by `mrtpo.blocks.check`, which runs the single-example checks.
Then the cross-example check of R2 runs (for "append" placement, where the task builds the
blocks): a response-independent block that is identical for two examples is only right when
the examples' labels agree for that reward, which is tested by scoring each example's
reference under both examples' verifiers (if they judge the same answer differently, the
labels differ and so must the blocks). At most MAX_PAIRS_PER_BLOCK pairs per distinct block
are scored, so the cost stays linear in the dataset.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable

from mrtpo.blocks import rules
from mrtpo.blocks.check import ResponseCheck, check_response, location
from mrtpo.blocks.check import waivers as waivers_of
from mrtpo.blocks.samples import NamedResponse, sample_responses
from mrtpo.blocks.rules import Finding
from mrtpo.tasks.base import Example, Reward, Task
from mrtpo.tasks.contract import USER_CODE_ERRORS

#: how many other examples each group of identical blocks is compared with (bounds the cost)
MAX_PAIRS_PER_BLOCK = 4


@dataclass
class LintReport:
    findings: list[Finding] = field(default_factory=list)
    waived: list[Finding] = field(default_factory=list)  # covered by a reward's `waive`
    examples: int = 0
    responses: int = 0
    blocks: int = 0

    def by_rule(self) -> dict[str, list[Finding]]:
        out: dict[str, list[Finding]] = {r: [] for r in rules.RULES}
        for f in self.findings:
            out.setdefault(f.rule, []).append(f)
        return out

    def grouped(self) -> dict[str, list[tuple[Finding, list[str]]]]:
        """Per rule, each distinct problem (check, reward, message) once, with the locations
        of the examples that have it: 35 examples with the same label are one line."""
        out: dict[str, list[tuple[Finding, list[str]]]] = {r: [] for r in rules.RULES}
        index: dict[tuple, int] = {}
        for f in self.findings:
            key = (f.rule, f.check, f.reward, f.message)
            groups = out.setdefault(f.rule, [])
            if key not in index:
                index[key] = len(groups)
                groups.append((f, []))
            locs = groups[index[key]][1]
            if f.example not in locs:
                locs.append(f.example)
        return out

    def waived_groups(self) -> list[tuple[Finding, int]]:
        """Each waived (reward, rule, check) once, with how many examples it covered."""
        out: dict[tuple, tuple[Finding, set[str]]] = {}
        for f in self.waived:
            first, locs = out.setdefault((f.reward, f.rule, f.check, f.waived), (f, set()))
            locs.add(f.example)
        return [(f, len(locs)) for f, locs in out.values()]


def dedupe(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per (rule, check, example, reward, message): the same block linted for two
    responses is one problem, not two."""
    seen, out = set(), []
    for f in findings:
        key = (f.rule, f.check, f.example, f.reward, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def lint_task(task: Task, examples: list[Example],
              responses: dict[str, list[NamedResponse]] | None = None,
              progress: Callable[[int], None] | None = None) -> LintReport:
    """Lint every block `task` builds for `examples`; `progress(1)` after each example."""
    report = LintReport()
    found: list[Finding] = []
    # (reward name, block text) -> [(example, reward, reference)] for response-independent blocks
    same: dict[tuple[str, str], list[tuple[Example, Reward, str | None]]] = defaultdict(list)
    waived: list[Finding] = []
    waivers: dict[str, object] = {}
    for example in examples:
        own = sample_responses(task, example)
        ref = next((t for n, t in own if n == "reference"), None)
        pr = (responses.get(example.id) if responses is not None else None) or own
        for i, (name, text) in enumerate(pr):
            checked = check_response(task, example, name, text, try_builders=(i == 0))
            found += checked.findings
            waived += checked.waived
            waivers.update(waivers_of(checked.rewards))
            report.responses += 1
            report.blocks += sum(1 for b in checked.blocks if b)
            if i == 0 and task.placement == "append":
                # in_prompt blocks are the user's own sentences, not built by the task: the
                # same sentence in two prompts is the same request, whatever else differs
                _collect(checked, ref, same)
        report.examples += 1
        if progress is not None:
            progress(1)
    kept, more = rules.split_waived(_identical_across(same), waivers)
    report.findings = dedupe(found + kept)
    report.waived = dedupe(waived + more)
    return report


def _collect(checked: ResponseCheck, reference: str | None, same) -> None:
    for r, b in zip(checked.rewards, checked.blocks):
        if b and b.strip() and not r.response_dependent:
            group = same[(r.name, b.strip())]
            if len(group) <= MAX_PAIRS_PER_BLOCK:  # only the first few are compared
                group.append((checked.example, r, reference))


def _score(reward: Reward, example: Example, response: str) -> float | None:
    try:
        return float(reward.verify(example, response).score)
    except USER_CODE_ERRORS:
        return None


def labels_differ(a: tuple[Example, Reward, str | None], b: tuple[Example, Reward, str | None]) -> bool:
    """Whether two examples' rewards of one name judge some answer differently: each one's
    reference is scored by both rewards."""
    (ea, ra, refa), (eb, rb, refb) = a, b
    for ref in (refa, refb):
        if ref is None:
            continue
        sa, sb = _score(ra, ea, ref), _score(rb, eb, ref)
        if sa is not None and sb is not None and sa != sb:
            return True
    return False


def _identical_across(same) -> list[Finding]:
    out = []
    for (name, block), group in same.items():
        if len(group) < 2:
            continue
        first = group[0]
        pairs = [(location(e), labels_differ(first, (e, r, ref)))
                 for e, r, ref in group[1:1 + MAX_PAIRS_PER_BLOCK]]
        for f in rules.check_identical_across(name, block, pairs):
            out.append(f.at(example=location(first[0])))
    return out
