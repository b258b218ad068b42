"""Core types every task is built from: Example, Verdict, Reward, Task.

A task reads its dataset rows into `Example`s, renders P0 (the prompt sampling uses), and
lists the rewards that apply to an example. Each `Reward` pairs a pure verifier with the
block builder that writes the information the verifier checks as text (Z_k in docs/design.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal, Mapping, Sequence

from mrtpo.formats import Format

# weights are relative, and scores times weights are summed in float32 (max ~3.4e38): a weight
# this large is a typo, and a much larger one turns advantages and logged rewards into inf.
# The one range of every reward weight: --reward-weight, a task's own weights (-o weights=...),
# and a Reward's `weight` (mrtpo.tasks.contract checks it for every task).
MAX_REWARD_WEIGHT = 1e6


def reward_weight_problem(weight: Any) -> str | None:
    """Why `weight` cannot weight a reward (None if it can): not a finite number within
    +-MAX_REWARD_WEIGHT."""
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        return f"a weight must be a number, got {type(weight).__name__}"
    if weight != weight or abs(weight) > MAX_REWARD_WEIGHT:
        return (f"a weight must be between -{MAX_REWARD_WEIGHT:g} and {MAX_REWARD_WEIGHT:g} (weights are "
                f"relative), got {weight:g}")
    return None

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

    `kind` says what the block holds, which selects the writing-rules lint's checks
    (docs/writing-blocks.md has the full table):
    - "format": the format rule; R2 asks that it mention the format's markers
      (`task.format.markers`, e.g. "\\boxed{");
    - "feedback": the verifier's own words about this response; R4 asks that it be "" when the
      verdict has no feedback (the builder is tried with empty verdicts) and quote it otherwise;
    - "reference": a correct answer; R5 asks that it parse strictly with `task.format` and get
      full marks from this reward;
    - "constraint": one requirement of the request (instruction following); the imperative
      check is off with "in_prompt" placement, since the sentence is the user's own;
    - "schema": a JSON schema or tool signature, kept whole as one payload;
    - "": not said; the lint infers it from the block (`mrtpo.blocks.rules.infer_kind`).
    Every kind gets R1, R3 and R2's generic-requirement check.

    `waive` turns one lint rule off for this reward, with the reason: {"R3": "the user's
    own heading is the constraint"} (a rule id) or {"R3:label": "..."} (one check). Waived
    findings are counted and shown with their reason in the lint summary, and do not fail it.
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
    # lint rules waived for this reward: {"R1": reason} or {"R1:merged": reason}
    waive: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class ProbeEdit:
    """A targeted edit of a reference response, about one reward (for `mrtpo probe`).

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

    @classmethod
    def between(cls, reward: str, kind: str, reference: str, edited: str) -> "ProbeEdit | None":
        """The edit that turns `reference` into `edited`, its span found by comparing the two
        (what differs between their common prefix and suffix; a pure deletion marks the
        character before the cut). None when the texts are equal."""
        if edited == reference or not edited:
            return None
        start = 0
        while start < min(len(reference), len(edited)) and reference[start] == edited[start]:
            start += 1
        end_e, end_r = len(edited), len(reference)
        while end_e > start and end_r > start and reference[end_r - 1] == edited[end_e - 1]:
            end_e, end_r = end_e - 1, end_r - 1
        if end_e == start:  # nothing inserted: mark the character before the cut
            start, end_e = (start - 1, start) if start > 0 else (0, 1)
        return cls(reward, kind, edited, (start, end_e))


