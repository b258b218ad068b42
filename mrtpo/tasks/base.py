"""Core types every task is built from: Example, Verdict, Reward, Task.

A task reads its dataset rows into `Example`s, renders P0 (the prompt sampling uses), and
lists the rewards that apply to an example. Each `Reward` pairs a pure verifier with the
block builder that writes the information the verifier checks as text (Z_k in DESIGN.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

Placement = Literal["append", "in_prompt"]


@dataclass(frozen=True)
class Example:
    """One dataset row, normalised.

    `prompt` is the user message of P0 (question, schema, tools, format instruction...);
    `system` an optional system message. `data` holds what the task's verifiers need (gold
    query, database path, constraints, possible answers...). `source` names the file and row
    the example came from, so errors can point at it.
    """

    id: str
    prompt: str
    system: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True)
class Verdict:
    """A verifier's judgement of one response: the reward value and its own words about it."""

    score: float
    feedback: str = ""  # the verifier's own output about this response ("" = none)


@dataclass(frozen=True)
class Reward:
    """One verifiable reward and the block builder paired with it.

    `verify(example, response)` is pure and never raises on bad model output (it scores the
    floor and says why in the feedback). `block(example, verdict)` writes Z_k; it returns ""
    when there is no information to give (e.g. no SQLite error because the query ran).
    `response_dependent` marks blocks that depend on the verdict (the SQLite error), which
    contexts place after the response-independent ones so prefixes can be shared.
    """

    name: str
    verify: Callable[[Example, str], Verdict]
    block: Callable[[Example, Verdict], str]
    weight: float = 1.0
    floor: float = 0.0  # lowest possible score (SAW's CV shift)
    response_dependent: bool = False
    # the block is text P0 already shows (a task with "append" placement whose reward checks
    # something the prompt states, such as the tool schema): it is not appended again, and
    # P_without_k is P_all with that text removed from the prompt (the "in_prompt" rule for
    # one reward). A block of several lines may have its lines anywhere in the prompt.
    in_prompt: bool = False
    # what the block holds, for the writing-rules lint (mrtpo.blocks.rules): "format",
    # "feedback", "reference", "constraint", "schema", or "" (the lint then infers it)
    kind: str = ""


@dataclass(frozen=True)
class ProbeEdit:
    """A targeted edit of a reference response, about one reward (for `mrtpo credit probe`).

    `response` is the reference with one thing changed that reward `reward` checks (an
    argument value, a column, an end phrase); `span` is the (start, end) character range of
    the changed text in `response`. The credit probe replays `response` under the task's
    contexts and asks whether reward `reward`'s distance lands on `span` more than the other
    rewards' distances do.
    """

    reward: str  # the name of the reward the edit is about (one of task.rewards(example))
    kind: str  # what was edited, e.g. "argument value", "function name", "column"
    response: str  # the edited response
    span: tuple[int, int]  # character range of the edited text in `response`


class Task:
    """A task: reads rows, renders P0, lists rewards. Subclass and register it.

    Subclasses set `name`, `placement` and `format`, and implement `load`, `rewards` and
    `reference`. `placement` says where blocks go: "append" after P0, or "in_prompt" when
    the information is already part of P0 (instruction constraints): then P_all is P0 and
    P_without_k is P0 with block k removed.
    """

    name: str = ""
    placement: Placement = "append"
    description: str = ""
    #: reward names shown by `mrtpo tasks ls`; tasks whose rewards vary per example
    #: (one per constraint) describe the pattern, e.g. ["<instruction_id> (one per constraint)"]
    reward_names: Sequence[str] = ()

    def load(self, path: str | None = None, split: str | None = None) -> list[Example]:
        """Read a dataset into examples; `path=None` reads the task's bundled sample."""
        raise NotImplementedError

    def rewards(self, example: Example) -> list[Reward]:
        """The rewards that apply to `example`, in a fixed order."""
        raise NotImplementedError

    def reference(self, example: Example) -> str | None:
        """A correct response in exactly the form the policy is asked to write, or None."""
        return None

    def probe_edits(self, example: Example) -> list[ProbeEdit]:
        """Targeted edits of `reference(example)`, each about one reward, for the credit probe.

        Override to make `mrtpo credit probe` work on a custom task: return one or more
        `ProbeEdit`s whose `span` covers the changed characters. The default is none.
        """
        return []

    def messages(self, example: Example) -> list[dict[str, str]]:
        """P0 as chat messages (optional system message, then the user turn)."""
        msgs = []
        if example.system:
            msgs.append({"role": "system", "content": example.system})
        msgs.append({"role": "user", "content": example.prompt})
        return msgs

    def score(self, example: Example, response: str) -> list[Verdict]:
        """All rewards' verdicts for one response, in `rewards(example)` order."""
        return [r.verify(example, response) for r in self.rewards(example)]
