"""MRTPO's step, the one that `mrtpo train` (loop.py) and the TRL integration both call.

Given a batch's completions (a `Rollout`), their scores (`Scored`, this process's rows on the
batch's reward columns) and their per-reward credit, `mrtpo_step` returns the token
advantages [N, T]: it takes each (completion, reward)'s token distances q [N, K, T] from the
chosen source (`--mrtpo-weights`) and lets `advantages.place` weight each reward's credit
with them. The rules both trainers follow live here and only here:

- which steps log their completions (`logs_completions`: the first and every Nth);
- a (completion, reward) pair whose credit is exactly 0 is not replayed (its q stays 0): the
  estimators give exactly 0 to a reward that a group scored alike (and SAW weights a
  saturated reward 0), and a weight times zero credit adds nothing to the token advantage, so
  `advantages.place` gives the same result (up to float rounding: the replay batches other
  rows) and the replay runs fewer contexts. Steps that log their completions replay every
  pair (the logs show every distance), as does `replay_zero_credit`. Nothing left to replay:
  no forward;
- the replay itself: `contexts.build_item` -> `contexts.only_rewards` ->
  `replay.replay_onto_columns`, each completion's rewards in its own order laid out on the
  batch's reward columns (a column a row does not have stays 0; its credit is 0 there anyway);
  an empty completion (TRL masks truncated ones out) is not replayed.

The trainers differ only in how they reach the model, which a `Replayer` carries: the loop
folds its LoRA adapter in (`policy_replayer`), TRL unwraps its distributed model.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

import torch

from mrtpo.advantages import Credit, place, shuffle_within, token_weights
from mrtpo.contexts import block_texts, build_item, model_positions, only_rewards
from mrtpo.harness.errors import ConfigError
from mrtpo.spans import spans_token_mask, token_offsets

#: where MRTPO's token weights come from (`--mrtpo-weights`): the replay's distances, the
#: same distances shuffled within each response (a control: placement removed, weight
#: distribution kept), the task's own reward spans (an oracle control: `Task.reward_spans`),
#: or one contrast for all rewards, JS(P_all || P_none) with every block left out (a control:
#: placement kept, the per-reward split removed; one replay instead of K, as CoRT rescores)
WEIGHT_SOURCES = ("replay", "shuffled", "spans", "single")


@dataclass(frozen=True)
class Replayer:
    """The policy as the replay reads it: its tokenizer, the positions it attends over (the
    appended blocks are cut so that P_all plus the response fits), and `open()`, a context
    that yields the model to run teacher-forced."""

    tokenizer: Any
    positions: int | None
    open: Callable[[], ContextManager[torch.nn.Module]]


def policy_replayer(policy) -> Replayer:
    """The loop's policy (harness.policy.Policy): in eval mode, its LoRA folded (`Policy.merged`:
    into float32 weights in place, or into the folded copy of bfloat16 weights; one product per
    projection), its training flag restored after."""

    @contextlib.contextmanager
    def open_model():
        was_training = policy.model.training
        policy.model.eval()
        try:
            with policy.merged() as model:
                yield model
        finally:
            policy.model.train(was_training)

    return Replayer(policy.tokenizer, model_positions(policy.model), open_model)


def logs_completions(step: int, every: int) -> bool:
    """Whether optimizer step `step` (from 1) logs its completions: the first step and every
    `every`th; `every` 0 logs none."""
    return bool(every) and (step == 1 or step % every == 0)


def shuffle_seed(seed: int, step: int) -> int:
    """The generator seed of step `step`'s shuffle (`--mrtpo-weights shuffled`): one per step,
    so a resumed run draws what an uninterrupted one would."""
    return seed * 1_000_003 + step


@dataclass
class TokenCredit:
    """One step's credit on this process's rows: everything its log needs (the completions
    log, `completions.records`, reads only this, for the loop and the TRL trainer alike)."""

    advantages: torch.Tensor  # [N, T] what the loss multiplies into each token's ratio
    distances: torch.Tensor | None  # [N, K, T] q on the batch's reward columns (None: MRTPO off)
    blocks: list[list[str]] | None  # per completion, in its reward order (None: not built)
    credit: Credit  # per-reward credit [N, K] + offset [N], with the reward weights used (SAW included)
    token_weights: torch.Tensor | None = None  # [N, K, T] MRTPO's weights of q (None: MRTPO off)


def mrtpo_step(weights: str | None, replayer: Replayer, task, rollout, scored, credit: Credit,
               mask: torch.Tensor, *, lam: float, temperature: float, logs: bool,
               replay_zero_credit: bool = False, seed: int = 0, step: int = 1) -> TokenCredit:
    """Token advantages [N, T] of one step: `credit` (this process's rows and the batch's
    columns) placed on tokens by the distances from `weights` (one of WEIGHT_SOURCES; None:
    MRTPO off, every token gets its response's advantage). `mask` [N, T]: the tokens the loss
    counts (T may exceed the longest completion). `logs`: this step logs its completions, so
    every pair is replayed; else zero-credit pairs are skipped unless `replay_zero_credit`."""
    q = blocks = None
    if weights is not None:
        skip = not (replay_zero_credit or logs)
        q, blocks = token_distances(weights, replayer, task, rollout, scored, mask, temperature,
                                    credit=credit if skip else None, seed=shuffle_seed(seed, step))  # [N, K, T]
    if logs and blocks is None:
        blocks = blocks_for(task, rollout, scored)
    return TokenCredit(place(credit, q, mask, lam=lam), q, blocks, credit,  # [N, T]
                       None if q is None else token_weights(q, mask, lam))  # [N, K, T]


def token_distances(source: str, replayer: Replayer, task, rollout, scored, mask: torch.Tensor,
                    temperature: float, credit: Credit | None = None,
                    seed: int = 0) -> tuple[torch.Tensor, list[list[str]] | None]:
    """(q [N, K, T] on the batch's reward columns, blocks per completion or None) from
    `source` (one of WEIGHT_SOURCES), T = `mask`'s; `advantages.place` turns q into token
    weights. `credit`: skip the pairs whose credit is 0. `seed` draws the shuffle."""
    if source == "spans":
        return span_distances(replayer.tokenizer, task, rollout, scored, mask.shape[-1]), None
    if source not in WEIGHT_SOURCES:
        raise ConfigError(f"--mrtpo-weights must be one of {', '.join(WEIGHT_SOURCES)}, got {source!r}")
    q, blocks = replay_distances(replayer, task, rollout, scored, temperature, mask.shape[-1], credit=credit,
                                 single=source == "single")
    if source == "shuffled":
        q = shuffle_within(q, mask, torch.Generator().manual_seed(seed))  # [N, K, T]
    return q, blocks


def blocks_for(task, rollout, scored) -> list[list[str]]:
    """Each completion's block texts, in its reward order (for the completions log)."""
    return [block_texts(task, ex, v) for ex, v in zip(rollout.examples, scored.verdicts)]


@torch.no_grad()
def replay_distances(replayer: Replayer, task, rollout, scored, temperature: float, length: int | None = None,
                     credit: Credit | None = None, single: bool = False,
                     options=None) -> tuple[torch.Tensor, list[list[str]]]:
    """(q [N, K, T] on the batch's reward columns, blocks per completion; T = `length` or the
    longest completion). `credit` (advantages.Credit on the same rows and columns): skip the
    pairs whose credit is 0. An empty completion is not replayed (q 0). The prompts' common
    beginning the rollout encoded (`Rollout.prompt_start`) is reused while the weights stand.
    `single`: one context per completion, P_none (every block left out), whose distance is
    every one of its rewards' q (a completion all of whose credit is 0 is skipped). `options`
    (replay.ReplayOptions, default: the trainer's): which sharing the replay uses; the speed
    benchmarks switch it off to time the plain paths."""
    from mrtpo.replay import ReplayOptions, replay_onto_columns

    options = options or ReplayOptions()
    shape = (len(rollout.response_ids), len(scored.names), max(1, length or rollout.max_length))
    rows = [i for i, ids in enumerate(rollout.response_ids) if len(ids)]
    items = [build_item(task, replayer.tokenizer, rollout.examples[i], rollout.response_ids[i],
                        scored.verdicts[i], replayer.positions, single=single) for i in rows]
    if credit is not None:
        def credited(i: int) -> list[bool]:
            row = [bool(credit.per_reward[i, scored.column(name)] != 0) for name in scored.row_names[i]]
            return [any(row)] if single else row

        items = [only_rewards(item, credited(i)) for i, item in zip(rows, items)]
    replayed = dict(zip(rows, items))
    blocks = [replayed[i].blocks if i in replayed else block_texts(task, ex, v)
              for i, (ex, v) in enumerate(zip(rollout.examples, scored.verdicts))]
    if all(ctx == item.context_ids[0] for item in items for ctx in item.context_ids[1:]):
        return torch.zeros(shape), blocks  # nothing to replay (every pair has zero credit)
    columns = [[scored.column(name) for name in scored.row_names[i]] for i in rows]
    if single:  # one distance per completion, laid on each of its reward columns
        with replayer.open() as model:
            q1 = replay_onto_columns(model, items, [[0]] * len(rows), (shape[0], 1, shape[2]),
                                     temperature=temperature, rows=rows, known=rollout.prompt_start,
                                     options=options)  # [N, 1, T]
        q = torch.zeros(shape)  # [N, K, T]
        for i, cols in zip(rows, columns):
            q[i, cols] = q1[i, 0]
        return q, blocks
    with replayer.open() as model:
        q = replay_onto_columns(model, items, columns, shape, temperature=temperature, rows=rows,
                                known=rollout.prompt_start, options=options)  # [N, K, T]
    return q, blocks


_NO_SPANS = ("--mrtpo-weights spans: task {task!r} cannot say which tokens each reward is about (it "
             "does not override Task.reward_spans); use --mrtpo-weights replay or shuffled, or a task "
             "that does (toolcall)")


def spans_problem(task) -> str | None:
    """Why `--mrtpo-weights spans` cannot run on `task` (it does not override
    Task.reward_spans), or None: asked before the model loads, so the refusal is at once."""
    from mrtpo.tasks.base import Task

    if getattr(type(task), "reward_spans", None) is Task.reward_spans:
        return _NO_SPANS.format(task=task.name)
    return None


def span_distances(tokenizer, task, rollout, scored, length: int | None = None) -> torch.Tensor:
    """q [N, K, T]: 1 on the tokens of each reward's spans (`task.reward_spans`), 0 elsewhere;
    no forward pass. A token that decodes to nothing (the end of turn) is the format's; a
    reward with no spans on a response gets 0 there, hence weight 1 on every token."""
    q = torch.zeros(len(rollout.response_ids), len(scored.names), max(1, length or rollout.max_length))  # [N, K, T]
    for i, (ex, ids, text) in enumerate(zip(rollout.examples, rollout.response_ids, rollout.responses)):
        spans = task.reward_spans(ex, text)
        if spans is None:
            raise ConfigError(_NO_SPANS.format(task=task.name))
        offsets = token_offsets(tokenizer, ids)
        for name, ranges in spans.items():
            if name not in scored.names:
                continue
            hit = spans_token_mask(offsets, ranges)  # [T_i]
            if name == "format":
                hit = [h or a == b for h, (a, b) in zip(hit, offsets)]
            q[i, scored.column(name), :len(hit)] = torch.tensor(hit, dtype=torch.float32)
    return q
