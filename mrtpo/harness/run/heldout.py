"""The held-out measurements of a run (--heldout, every --eval-every steps): `<run>/heldout.json`
and one measurement.

The metric is not the trainer's to define: the caller hands the loop a `measure(model,
tokenizer, task, examples, max_new_tokens, description) -> {metric: value}`
(`mrtpo.evaluation.heldout.measure`: `mrtpo eval --model`'s generation and official metrics;
`mrtpo train` passes it). A `measure` that takes `per_example` is asked for each example's
values too (`per_example=True`; it returns them as `{"_per_example": {metric: [value, ...]}}`
beside the means, in the order of `_example_ids`), which a bootstrap over examples needs. One
that takes `responses` is asked for what it generated (`responses=True`: `{"_responses":
[{"text", "tokens", "truncated"}, ...]}`, in the same order), which the loop scores with the
task's rewards: the eval/... metrics of metrics.jsonl come from the same greedy generation as
the official metric.

The loop measures before step 1 (step 0), after every --eval-every steps, and after the last
step. `heldout.json` holds each metric's before and after as `{"before": x, "after": y}` (null
where not measured yet), and every measurement as a point of `_curve`, with what was measured
under the other keys that start with `_`:

    {"ast_accuracy": {"before": 0.125, "after": 0.375}, "format": {"before": 0.5, "after": 0.875},
     "_examples": 8, "_example_ids": ["toolcall-028", ...], "_source": "the last 8 of ...",
     "_max_new_tokens": 160, "_greedy": true, "_before_step": 0, "_after_step": 40, "_every": 20,
     "_curve": [{"step": 0, "ast_accuracy": 0.125, "format": 0.5,
                 "_per_example": {"ast_accuracy": [0.0, 1.0, ...], "format": [...]},
                 "_eval": {"eval/reward": 1.5, "eval/rewards/format/mean": 0.5, ...}},
                {"step": 20, ...}, {"step": 40, "ast_accuracy": 0.375, ...}]}

A point's `_eval` holds the task's reward metrics of the same responses under the names
metrics.jsonl gives them at that step (step 0, before training, has no metrics.jsonl line, so
its are only here); absent where the measure returned no responses. The before and after
points also hold the responses' texts (`_responses`, in the order of `_example_ids`), so what
a run answered can be read, and scored again with `mrtpo eval TASK --responses`, after its
checkpoints are gone; the points between them do not, to keep the file small.

The file is written after each measurement (atomically, never through a link), so a resumed
run finds the measurements it made and does not make them again (`measured`).
"""
from __future__ import annotations

import inspect
import json
import math
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import torch

from mrtpo.tasks.base import Example, Task

FILE = "heldout.json"
CURVE = "_curve"  # every measurement: [{"step": s, metric: value, ..., "_per_example": {...}}]
PER_EXAMPLE = "_per_example"  # each example's values: {metric: [value, ...]} (measure(..., per_example=True))
RESPONSES = "_responses"  # what a measure generated: [{"text", "tokens", "truncated"}] (measure(..., responses=True))
EVAL = "_eval"  # a curve point's reward metrics of the same responses: {"eval/...": value}

Measure = Callable[..., dict[str, Any]]


class Measurement(NamedTuple):
    values: dict[str, float]  # metric -> the mean over the examples
    per_example: dict[str, list] | None  # metric -> one value per example (None: not a mean / not given)
    responses: list[dict] | None  # one {"text", "tokens", "truncated"} per example (None: not given)
    seconds: float


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


