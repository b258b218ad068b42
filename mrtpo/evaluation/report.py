"""What an evaluation produces: headline metrics, grouped figures, per-example records."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class EvalReport:
    """The result of scoring one task's responses.

    `metrics`: the benchmark's headline figures, in display order (e.g. IFEval's four
    accuracies); `groups`: figures per group (a BFCL category) as `{group: {metric: value,
    "n": count}}`; `per_example`: one JSON-ready record per example (id, response, what the
    metric saw); `settings`: what the figures depend on (comparison mode, loose/strict...);
    `warnings`: inexact pairings, skipped examples and similar notes for the user.
    """

    task: str
    n: int
    metrics: dict[str, float]
    groups: dict[str, dict[str, float]] = field(default_factory=dict)
    per_example: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Everything but the per-example records, JSON-ready (NaN becomes null)."""
        return _clean({"task": self.task, "n": self.n, "metrics": self.metrics,
                       "groups": self.groups, "settings": self.settings, "warnings": self.warnings})

    def write_jsonl(self, path: str | Path) -> None:
        """Per-example records, one JSON object per line, written whole or not at all (raises
        `OutputPathError` naming `path`); lone surrogates in responses are written escaped."""
        from mrtpo.textio import json_text, write_text_atomic

        write_text_atomic(path, "".join(json_text(_clean(rec)) + "\n" for rec in self.per_example),
                          "per-example results (JSONL)")


def mean(values) -> float:
    """Mean of booleans/numbers; NaN for none (so an empty group is visibly undefined)."""
    values = list(values)
    return sum(float(v) for v in values) / len(values) if values else float("nan")


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj
