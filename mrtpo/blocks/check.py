"""One example and one response, run through a task the way training does, then linted.

`check_response` scores the response with every reward, builds the blocks and the replay contexts
with `mrtpo.contexts` (the same functions the trainer uses), and runs every single-example
check of `mrtpo.blocks.rules` on the result. Nothing a task does here may stop the preview
or the lint: an exception in a verifier, a block builder or the contexts becomes a finding
(so does a `sys.exit` in them: `USER_CODE_ERRORS`), and so does everything training refuses
(`mrtpo.tasks.contract`): no rewards, a verdict that is None or not finite, a block that is
not a str, a reference that is None.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from mrtpo import contexts
from mrtpo.blocks import rules
from mrtpo.blocks.rules import FULL_MARKS, Finding
from mrtpo.tasks.base import Example, Reward, Task, Verdict
from mrtpo.tasks import runner
from mrtpo.tasks.contract import USER_CODE_ERRORS

Messages = list[dict[str, str]]


@dataclass
class ResponseCheck:
    """What one response gets: verdicts, blocks, contexts, and the lint's findings."""

    example: Example
    response_name: str
    response: str
    p0: Messages = field(default_factory=list)
    rewards: list[Reward] = field(default_factory=list)
    verdicts: list[Verdict | None] = field(default_factory=list)
    blocks: list[str | None] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    p_all: Messages | None = None
    p_without: list[Messages] | None = None
    findings: list[Finding] = field(default_factory=list)
    waived: list[Finding] = field(default_factory=list)  # findings a reward's `waive` covers

    @property
    def location(self) -> str:
        return location(self.example)


def location(example: Example) -> str:
    """Where an example came from: its source (file and row, relative to the working
    directory when under it) and id."""
    src = example.source
    cwd = os.getcwd().rstrip(os.sep) + os.sep
    if src.startswith(cwd):
        src = src[len(cwd):]
    if src and example.id and example.id not in src:
        return f"{src} ({example.id})"
    return src or example.id


def _raised(what: str, exc: BaseException) -> str:
    return f"{what} raised {type(exc).__name__}: {exc}"


