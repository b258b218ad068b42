"""The supervised warm start of the built-in policy: data with injected errors, and the loop.

Two kinds of sequences, both rendered through the policy's chat template exactly as the
trainer renders prompts (`mrtpo.contexts.render_ids`):
- **P0 -> target**: the prompt sampling uses, with the reference as target, except for a
  share (`error_share`) whose target carries one verified error (see
  `mrtpo.models.errors`). Errors are spread evenly over the rewards they break, so every
  reward of the warm-started policy starts well above 0 and well below 1.
- **P_all -> reference**: the prompt with all blocks of some response (the reference or a
  wrong one) in context, and the reference as target. The policy learns to follow the
  blocks (to copy the reference when it is there, to fix what the SQLite error names), as
  a pretrained instruct model does, so the distance between P_all and P_without_k during
  MRTPO's replay says which tokens each block is about.

The loop is plain AdamW with warm-up and cosine decay over length-bucketed batches; the
loss is next-token cross-entropy on the target (and, at a small weight, on the prompt,
which teaches the from-scratch model the language its prompts are written in).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable, Sequence

from mrtpo.contexts import block_texts, context_messages, render_ids
from mrtpo.models.errors import argument_values, candidate_errors
from mrtpo.tasks.base import Example, Task

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class SFTConfig:
    """The supervised pass; every field is part of the built policy's fingerprint."""

    steps: int = 600  # optimizer steps; the build's time is about steps * seconds per step
    batch_size: int = 16  # sequences per step
    lr: float = 2e-3  # peak learning rate (a from-scratch model of a few million parameters)
    warmup_steps: int = 30  # linear warm-up before the cosine decay
    min_lr_ratio: float = 0.05  # the cosine decays to lr * this
    weight_decay: float = 0.01  # AdamW's decoupled weight decay
    grad_clip: float = 1.0  # max global gradient norm
    error_share: float = 0.45  # share of P0 targets that carry one injected error
    block_share: float = 0.25  # share of sequences with all blocks in context (target: reference)
    prompt_loss_weight: float = 0.1  # loss weight of prompt tokens relative to target tokens
    max_length: int = 1536  # longer sequences lose prompt tokens from the left
    errors_per_example: int = 12  # content-error candidates tried per reference
    contexts_per_example: int = 3  # P_all variants (blocks of different responses) per example
    seed: int = 0


@dataclass
class Target:
    """One supervised target for an example: the reference, or a wrong response and the
    rewards it scores lower than the reference on."""

    text: str
    kind: str  # "reference" or the injected error's kind ("call:wrong_argument", ...)
    failed: tuple[str, ...] = ()


@dataclass
class ExampleData:
    """Everything the warm start draws from for one example (texts, then token ids)."""

    task: Task
    example: Example
    reference: Target
    errors: list[Target]
    p0: Messages
    p_all: list[Messages]  # prompts with all blocks of the reference / of wrong responses
    # filled by `tokenize`
    p0_ids: list[int] = field(default_factory=list)
    p_all_ids: list[list[int]] = field(default_factory=list)
    reference_ids: list[int] = field(default_factory=list)
    error_ids: list[list[int]] = field(default_factory=list)

    def errors_by_reward(self) -> dict[str, list[int]]:
        """reward name -> indices of errors that break it, single-fault errors only when a
        reward has any (so an error teaches the policy to miss one thing at a time)."""
        single: dict[str, list[int]] = {}
        multi: dict[str, list[int]] = {}
        for i, err in enumerate(self.errors):
            for name in err.failed:
                (single if len(err.failed) == 1 else multi).setdefault(name, []).append(i)
        return {name: single.get(name) or multi[name] for name in sorted(set(single) | set(multi))}


def prepare_examples(task: Task, examples: Sequence[Example], cfg: SFTConfig, rng: random.Random,
                     on_example: Callable[[], None] | None = None) -> list[ExampleData]:
    """References, verified errors and P_all prompts for `examples` (those with a reference)."""
    out = []
    references = [task.reference(ex) for ex in examples]
    values = argument_values(task.format, [r for r in references if r is not None])
    for ex, ref in zip(examples, references):
        if on_example is not None:
            on_example()
        if ref is None:
            continue
        rewards = task.rewards(ex)
        ref_verdicts = task.score(ex, ref)
        ref_scores = [v.score for v in ref_verdicts]
        errors = []
        for kind, text in candidate_errors(task.format, ref, rng, cfg.errors_per_example, values):
            verdicts = task.score(ex, text)
            failed = tuple(r.name for r, v, s in zip(rewards, verdicts, ref_scores) if v.score < s - 1e-9)
            if failed:
                errors.append((Target(text, kind, failed), verdicts))
        # P_all: blocks of the reference first, then of some wrong responses (their feedback
        # differs: a SQLite error, a failed constraint), always with the reference as target
        responses = [ref_verdicts] + [v for _, v in rng.sample(errors, min(len(errors), cfg.contexts_per_example - 1))]
        p_all = []
        for verdicts in responses:
            msgs, _ = context_messages(task, ex, block_texts(task, ex, verdicts))
            if msgs not in p_all:
                p_all.append(msgs)
        out.append(ExampleData(task, ex, Target(ref, "reference"), [t for t, _ in errors],
                               task.messages(ex), p_all))
    return out


