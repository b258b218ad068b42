"""Training and held-out examples, and which prompts each step uses.

`load_splits` reads the task's data (its bundled sample when no path is given) and holds out
the examples the run measures (--heldout): none of them is trained on.
`prompts_for_step` is a pure function of (step, seed): each epoch is a seeded permutation of
the training set and step s takes the next B examples of the concatenated epochs, so a
resumed run needs no data-loader state to pick up exactly where it stopped.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from mrtpo.tasks.base import Example, Task


class DataError(ValueError):
    """The data could not be read or is unusable; the message names the file and what to do."""


def _looks_like_file(path: str) -> bool:
    return path.startswith((".", "/", "~")) or Path(path).suffix.lower() in {
        ".json", ".jsonl", ".csv", ".parquet", ".tsv", ".txt", ".sqlite", ".db"}


def load_examples(task: Task, path: str | None, what: str = "--data") -> list[Example]:
    if path is not None and not Path(path).expanduser().exists() and _looks_like_file(path):
        raise DataError(f"{what} {path}: no such file or directory. Pass a data file the "
                        f"{task.name!r} task reads (see data_cards/), or leave {what} out to use "
                        "the task's bundled sample.")
    try:
        examples = task.load(path)
    except (OSError, ValueError) as exc:  # the task's own data errors name file, row and field
        raise DataError(f"{what} {path or '(bundled sample)'}: {exc}") from exc
    if not examples:
        raise DataError(f"{what} {path or '(bundled sample)'}: task {task.name!r} read no examples "
                        "from it; check the file's format against the task's data card.")
    return list(examples)


@dataclass
class Splits:
    """The examples of one run: `train` is all it trains on; `heldout` (--heldout, measured
    before step 1, every --eval-every steps and after the last) is never in it."""

    train: list[Example]
    heldout: list[Example]
    heldout_source: str = ""  # where `heldout` came from, in words


def load_splits(task: Task, data: str | None, eval_data: str | None, heldout: int = 0) -> Splits:
    """The training examples and the held-out ones. With `eval_data`, the held-out examples
    are that file's first `heldout` and the training data stays whole. Without it, the last
    `heldout` examples of the training data are held out of training, at most a quarter of
    it (so a small sample keeps most of its examples for training)."""
    train = load_examples(task, data)
    if eval_data is not None:
        if heldout == 0:
            return Splits(train, [])
        held = load_examples(task, eval_data, what="--eval-data")
        return Splits(train, held[:heldout], f"the first {min(heldout, len(held))} examples of --eval-data {eval_data}")
    hold = held_out_count(len(train), heldout)
    if hold == 0:
        return Splits(train, [])
    return Splits(train[:-hold], train[-hold:],
                  f"the last {hold} of the {len(train)} examples of "
                  f"{'--data ' + data if data else 'the bundled sample'}, held out of training")


def held_out_count(n_examples: int, heldout: int) -> int:
    """How many of `n_examples` (the last ones) a run holds out of training for --heldout
    `heldout` without --eval-data: at most a quarter of them. `mrtpo eval --heldout` takes the
    same ones."""
    return min(heldout, n_examples // 4)


def prompts_for_step(n_examples: int, step: int, batch_prompts: int, seed: int) -> list[int]:
    """Indices of the examples step `step` (0-based) trains on."""
    out = []
    for pos in range(step * batch_prompts, (step + 1) * batch_prompts):
        epoch, i = divmod(pos, n_examples)
        gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
        out.append(int(torch.randperm(n_examples, generator=gen)[i]))
    return out
