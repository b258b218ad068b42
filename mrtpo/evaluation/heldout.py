"""The held-out measurements of `mrtpo train` (--heldout, --eval-every): `mrtpo eval --model`'s
numbers for a policy that is still in memory, and the responses they were computed from.

The trainer (mrtpo.harness.loop) cannot import this layer, so `mrtpo train` hands it `measure`
(as `mrtpo.harness.train(cfg, measure=measure)` does from Python). It generates as
`mrtpo eval TASK --model` does (generate.py: batched greedy decoding through the chat template)
and scores with the task's official metric (run.score: execution accuracy, IFEval strict and
loose, BFCL AST accuracy; each reward's mean for other tasks), so the figures are the ones
`mrtpo eval TASK --model RUN --data HELD_OUT --max-new-tokens N` prints for the same examples.
The trainer scores the same responses with the task's rewards (eval/... in metrics.jsonl), so
one greedy generation gives both.
"""
from __future__ import annotations

from typing import Any, Sequence

from mrtpo.evaluation.generate import GenerationConfig, generations
from mrtpo.evaluation.run import per_example as per_example_values
from mrtpo.evaluation.run import score
from mrtpo.harness.run.heldout import PER_EXAMPLE, RESPONSES
from mrtpo.tasks.base import Example, Task


def measure(model, tokenizer, task: Task, examples: Sequence[Example], max_new_tokens: int,
            description: str = "held-out", progress: bool = True, batch_size: int = 8,
            per_example: bool = False, responses: bool = False) -> dict[str, Any]:
    """The task's benchmark metrics (`EvalReport.metrics`) of `model`'s greedy responses, as
    {metric: value}. With `per_example`, also {"_per_example": {metric: [value per example, in
    the order of `examples`]}} for the metrics that are means over examples (run.per_example),
    which a bootstrap over examples needs; the means are the same either way. With
    `responses`, also {"_responses": [{"text", "tokens", "truncated"} per example, in order]}:
    what was generated, for the trainer to score with the task's rewards."""
    config = GenerationConfig(max_new_tokens=max_new_tokens, batch_size=batch_size, temperature=0.0)
    generated = generations(model, tokenizer, [task.messages(ex) for ex in examples], config,
                            progress=progress, description=description)
    report = score(task, examples, [g.text for g in generated])
    out: dict[str, Any] = {name: float(value) for name, value in report.metrics.items()}
    if per_example:
        out[PER_EXAMPLE] = per_example_values(task, report)
    if responses:
        out[RESPONSES] = [g._asdict() for g in generated]
    return out