def texts_for_tokenizer(data: Sequence[ExampleData]) -> list[str]:
    """The texts the tokenizer learns its merges from: every prompt message and target."""
    texts = []
    for d in data:
        for msgs in [d.p0] + d.p_all:
            texts += [m["content"] for m in msgs]
        texts.append(d.reference.text)
        texts += [e.text for e in d.errors]
    return texts


def tokenize(data: Sequence[ExampleData], tokenizer) -> None:
    """Fill in the token ids: prompts through the chat template, targets + end of turn."""
    eos = tokenizer.eos_token_id

    def target_ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]

    for d in data:
        d.p0_ids = render_ids(tokenizer, d.p0)
        d.p_all_ids = [render_ids(tokenizer, m) for m in d.p_all]
        d.reference_ids = target_ids(d.reference.text)
        d.error_ids = [target_ids(e.text) for e in d.errors]


def draw(d: ExampleData, cfg: SFTConfig, rng: random.Random) -> tuple[list[int], list[int], str]:
    """One (prompt ids, target ids, kind) for example `d`, following the recipe's shares."""
    if d.p_all_ids and rng.random() < cfg.block_share:
        return rng.choice(d.p_all_ids), d.reference_ids, "blocks"
    by_reward = d.errors_by_reward()
    if by_reward and rng.random() < cfg.error_share:
        i = rng.choice(by_reward[rng.choice(sorted(by_reward))])
        return d.p0_ids, d.error_ids[i], "error"
    return d.p0_ids, d.reference_ids, "reference"


def collate(pairs: Sequence[tuple[list[int], list[int]]], pad_id: int, max_length: int,
            prompt_weight: float):
    """Right-padded input ids [B, L], attention mask [B, L], the loss weight of predicting
    each token [B, L] and which tokens are target tokens [B, L]."""
    import torch

    rows = []
    for prompt, target in pairs:
        prompt = prompt[max(0, len(prompt) + len(target) - max_length):]
        rows.append((prompt + target, len(prompt)))
    width = max(len(seq) for seq, _ in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # [B, L]
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # [B, L]
    weight = torch.zeros((len(rows), width), dtype=torch.float32)  # [B, L]
    is_target = torch.zeros((len(rows), width), dtype=torch.bool)  # [B, L]
    for i, (seq, n_prompt) in enumerate(rows):
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(seq)] = 1
        weight[i, 1:n_prompt] = prompt_weight  # the first token is never predicted
        weight[i, n_prompt: len(seq)] = 1.0
        is_target[i, n_prompt: len(seq)] = True
    return ids, mask, weight, is_target


def lr_at(step: int, cfg: SFTConfig) -> float:
    """Linear warm-up, then cosine decay to `lr * min_lr_ratio` at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    t = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def train(model, tokenizer, data: Sequence[ExampleData], cfg: SFTConfig,
          on_step: Callable[[int, float], None] | None = None) -> list[float]:
    """Run the supervised pass in place; returns the target-token loss of every step.

    Batches are length-bucketed: each round draws 4 batches' worth of sequences, sorts them
    by length and cuts them into batches, so little compute goes to padding.
    """
    import torch

    if not data:
        raise ValueError("no supervised data: no example of the recipe's tasks has a reference")
    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    model.train()
    losses: list[float] = []
    queue: list[list[tuple[list[int], list[int]]]] = []
    for step in range(cfg.steps):
        if not queue:
            pool = [draw(rng.choice(data), cfg, rng)[:2] for _ in range(4 * cfg.batch_size)]
            pool.sort(key=lambda pt: len(pt[0]) + len(pt[1]))
            queue = [pool[i: i + cfg.batch_size] for i in range(0, len(pool), cfg.batch_size)]
            rng.shuffle(queue)
        ids, mask, weight, is_target = collate(queue.pop(), tokenizer.pad_token_id, cfg.max_length, cfg.prompt_loss_weight)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]  # [B, L-1, V]
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")  # [B, L-1]
        w = weight[:, 1:]  # [B, L-1]
        loss = (nll * w).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        target = is_target[:, 1:]  # [B, L-1]
        losses.append(float((nll.detach() * target).sum() / target.sum().clamp(min=1)))
        if on_step is not None:
            on_step(step, losses[-1])
    model.eval()
    return losses
