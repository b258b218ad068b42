"""Lint a whole dataset's blocks: every example, every response, every reward.

Each example is checked with its sample responses (the reference and a corrupted copy, or
the user's responses) by `mrtpo.blocks.check`, which runs the single-example checks.
Then the cross-example check of R2 runs (for "append" placement, where the task builds the
blocks): a response-independent block that is identical for two examples is only right when
the examples' labels agree for that reward, which is tested by scoring each example's
reference under both examples' verifiers (if they judge the same answer differently, the
labels differ and so must the blocks). At most MAX_PAIRS_PER_BLOCK pairs per distinct block
are scored, so the cost stays linear in the dataset.

The examples come one at a time from any iterable (`Task.iter_examples` reads a file as it
goes), and what the lint keeps does not grow with their number, so that a file at the input
cap (`mrtpo.tasks.files.MAX_FILE_BYTES`) lints in the memory of a small one:
- every finding is counted (per rule, per distinct problem, examples per rule); the first
  MAX_LISTED_FINDINGS are kept whole (what `--json` lists), and each rule's first
  MAX_PROBLEMS_PER_RULE distinct problems with the first MAX_LOCATIONS examples that have them;
- R2's identical blocks are looked for among the MAX_OPEN_BLOCKS distinct blocks seen most
  recently: to make room, the one seen least recently is checked and set aside, so a block
  repeated only after more distinct blocks than that came between starts a group of its own.
`LintReport.cut()` says in words what was left out, and every output prints it.
"""
from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Iterable

from mrtpo.blocks import rules
from mrtpo.blocks.check import check_response, location
from mrtpo.blocks.check import waivers as waivers_of
from mrtpo.blocks.samples import NamedResponse, sample_responses
from mrtpo.blocks.rules import Finding
from mrtpo.tasks.base import Example, Reward, Task
from mrtpo.tasks.contract import USER_CODE_ERRORS

#: how many other examples each group of identical blocks is compared with (bounds the cost)
MAX_PAIRS_PER_BLOCK = 4
#: findings kept whole, in the order found (every finding is counted)
MAX_LISTED_FINDINGS = 1000
#: distinct problems (check, reward, message) itemized per rule, and waivers itemized
MAX_PROBLEMS_PER_RULE = 100
#: example locations kept per problem (every example is counted)
MAX_LOCATIONS = 10
#: distinct response-independent blocks held for R2's identical-across-examples check
MAX_OPEN_BLOCKS = 5000

#: (example, reward, its reference, what the example was counted for): one member of a group
#: of examples that got the same block (see `_SameBlocks`)
Member = tuple[Example, Reward, "str | None", set]


@dataclass
class Problem:
    """One distinct problem of a rule: its first finding, how many examples have it, and the
    locations of the first MAX_LOCATIONS of them."""

    finding: Finding
    examples: int = 0
    locations: list[str] = field(default_factory=list)


@dataclass
class LintReport:
    """What the lint found, in bounded memory: counts of everything, the first findings whole."""

    findings: list[Finding] = field(default_factory=list)  # the first MAX_LISTED_FINDINGS
    waived: list[Finding] = field(default_factory=list)  # covered by a reward's `waive`: likewise
    examples: int = 0
    responses: int = 0
    blocks: int = 0
    total: int = 0  # findings, listed or not (one per rule, check, example, reward and message)
    waived_total: int = 0
    per_rule: Counter = field(default_factory=Counter)  # rule -> findings
    examples_per_rule: Counter = field(default_factory=Counter)  # rule -> examples with one
    problems: dict[str, dict[tuple, Problem]] = field(default_factory=dict)  # rule -> first problems
    unitemized: Counter = field(default_factory=Counter)  # rule -> findings of further problems
    waivers: dict[tuple, Problem] = field(default_factory=dict)  # (reward, rule, check, reason)
    waived_unitemized: int = 0
    blocks_set_aside: int = 0  # R2: distinct blocks checked and set aside to make room
    blocks_open_limit: int = 0  # R2: how many distinct blocks were held (MAX_OPEN_BLOCKS)

    @property
    def unlisted(self) -> int:
        """Findings counted but not kept whole (past MAX_LISTED_FINDINGS)."""
        return self.total - len(self.findings)

    def grouped(self) -> dict[str, list[Problem]]:
        """Per rule (every rule, in order), each distinct problem (check, reward, message) once
        with the examples that have it: 35 examples with the same label are one problem."""
        out: dict[str, list[Problem]] = {r: [] for r in rules.RULES}
        for rule, problems in self.problems.items():
            out.setdefault(rule, []).extend(problems.values())
        return out

    def waived_groups(self) -> list[tuple[Finding, int]]:
        """Each waived (reward, rule, check) once, with how many examples it covered."""
        return [(p.finding, p.examples) for p in self.waivers.values()]

    def cut(self) -> list[str]:
        """What the report leaves out, one sentence each ([] when nothing is)."""
        out = [f"{rule}: {n:,} more finding(s) of problems past the first {MAX_PROBLEMS_PER_RULE} "
               "of the rule were counted, not itemized" for rule, n in self.unitemized.items()]
        if self.waived_unitemized:
            out.append(f"{self.waived_unitemized:,} waived finding(s) of waivers past the first "
                       f"{MAX_PROBLEMS_PER_RULE} were counted, not itemized")
        if self.blocks_set_aside:
            out.append(f"R2: identical blocks were looked for among the {self.blocks_open_limit:,} distinct "
                       f"blocks seen most recently; {self.blocks_set_aside:,} were set aside to make "
                       "room, so a block repeated further apart than that was not compared with "
                       "its first occurrence")
        return out

    def add(self, findings: Iterable[Finding], waived: Iterable[Finding], counted: set) -> None:
        """Count one example's findings and waived ones (or R2's about one example); `counted`
        is what that example was counted for already, so it counts once per rule and problem."""
        seen: set[tuple] = set()
        for f in findings:
            key = (f.rule, f.check, f.example, f.reward, f.message)
            if key in seen:  # the same block linted for two responses is one problem, not two
                continue
            seen.add(key)
            self.total += 1
            self.per_rule[f.rule] += 1
            if len(self.findings) < MAX_LISTED_FINDINGS:
                self.findings.append(f)
            if f.rule not in counted:
                counted.add(f.rule)
                self.examples_per_rule[f.rule] += 1
            problems = self.problems.setdefault(f.rule, {})
            if not _count(problems, (f.check, f.reward, f.message), f, counted):
                self.unitemized[f.rule] += 1
        for f in waived:
            key = (f.rule, f.check, f.example, f.reward, f.message)
            if key in seen:
                continue
            seen.add(key)
            self.waived_total += 1
            if len(self.waived) < MAX_LISTED_FINDINGS:
                self.waived.append(f)
            if not _count(self.waivers, (f.reward, f.rule, f.check, f.waived), f, counted):
                self.waived_unitemized += 1