def curve(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The points of `doc`'s `_curve` in step order ([] for a file written before there was one)."""
    points = doc.get(CURVE)
    if not isinstance(points, list):
        return []
    return sorted((p for p in points if isinstance(p, dict) and isinstance(p.get("step"), int)),
                  key=lambda p: p["step"])


def measured(doc: dict[str, Any], step: int) -> bool:
    """Whether `doc` holds a measurement at `step`: a point of its curve, or (a file written
    before the curve existed) its before or after taken at that step."""
    if any(p["step"] == step for p in curve(doc)):
        return True
    return any(doc.get(f"_{when}_step") == step and has(doc, when) for when in ("before", "after"))


def rewards_at(doc: dict[str, Any], step: int) -> dict[str, float]:
    """The reward metrics (`eval/...`) of `doc`'s point at `step`, or {} (none there, or a file
    written before points had them)."""
    point = next((p for p in curve(doc) if p["step"] == step), {})
    rewards = point.get(EVAL)
    return dict(rewards) if isinstance(rewards, dict) else {}


def _number(value: Any) -> float | None:
    """A finite number as it is; NaN, infinities and anything else as None (JSON null)."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        else None


def record(doc: dict[str, Any], when: str | None, values: dict[str, float], meta: dict[str, Any]) -> dict[str, Any]:
    """`doc` with `values` entered as the `when` ("before" / "after") measurement (NaN as null;
    `when` None: a point between them, which enters only the curve, `add_point`) and `meta` as
    `_` keys."""
    out = {k: dict(v) for k, v in doc.items() if not k.startswith("_") and isinstance(v, dict)}
    if when is not None:
        for name, value in values.items():
            out.setdefault(name, {"before": None, "after": None})[when] = _number(value)
    for entry in out.values():
        entry.setdefault("before", None)
        entry.setdefault("after", None)
    out.update({k: v for k, v in doc.items() if k.startswith("_")})
    out.update({f"_{k}": v for k, v in meta.items()})
    return out


def add_point(doc: dict[str, Any], step: int, values: dict[str, float],
              per_example: dict[str, list] | None = None, rewards: dict[str, float] | None = None,
              texts: list[str] | None = None) -> dict[str, Any]:
    """`doc` with the measurement at `step` as a point of its curve (replacing one at the same
    step), NaN as null, each example's values under `_per_example`, the reward metrics of
    the same responses (`eval/...`) under `_eval` and the responses' texts under `_responses`
    (in the order of `_example_ids`) when given."""
    point: dict[str, Any] = {"step": step, **{name: _number(v) for name, v in values.items()}}
    if texts is not None:
        point[RESPONSES] = [str(t) for t in texts]
    if per_example:
        point[PER_EXAMPLE] = {name: [_number(float(x)) if isinstance(x, (bool, int, float)) else None for x in xs]
                              for name, xs in per_example.items()}
    if rewards:
        point[EVAL] = {name: _number(v) for name, v in rewards.items()}
    return {**doc, CURVE: [p for p in curve(doc) if p["step"] != step] + [point]}


def write(run_dir: Path, doc: dict[str, Any]) -> None:
    from mrtpo.textio import strict_json, write_atomic

    write_atomic(Path(run_dir) / FILE, strict_json(doc, indent=2) + "\n")


def takes(measure: Measure, name: str) -> bool:
    """Whether `measure` can be asked for `name` (`per_example`, `responses`): it names it or
    takes any keyword (`**kwargs`, as a wrapper that passes them on does)."""
    try:
        params = inspect.signature(measure).parameters.values()
    except (TypeError, ValueError):  # a callable whose signature cannot be read: ask for the means only
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def run(measure: Measure, policy, task: Task, examples: Sequence[Example], max_new_tokens: int,
        description: str) -> Measurement:
    """The metrics (and, where `measure` gives them, each example's values and the responses)
    of the policy as it is now, greedy, in eval mode (no dropout), with the LoRA folded in
    (Policy.merged: in place for float32 weights, to float rounding; for bfloat16 weights with
    --low-precision-fold, the rounded copy the run samples from, so its figures can differ from
    `mrtpo eval` of the saved adapter by that rounding), leaving the random state as it was (so
    a run measured during training trains as one that was not)."""
    t0 = time.perf_counter()
    was_training = policy.model.training
    policy.model.eval()
    devices = [policy.device] if policy.device.type == "cuda" else []
    extra = {name: True for name in ("per_example", "responses") if takes(measure, name)}
    try:
        with torch.random.fork_rng(devices=devices), torch.no_grad(), policy.merged() as model:
            out = measure(model, policy.tokenizer, task, list(examples), max_new_tokens=max_new_tokens,
                          description=description, **extra)
    finally:
        policy.model.train(was_training)
    values = {k: v for k, v in out.items() if not k.startswith("_")}
    per_example = out.get(PER_EXAMPLE) if isinstance(out.get(PER_EXAMPLE), dict) else None
    responses = out.get(RESPONSES) if isinstance(out.get(RESPONSES), list) else None
    if responses is not None and len(responses) != len(examples):
        raise ValueError(f"the held-out measure returned {len(responses)} responses for {len(examples)} examples")
    return Measurement(values, per_example, responses, time.perf_counter() - t0)


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
