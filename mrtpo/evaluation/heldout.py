"""The held-out before/after of `mrtpo train` (--heldout): `mrtpo eval --model`'s numbers for a
policy that is still in memory.

The trainer (mrtpo.harness.loop) cannot import this layer, so `mrtpo train` hands it `measure`
(as `mrtpo.harness.train(cfg, measure=measure)` does from Python). It generates as
`mrtpo eval TASK --model` does (generate.py: batched greedy decoding through the chat template)
and scores with the task's official metric (run.score: execution accuracy, IFEval strict and
loose, BFCL AST accuracy; each reward's mean for other tasks), so the figures are the ones
`mrtpo eval TASK --model RUN --data HELD_OUT --max-new-tokens N` prints for the same examples.
"""
from __future__ import annotations

from typing import Sequence

from mrtpo.evaluation.generate import GenerationConfig, generate
from mrtpo.evaluation.run import score
from mrtpo.tasks.base import Example, Task


def measure(model, tokenizer, task: Task, examples: Sequence[Example], max_new_tokens: int,
            description: str = "held-out", progress: bool = True, batch_size: int = 8) -> dict[str, float]:
    """The task's benchmark metrics (`EvalReport.metrics`) of `model`'s greedy responses."""
    config = GenerationConfig(max_new_tokens=max_new_tokens, batch_size=batch_size, temperature=0.0)
    responses = generate(model, tokenizer, [task.messages(ex) for ex in examples], config,
                         progress=progress, description=description)
    return {name: float(value) for name, value in score(task, examples, responses).metrics.items()}