def _count(problems: dict[tuple, Problem], key: tuple, f: Finding, counted: set) -> bool:
    """Count `f` as one more example of the problem `key` (False: a new problem past the cap)."""
    p = problems.get(key)
    if p is None:
        if len(problems) >= MAX_PROBLEMS_PER_RULE:
            return False
        p = problems[key] = Problem(f)
    if ("problem", key) not in counted:
        counted.add(("problem", key))
        p.examples += 1
        if len(p.locations) < MAX_LOCATIONS and f.example not in p.locations:
            p.locations.append(f.example)
    return True


def lint_task(task: Task, examples: Iterable[Example],
              responses: dict[str, list[NamedResponse]] | None = None,
              progress: Callable[[int], None] | None = None) -> LintReport:
    """Lint every block `task` builds for `examples`, taken one at a time; `progress(1)` after
    each example."""
    report = LintReport()
    same = _SameBlocks()
    waivers: dict[str, object] = {}
    for example in examples:
        counted: set = set()  # what this example has been counted for (see LintReport.add)
        found: list[Finding] = []
        waived: list[Finding] = []
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
                for r, b in zip(checked.rewards, checked.blocks):
                    if b and b.strip() and not r.response_dependent:
                        for key, group in same.add((r.name, b.strip()), (example, r, ref, counted)):
                            _check_group(report, key, group, waivers)
        report.add(found, waived, counted)
        report.examples += 1
        if progress is not None:
            progress(1)
    for key, group in same.close_all():
        _check_group(report, key, group, waivers)
    report.blocks_set_aside, report.blocks_open_limit = same.set_aside, same.limit
    return report


class _SameBlocks:
    """Groups of examples that got the same response-independent block for a reward, keyed by
    (reward name, block), each with its first 1 + MAX_PAIRS_PER_BLOCK examples.

    At most `limit` groups are open; `add` closes the least recently seen one to make room and
    returns it, to be checked then (`set_aside` counts them), so the memory held is bounded
    whatever the number of examples. A group seen again moves to the back: a block that many
    examples share stays open."""

    def __init__(self, limit: int | None = None) -> None:
        self.open: OrderedDict[tuple[str, str], list[Member]] = OrderedDict()
        self.limit = MAX_OPEN_BLOCKS if limit is None else limit
        self.set_aside = 0

    def add(self, key: tuple[str, str], member: Member) -> list[tuple[tuple[str, str], list[Member]]]:
        group = self.open.get(key)
        if group is not None:
            self.open.move_to_end(key)
            if len(group) <= MAX_PAIRS_PER_BLOCK:  # only the first few are compared
                group.append(member)
            return []
        self.open[key] = [member]
        closed = []
        while len(self.open) > self.limit:
            closed.append(self.open.popitem(last=False))
            self.set_aside += 1
        return closed

    def close_all(self) -> list[tuple[tuple[str, str], list[Member]]]:
        closed = list(self.open.items())
        self.open.clear()
        return closed


def _check_group(report: LintReport, key: tuple[str, str], group: list[Member], waivers) -> None:
    """R2 across examples for one closed group: a finding, at its first example, when any of
    the others' labels differ from the first's."""
    if len(group) < 2:
        return
    name, block = key
    first = group[0]
    pairs = [(location(e), labels_differ(first[:3], (e, r, ref)))
             for e, r, ref, _ in group[1:1 + MAX_PAIRS_PER_BLOCK]]
    found = [f.at(example=location(first[0])) for f in rules.check_identical_across(name, block, pairs)]
    kept, waived = rules.split_waived(found, waivers)
    report.add(kept, waived, first[3])


def _score(reward: Reward, example: Example, response: str) -> float | None:
    try:
        return rules.score_of(reward.verify(example, response))
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
