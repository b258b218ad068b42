"""The task contract, checked in one place by train, eval, probe, credit and the block lint.

A task's code is the user's: `rewards(example)` must list at least one Reward, each
`verify(example, response)` must return exactly one Verdict with a finite score and never
raise on model output, each `block(example, verdict)` must return a str, and `reference`
a str or None. The `checked_*` functions call that code and turn any breach (a raise, a
`sys.exit`, a wrong type, a NaN) into a `RewardError` whose message names the task, the
reward and the example, so no command ends in a bare traceback or a silent exit.
"""
from __future__ import annotations

import math
from numbers import Real

from mrtpo.tasks import runner
from mrtpo.tasks.base import Example, Reward, Task, Verdict, reward_weight_problem


class RewardError(RuntimeError):
    """A task's reward, block builder or reference broke its contract; the message names it."""


#: What a call into task code (a verifier, a block builder, `reference`) may raise that must
#: not end the command with a traceback or a silent exit: everything but KeyboardInterrupt
#: (a `SystemExit` from user code is a bug in the task, not the user asking to stop).
USER_CODE_ERRORS = (Exception, SystemExit)


def _where(reward_name: str, example: Example, task: Task | None = None, verb: str = "") -> str:
    """'reward R [verb] on example E (source) of task T': what every contract message names."""
    of_task = f" of task {task.name!r}" if task is not None and getattr(task, "name", "") else ""
    return (f"reward {reward_name!r}{' ' + verb if verb else ''} on example {example.id!r} "
            f"({example.source or 'no source'}){of_task}")


def _raised(exc: BaseException) -> str:
    if isinstance(exc, runner.TaskCodeFailure):  # it timed out or died: the message says so
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def check_verdict(reward: Reward, result, example: Example, response: str,
                  task: Task | None = None) -> Verdict:
    """The contract: exactly one Verdict with a finite real score."""
    where = _where(reward.name, example, task)
    if isinstance(result, (list, tuple)):
        raise RewardError(f"{where} returned {len(result)} scores for one response; verify must "
                          "return exactly one Verdict(score, feedback)")
    if not isinstance(result, Verdict):
        raise RewardError(f"{where} returned {type(result).__name__} {result!r:.80}; verify must "
                          "return a Verdict(score, feedback)")
    if isinstance(result.score, bool) or not isinstance(result.score, Real) \
            or not math.isfinite(float(result.score)):
        raise RewardError(f"{where} returned the non-finite or non-numeric score {result.score!r} "
                          f"for the response {response[:80]!r}; bad model output must score the "
                          "reward's floor, with the reason in the feedback")
    return result


# --- the task contract, checked the same way by train, eval, probe and credit ----------------
def checked_rewards(task: Task, example: Example) -> list[Reward]:
    """`task.rewards(example)`: a non-empty list of Rewards, else RewardError naming the example."""
    where = f"task {task.name!r} on example {example.id!r} ({example.source or 'no source'})"
    try:
        rewards = runner.rewards(task, example)
    except USER_CODE_ERRORS as exc:
        raise RewardError(f"{where}: task.rewards(example) raised {_raised(exc)}") from exc
    if not isinstance(rewards, (list, tuple)) or not rewards:
        got = "no rewards" if isinstance(rewards, (list, tuple)) else f"{type(rewards).__name__} {rewards!r:.60}"
        raise RewardError(f"{where}: task.rewards(example) gave {got}; every example needs a list "
                          "of at least one Reward (a task without rewards has nothing to train or "
                          "score)")
    for r in rewards:
        if not isinstance(r, Reward):
            raise RewardError(f"{where}: task.rewards(example) holds {type(r).__name__} {r!r:.60}, "
                              "not a mrtpo.tasks.Reward")
        problem = reward_weight_problem(r.weight)
        if problem:
            raise RewardError(f"{where}: reward {str(r.name)[:80]!r} has weight {r.weight!r:.60}; {problem}")
    return list(rewards)


def checked_verify(task: Task | None, reward: Reward, example: Example, response: str) -> Verdict:
    """`reward.verify(example, response)` under the contract: one Verdict with a finite score.

    A verifier that raises (or calls sys.exit) or returns anything else breaks the contract:
    RewardError naming the task, the reward, the example and the response.
    """
    try:
        result = reward.verify(example, response)
    except USER_CODE_ERRORS as exc:
        raise RewardError(f"{_where(reward.name, example, task, 'raised')} with the response "
                          f"{response[:80]!r}; verify must never raise on model output (score the "
                          f"floor and say why): {_raised(exc)}") from exc
    return check_verdict(reward, result, example, response, task)


def checked_score(task: Task, example: Example, response: str) -> list[Verdict]:
    """Every reward's checked verdict for one response, in `task.rewards(example)` order."""
    return [checked_verify(task, r, example, response) for r in checked_rewards(task, example)]


def checked_block(task: Task | None, reward: Reward, example: Example, verdict: Verdict) -> str:
    """`reward.block(example, verdict)`: a str, else RewardError naming task, reward and example."""
    try:
        text = reward.block(example, verdict)
    except USER_CODE_ERRORS as exc:
        raise RewardError(f"the block builder of {_where(reward.name, example, task)} raised "
                          f"{_raised(exc)}") from exc
    if not isinstance(text, str):
        raise RewardError(f"the block builder of {_where(reward.name, example, task)} returned "
                          f"{type(text).__name__} {text!r:.60}, not str; return the block's text "
                          "(\"\" for no information)")
    return text


def checked_reference(task: Task, example: Example) -> str | None:
    """`task.reference(example)`: a str or None, else RewardError naming the task and example."""
    where = f"task {task.name!r} on example {example.id!r} ({example.source or 'no source'})"
    try:
        ref = runner.reference(task, example)
    except USER_CODE_ERRORS as exc:
        raise RewardError(f"{where}: task.reference(example) raised {_raised(exc)}; return None "
                          "when an example has no reference") from exc
    if ref is not None and not isinstance(ref, str):
        raise RewardError(f"{where}: task.reference(example) returned {type(ref).__name__}, "
                          "not a str (or None)")
    return ref
