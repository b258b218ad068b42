"""The held-out before/after of a run (--heldout): `<run>/heldout.json` and one measurement.

The metric is not the trainer's to define: the caller hands the loop a `measure(model,
tokenizer, task, examples, max_new_tokens, description) -> {metric: value}`
(`mrtpo.evaluation.heldout.measure`: `mrtpo eval --model`'s generation and official metrics;
`mrtpo train` passes it). The loop measures before step 1 and after the last step, and
`heldout.json` holds each metric as `{"before": x, "after": y}` (null where not measured yet),
with what was measured under keys that start with `_`:

    {"ast_accuracy": {"before": 0.125, "after": 0.375}, "format": {"before": 0.5, "after": 0.875},
     "_examples": 8, "_example_ids": ["toolcall-028", ...], "_source": "the last 8 of ...",
     "_max_new_tokens": 160, "_greedy": true, "_after_step": 40}

The file is written after each measurement (atomically, never through a link), so a resumed
run finds the before it measured and does not measure it again at a later step.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from mrtpo.tasks.base import Example, Task

FILE = "heldout.json"

Measure = Callable[..., dict[str, float]]


def read(run_dir: Path) -> dict[str, Any]:
    """The run's heldout.json, or {} when there is none or it cannot be read (then the
    measurements it would have held are taken again)."""
    path = Path(run_dir) / FILE
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def has(doc: dict[str, Any], when: str) -> bool:
    """Whether `doc` holds a `when` ("before" / "after") measurement."""
    metrics = [v for k, v in doc.items() if not k.startswith("_")]
    return bool(metrics) and all(isinstance(v, dict) and when in v for v in metrics) and \
        any(v[when] is not None for v in metrics)


def record(doc: dict[str, Any], when: str, values: dict[str, float], meta: dict[str, Any]) -> dict[str, Any]:
    """`doc` with `values` entered as the `when` measurement (NaN as null) and `meta` as `_` keys."""
    out = {k: dict(v) for k, v in doc.items() if not k.startswith("_") and isinstance(v, dict)}
    for name, value in values.items():
        entry = out.setdefault(name, {"before": None, "after": None})
        entry[when] = value if isinstance(value, (int, float)) and math.isfinite(value) else None
    for entry in out.values():
        entry.setdefault("before", None)
        entry.setdefault("after", None)
    out.update({k: v for k, v in doc.items() if k.startswith("_")})
    out.update({f"_{k}": v for k, v in meta.items()})
    return out


def write(run_dir: Path, doc: dict[str, Any]) -> None:
    from mrtpo.textio import strict_json, write_atomic

    write_atomic(Path(run_dir) / FILE, strict_json(doc, indent=2) + "\n")


def run(measure: Measure, policy, task: Task, examples: Sequence[Example], max_new_tokens: int,
        description: str) -> tuple[dict[str, float], float]:
    """(metrics, seconds) of the policy as it is now, greedy, in eval mode (no dropout), with
    the LoRA folded in where that is exact enough (Policy.merged), leaving the random state as it
    was (so a run measured at its start trains as one that was not)."""
    t0 = time.perf_counter()
    was_training = policy.model.training
    policy.model.eval()
    devices = [policy.device] if policy.device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad(), policy.merged() as model:
            values = measure(model, policy.tokenizer, task, list(examples), max_new_tokens=max_new_tokens,
                             description=description)
    finally:
        policy.model.train(was_training)
    return values, time.perf_counter() - t0


def line(doc: dict[str, Any]) -> str | None:
    """`held-out (8 examples, greedy): format 0.45 -> 0.80, executes 0.20 -> 0.35`, or None."""
    metrics = {k: v for k, v in doc.items() if not k.startswith("_") and isinstance(v, dict)}
    if not metrics:
        return None

    def show(x):
        return "n/a" if x is None else f"{x:.2f}"

    parts = [f"{name} {show(v.get('before'))} -> {show(v.get('after'))}" for name, v in metrics.items()]
    return f"held-out ({doc.get('_examples', '?')} examples, greedy): " + ", ".join(parts)


def summary(values: dict[str, float]) -> str:
    """One measurement in words: `format 0.45, executes 0.20`."""
    return ", ".join(f"{k} {v:.2f}" if isinstance(v, float) and math.isfinite(v) else f"{k} n/a"
                     for k, v in values.items())