def check_response(task: Task, example: Example, response_name: str, response: str,
                   try_builders: bool = True) -> ResponseCheck:
    """Score, build blocks and contexts for one response, and lint what was built.

    `try_builders` also calls block builders with synthetic verdicts (R4, R6's declared
    dependence); the lint does it once per example, not once per response.
    """
    checked = ResponseCheck(example, response_name, response)
    loc = checked.location
    add = lambda fs, reward="": checked.findings.extend(  # noqa: E731
        f.at(example=loc, reward=reward, response=response_name) for f in fs)

    try:
        checked.p0 = task.messages(example)
        if task.messages(example) != checked.p0:
            add([Finding("R6", "p0-unstable", "task.messages(example) gives a different P0 on a "
                         "second call; sampling and replay must see the same prompt")])
    except USER_CODE_ERRORS as exc:
        add([Finding("R6", "messages-error", _raised("task.messages(example)", exc))])
        return checked
    try:
        checked.rewards = list(runner.rewards(task, example))  # their code: the task's runner
        again = [getattr(r, "name", None) for r in task.rewards(example)]
    except USER_CODE_ERRORS as exc:
        add([Finding("R6", "rewards-error", _raised("task.rewards(example)", exc))])
        return checked
    add(rules.check_rewards(checked.rewards))
    if not checked.rewards:
        add([Finding("R6", "no-rewards", "task.rewards(example) lists no rewards; training refuses "
                     "an example without rewards (there is nothing to score)")])
    checked.rewards = [r for r in checked.rewards if isinstance(r, Reward)]
    if again != [r.name for r in checked.rewards]:
        add([Finding("R6", "rewards-unstable", "task.rewards(example) lists different rewards on "
                     "a second call; scores and blocks must line up across calls")])

    fmt = getattr(task, "format", None)
    try:
        reference = runner.reference(task, example)
    except USER_CODE_ERRORS as exc:
        reference = None
        add([Finding("R5", "reference-error", _raised("task.reference(example)", exc))])
    if reference is not None and not isinstance(reference, str):
        add([Finding("R5", "reference-not-text", f"task.reference(example) returned "
                     f"{type(reference).__name__} {reference!r:.60}, not a str; return the correct "
                     "response as text (None when there is none)")])
        reference = None
    elif reference is None and "reference-error" not in {f.check for f in checked.findings}:
        if try_builders and not _reference_may_be_none(task):  # once per example
            add([Finding("R5", "no-reference", "task.reference(example) returned None: probe and "
                         "credit have no correct response to replay, and preview and lint check "
                         "an empty response instead; return the correct response in the task's "
                         "format")])

    for r in checked.rewards:
        try:
            v = r.verify(example, response)
        except USER_CODE_ERRORS as exc:
            add([Finding("R6", "verify-raised", _raised("verify", exc) + "; a verifier never "
                         "raises on model output: it scores the floor and says why")], r.name)
            v = None
        else:
            add(rules.check_verdict(r, v), r.name)  # None too: training refuses it
            if runner.failure(v):  # the runner gave it the floor: say so, it is not a score
                add([Finding("R6", "verify-" + runner.failure(v).replace(" ", "-"),
                             f"verify {runner.failure(v)} ({v.feedback}); it scored the floor")], r.name)
            if not _buildable(v):  # reported just above; no block is built from it
                v = None
        checked.verdicts.append(v)

    # blocks through the trainer's own function; on failure, per reward to find the culprit
    ok = all(v is not None for v in checked.verdicts)
    built: list[Any] | None = None
    if ok:
        try:
            built = contexts.block_texts(task, example, checked.verdicts)
        except USER_CODE_ERRORS:
            built = None
    if built is None:
        built = []
        for r, v in zip(checked.rewards, checked.verdicts):
            if v is None:
                built.append(None)
                continue
            try:
                b = r.block(example, v)
            except USER_CODE_ERRORS as exc:
                add([Finding("R1", "builder-error", _raised("the block builder", exc))], r.name)
                b = None
            else:
                if not isinstance(b, str):  # None too: training refuses it
                    add([Finding("R6", "not-text", f"the block builder returned "
                                 f"{type(b).__name__}, not str; return \"\" for no information")],
                        r.name)
                    b = None
            built.append(b)
    checked.blocks = built

    for r, v, b in zip(checked.rewards, checked.verdicts, checked.blocks):
        placement = "in_prompt" if r.in_prompt else task.placement
        kind = rules.infer_kind(b or "", reward=r, fmt=fmt, placement=placement)
        checked.kinds.append(kind)
        if b is None:
            continue
        add(rules.check_block(b, kind=kind, example=example, verdict=v, reward=r, fmt=fmt,
                              placement=placement, p0_messages=checked.p0, reference=reference,
                              try_builder=try_builders), r.name)
        if try_builders and v is not None:
            add(_check_dependence(r, example, v, b), r.name)
    names = [r.name for r in checked.rewards]
    add(rules.check_shared_blocks(names, [b or "" for b in checked.blocks]))

    if all(b is not None for b in checked.blocks):
        try:
            checked.p_all, checked.p_without = contexts.context_messages(task, example, checked.blocks)
        except USER_CODE_ERRORS as exc:
            add([Finding("R6", "contexts-error", _raised("building the contexts", exc))])
        else:
            # whole messages a task drops with an in-prompt block (Task.without_messages)
            dropped = [[m for m in checked.p_all if m not in task.without_messages(example, r.name, list(checked.p_all))]
                       if r.in_prompt and task.placement == "append" else [] for r in checked.rewards]
            add(rules.check_contexts(checked.p0, checked.p_all, checked.p_without, names, checked.blocks,
                                     task.placement, dropped=dropped))
    checked.findings, checked.waived = rules.split_waived(checked.findings, waivers(checked.rewards))
    return checked


def _buildable(verdict: Any) -> bool:
    """Whether the lint builds and checks a block from `verdict`: a Verdict whose score is a
    number (a NaN one too: the builder may still be checked) and whose feedback is text. Other
    returns are findings (rules.check_verdict), never a crash in the checks that read them."""
    return (isinstance(verdict, Verdict) and isinstance(verdict.feedback, (str, type(None)))
            and not isinstance(verdict.score, bool) and isinstance(verdict.score, (int, float)))


def waivers(rewards: list[Reward]) -> dict[str, Any]:
    """Reward name -> its `waive` mapping (rewards that waive nothing are left out)."""
    return {r.name: r.waive for r in rewards if getattr(r, "waive", None)}


def _check_dependence(reward: Reward, example: Example, verdict: Verdict, block: str) -> list[Finding]:
    """R6: build the block again for other verdicts; a response-independent reward's block
    must not change."""
    if reward.response_dependent:
        return []
    others = [block]
    for v in (Verdict(reward.floor, "a different verdict's feedback"), Verdict(FULL_MARKS, "")):
        try:
            others.append(reward.block(example, v))
        except USER_CODE_ERRORS:
            continue  # a builder may reject a verdict it cannot get; not a dependence
    return rules.check_declared_dependence(reward, others)


def _reference_may_be_none(task) -> bool:
    """Whether the task declares that an example may lack a reference (`reference(...) -> str |
    None`, as instruct does for IFEval rows): then None is data, not a broken contract."""
    import typing

    try:
        ret = typing.get_type_hints(type(task).reference).get("return")
    except Exception:  # an annotation that does not resolve: assume a reference is expected
        return False
    return ret is not None and type(None) in typing.get_args(ret)
