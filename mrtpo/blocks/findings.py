"""The lint's vocabulary: the rule ids and their titles (`RULES`), the block kinds, and
`Finding`, one broken rule with what to change and where (mrtpo.blocks.rules has the rules)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

#: rule id -> short title
RULES: dict[str, str] = {
    "R1": "one reward, one block",
    "R2": "specific information",
    "R3": "a plain statement",
    "R4": "only this response's own feedback",
    "R5": "references in the policy's own form",
    "R6": "consistency of prompt, rewards and blocks",
}

KINDS = ("format", "feedback", "reference", "constraint", "schema", "")

#: what counts as full marks for R5 (the rewards of mrtpo's tasks score in [floor, 1])
FULL_MARKS = 1.0


@dataclass(frozen=True)
class Finding:
    """One broken rule: which rule and check, what to change, and where."""

    rule: str  # "R1".."R6"
    check: str  # short name of the check, e.g. "imperative"
    message: str  # what is wrong and what to change
    excerpt: str = ""  # the offending piece of text
    example: str = ""  # the example's location (source, else id); set by dataset-level checks
    reward: str = ""
    response: str = ""  # which response the block was built for ("reference", "corrupted"...)
    waived: str = ""  # the reason, when the reward waives this rule (`Reward.waive`)

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    def at(self, *, example: str = "", reward: str = "", response: str = "") -> "Finding":
        """The same finding with its location filled in (fields already set are kept)."""
        return Finding(self.rule, self.check, self.message, self.excerpt,
                       self.example or example, self.reward or reward, self.response or response,
                       self.waived)

    def __str__(self) -> str:
        where = " ".join(x for x in (self.example, self.reward and f"[{self.reward}]",
                                     self.response and f"({self.response})") if x)
        exc = f" -- {self.excerpt!r}" if self.excerpt else ""
        return f"{self.rule} {self.check}: {self.message}{exc}" + (f" @ {where}" if where else "")
