"""The held-out measurements of `mrtpo train` (--heldout, --heldout-every): `mrtpo eval --model`'s
numbers for a policy that is still in memory.

The trainer (mrtpo.harness.loop) cannot import this layer, so `mrtpo train` hands it `measure`
(as `mrtpo.harness.train(cfg, measure=measure)` does from Python). It generates as
`mrtpo eval TASK --model` does (generate.py: batched greedy decoding through the chat template)
and scores with the task's official metric (run.score: execution accuracy, IFEval strict and
loose, BFCL AST accuracy; each reward's mean for other tasks), so the figures are the ones
`mrtpo eval TASK --model RUN --data HELD_OUT --max-new-tokens N` prints for the same examples.
"""
from __future__ import annotations

from typing import Any, Sequence

from mrtpo.evaluation.generate import GenerationConfig, generate
from mrtpo.evaluation.run import per_example as per_example_values
from mrtpo.evaluation.run import score
from mrtpo.harness.run.heldout import PER_EXAMPLE
from mrtpo.tasks.base import Example, Task


def measure(model, tokenizer, task: Task, examples: Sequence[Example], max_new_tokens: int,
            description: str = "held-out", progress: bool = True, batch_size: int = 8,
            per_example: bool = False) -> dict[str, Any]:
    """The task's benchmark metrics (`EvalReport.metrics`) of `model`'s greedy responses, as
    {metric: value}. With `per_example`, also {"_per_example": {metric: [value per example, in
    the order of `examples`]}} for the metrics that are means over examples (run.per_example),
    which a bootstrap over examples needs; the means are the same either way."""
    config = GenerationConfig(max_new_tokens=max_new_tokens, batch_size=batch_size, temperature=0.0)
    responses = generate(model, tokenizer, [task.messages(ex) for ex in examples], config,
                         progress=progress, description=description)
    report = score(task, examples, responses)
    out: dict[str, Any] = {name: float(value) for name, value in report.metrics.items()}
    if per_example:
        out[PER_EXAMPLE] = per_example_values(task, report)
    return out