class Task:
    """A task: reads rows, renders P0, lists rewards. Subclass and register it.

    Subclasses set `name`, `placement` and `format`, and implement `load`, `rewards` and
    `reference`. `placement` says where blocks go: "append" after P0, or "in_prompt" when
    the information is already part of P0 (instruction constraints): then P_all is P0 and
    P_without_k is P0 with block k removed. docs/custom-tasks.md walks through one.
    """

    name: str = ""
    placement: Placement = "append"
    #: the output format the policy is asked for (`mrtpo.formats`): its `instruction` goes
    #: into P0, its `rule` is the format block, `render` writes references; the lint (R2, R5)
    #: and the default corruption read it. None for free-form tasks (instruction following).
    format: Format | None = None
    description: str = ""
    #: reward names shown by `mrtpo tasks ls`; tasks whose rewards vary per example
    #: (one per constraint) describe the pattern, e.g. ["<instruction_id> (one per constraint)"]
    reward_names: Sequence[str] = ()

    def load(self, path: str | None = None, split: str | None = None) -> list[Example]:
        """Read a dataset into examples; `path=None` reads the task's bundled sample.

        A task overrides this or `iter_examples` (then this is the list of what that gives)."""
        if type(self).iter_examples is not Task.iter_examples:
            return list(self.iter_examples(path, split))
        raise NotImplementedError(f"task {self.name!r} defines neither load nor iter_examples")

    def iter_examples(self, path: str | None = None, split: str | None = None) -> Iterator[Example]:
        """The examples `load` reads, one at a time: what a command that looks at each example
        once uses (`mrtpo blocks lint`), so that it holds one row at a time whatever the file's size.

        The built-in tasks read their files here, as they go, and `load` is the list of it: one
        reader, whichever way it is called. The default gives `load`'s list, which a task that
        defines only `load` reads whole; errors in a row are raised when the row is reached."""
        yield from self.load(path, split)

    def rewards(self, example: Example) -> list[Reward]:
        """The rewards that apply to `example`, in a fixed order."""
        raise NotImplementedError

    def reference(self, example: Example) -> str | None:
        """A correct response in exactly the form the policy is asked to write, or None."""
        return None

    def corrupt(self, example: Example, response: str) -> str | None:
        """A copy of `response` in the task's format with its answer broken, which `mrtpo
        blocks preview` and `mrtpo blocks lint` show beside the reference (so that
        response-dependent blocks appear). None (the default) uses the built-in corruption,
        which parses `response` with `self.format` and breaks the answer inside it
        (`mrtpo.blocks.samples.corrupt`). Override it when that edit says little for the task.
        """
        return None

    def probe_edits(self, example: Example) -> list[ProbeEdit]:
        """Targeted edits of `reference(example)`, each about one reward, for the credit probe.

        Override to make `mrtpo probe` work on a custom task: return one or more
        `ProbeEdit`s whose `span` covers the changed characters. The default is none.
        """
        return []

    def reward_spans(self, example: Example, response: str) -> dict[str, list[tuple[int, int]]] | None:
        """The characters of `response` that each reward is about, as [start, end) ranges by
        reward name, or None (the default): the task cannot say.

        Where a task says it, `mrtpo train --mrtpo-weights spans` puts each reward's credit on
        exactly those tokens (Blockwise Advantage Estimation's placement): the ceiling that
        MRTPO's distances are compared with, not a method for tasks whose spans are unknown.
        A reward left out, or given no spans on a response, gets its credit uniformly there.
        """
        return None

    #: the in-prompt reward whose information `demo_messages` carries too ("format" for the
    #: built-in tasks' worked examples): its P_without_k drops the demonstration with its block
    demo_reward: str | None = None

    def demo_messages(self) -> list[dict[str, str]]:
        """A worked exchange (user, assistant) that P0 puts before the user turn, or [] (the
        default). It shows the output format on made-up data, so it carries `demo_reward`'s
        information and nothing another reward checks."""
        return []

    def messages(self, example: Example) -> list[dict[str, str]]:
        """P0 as chat messages: the optional system message, the demonstration
        (`demo_messages`, if any), then the user turn."""
        msgs = []
        if example.system:
            msgs.append({"role": "system", "content": example.system})
        msgs += self.demo_messages()
        msgs.append({"role": "user", "content": example.prompt})
        return msgs

    def without_messages(self, example: Example, reward: str, messages: list[dict]) -> list[dict]:
        """P_without_k's messages for an in-prompt reward of an "append" task, after its block's
        text has left the user turn: a task whose P0 carries the same information elsewhere
        too removes that here. Default: the demonstration leaves with `demo_reward`'s block."""
        if reward != self.demo_reward:
            return messages
        demo = self.demo_messages()
        return [m for m in messages if m not in demo]

    def score(self, example: Example, response: str) -> list[Verdict]:
        """All rewards' verdicts for one response, in `rewards(example)` order."""
        return [r.verify(example, response) for r in self.rewards(example)]


def stream_examples(task: Task, path: str | None = None, split: str | None = None) -> Iterator[Example]:
    """`task`'s examples one at a time, as `load` would give them: `task.iter_examples`, except
    for a task whose `load` is defined below the class its `iter_examples` comes from (one built
    on a built-in task that filters or rewrites the examples in `load`), which is read through
    that `load`, whole: its own reading is what the command must see."""
    def owner(name: str) -> type:
        return next(c for c in type(task).__mro__ if name in vars(c))

    loads, iterates = owner("load"), owner("iter_examples")
    if loads is not iterates and issubclass(loads, iterates):
        yield from task.load(path, split)
    else:
        yield from task.iter_examples(path, split)
