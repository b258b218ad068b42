"""The supervised warm start of the built-in policy: data with injected errors, and the loop.

Two kinds of sequences, both rendered through the policy's chat template exactly as the
trainer renders prompts (`mrtpo.contexts.render_ids`):
- **P0 -> target**: the prompt sampling uses, with the reference as target, except for a
  share (`error_share`) whose target carries one verified error (see
  `mrtpo.models.injected`). Errors are spread evenly over the rewards they break, so every
  reward of the warm-started policy starts well above 0 and well below 1.
- **The replay's contexts -> what each block makes right**: the contexts MRTPO's replay
  builds for some response (the reference or a wrong one), P_all and each P_without_k.
  P_all's target is the reference: with every block present the policy gets everything
  right (it copies the reference's values, avoids the column a SQLite error names, keeps
  the format the rule states). P_without_k's target carries an error in the aspect block k
  informs and only there (a wrong value without the reference, a broken format without the
  rule, a wrong function name without the function's schema, the erroneous query itself
  without its SQLite error, a broken constraint without its sentence). The policy so learns
  what each block changes on its own, as a pretrained instruct model reads each block, and
  during MRTPO's replay removing block k moves the distribution where reward k is decided.

Before both, a short pre-phase of span copying (`copy_batch`) teaches the from-scratch model
to look a span up in its context and repeat it, which the tool calls and SQL need (function
names, argument values, column names) and which the supervised pass alone learns slowly.

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
from mrtpo.models.builtin import SFTConfig  # the recipe's warm-start settings: data, defined with the recipe
from mrtpo.models.injected import argument_values, candidate_errors
from mrtpo.tasks.base import Example, Task

Messages = list[dict[str, str]]


@dataclass
class Target:
    """One supervised target for an example: the reference, or a wrong response and the
    rewards it scores lower than the reference on."""

    text: str
    kind: str  # "reference" or the injected error's kind ("call:wrong_argument", ...)
    failed: tuple[str, ...] = ()


REFERENCE = -1  # a ContextTargets target index meaning the reference


@dataclass
class ContextTargets:
    """One replay context (P_all or a P_without_k of some response) and what it teaches:
    indices into `ExampleData.errors`, or REFERENCE."""

    messages: Messages
    targets: list[int]
    name: str  # "P_all" or "P_without:<reward>"


@dataclass
class ExampleData:
    """Everything the warm start draws from for one example (texts, then token ids)."""

    task: Task
    example: Example
    reference: Target
    errors: list[Target]
    p0: Messages
    contexts: list["ContextTargets"]  # the replay's contexts of some responses, with targets
    # filled by `tokenize`
    p0_ids: list[int] = field(default_factory=list)
    context_ids: list[list[int]] = field(default_factory=list)
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
        targets = [t for t, _ in errors]
        # the replay's contexts of the reference and of some wrong responses (their feedback
        # differs: a SQLite error, a failed constraint), one that breaks each
        # response-dependent reward first, so that its block's contexts are taught
        picked: list[int] = []
        for k, r in enumerate(rewards):
            hits = [i for i, (e, v) in enumerate(errors) if r.response_dependent and r.name in e.failed
                    and r.block(ex, v[k]).strip()]
            if hits and len(picked) < cfg.contexts_per_example - 1:
                picked.append(rng.choice(hits))
        rest = [i for i in range(len(errors)) if i not in picked]
        picked += rng.sample(rest, min(len(rest), cfg.contexts_per_example - 1 - len(picked)))
        contexts: list[ContextTargets] = []
        for source, verdicts in [(REFERENCE, ref_verdicts)] + [(i, errors[i][1]) for i in picked]:
            contexts += replay_contexts(task, ex, verdicts, source, targets, rewards)
        merged: dict[str, ContextTargets] = {}  # one entry per distinct context, targets pooled
        for c in contexts:
            key = repr(c.messages)
            if key in merged:
                merged[key].targets += c.targets
            else:
                merged[key] = c
        out.append(ExampleData(task, ex, Target(ref, "reference"), targets, task.messages(ex),
                               list(merged.values())))
    return out


def replay_contexts(task: Task, example: Example, verdicts, source: int, errors: Sequence[Target],
                    rewards) -> list[ContextTargets]:
    """P_all and each P_without_k of one response (`source`: REFERENCE or an error's index),
    with their targets: P_all teaches the reference; P_without_k an error in reward k's aspect
    (of the errors breaking k, those breaking the fewest rewards), or, for a block written from this
    response's own feedback (the SQLite error), this response itself, whose error the block
    named. A P_without_k equal to P_all (an empty block) is left out."""
    blocks = block_texts(task, example, verdicts)
    p_all, without = context_messages(task, example, blocks)
    out = [ContextTargets(p_all, [REFERENCE], "P_all")]
    for k, (reward, msgs) in enumerate(zip(rewards, without)):
        if msgs == p_all:
            continue
        if reward.response_dependent:
            teach = [source] if source != REFERENCE else []
        else:
            breaking = [i for i, e in enumerate(errors) if reward.name in e.failed]
            fewest = min((len(errors[i].failed) for i in breaking), default=0)
            teach = [i for i in breaking if len(errors[i].failed) == fewest]
        if teach:
            out.append(ContextTargets(msgs, list(teach), f"P_without:{reward.name}"))
    return out


def texts_for_tokenizer(data: Sequence[ExampleData]) -> list[str]:
    """The texts the tokenizer learns its merges from: every prompt message and target."""
    texts = []
    for d in data:
        for msgs in [d.p0] + [c.messages for c in d.contexts]:
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
        d.context_ids = [render_ids(tokenizer, c.messages) for c in d.contexts]
        d.reference_ids = target_ids(d.reference.text)
        d.error_ids = [target_ids(e.text) for e in d.errors]


def draw_prompt(d: ExampleData, cfg: SFTConfig, rng: random.Random) -> tuple[list[int], list[list[int]], list[str]]:
    """One prompt of example `d` and its targets, following the recipe's shares:
    with probability `context_share` one of the replay's contexts (uniformly) and
    `context_targets` draws from what it teaches; otherwise P0 and `targets_per_prompt`
    independent draws, each an error with probability `error_share` (the reward to break
    chosen uniformly, then one of the errors that break it)."""
    if d.context_ids and rng.random() < cfg.context_share:
        i = rng.randrange(len(d.contexts))
        picks = [rng.choice(d.contexts[i].targets) for _ in range(cfg.context_targets)]
        return (d.context_ids[i], [d.reference_ids if j == REFERENCE else d.error_ids[j] for j in picks],
                [d.contexts[i].name] * len(picks))
    by_reward = d.errors_by_reward()
    targets, kinds = [], []
    for _ in range(cfg.targets_per_prompt):
        if by_reward and rng.random() < cfg.error_share:
            i = rng.choice(by_reward[rng.choice(sorted(by_reward))])
            targets.append(d.error_ids[i])
            kinds.append("error")
        else:
            targets.append(d.reference_ids)
            kinds.append("reference")
    return d.p0_ids, targets, kinds


@dataclass
class SharedBatch:
    """Prompts encoded once, each followed by one or more targets that reuse its KV cache."""

    prompt_ids: "torch.Tensor"  # [B, P] left-padded
    prompt_mask: "torch.Tensor"  # [B, P]
    prompt_weight: "torch.Tensor"  # [B, P] loss weight of predicting each prompt token
    owner: "torch.Tensor"  # [R] the prompt each target row continues
    target_ids: "torch.Tensor"  # [R, T] right-padded
    target_mask: "torch.Tensor"  # [R, T]


def collate_shared(items: Sequence[tuple[list[int], list[list[int]]]], pad_id: int, max_length: int,
                   prompt_weight: float) -> SharedBatch:
    """Left-pad the prompts, right-pad the targets; a prompt too long for `max_length` with
    its longest target loses tokens from the left."""
    import torch

    prompts = []
    for prompt, targets in items:
        longest = max(len(t) for t in targets)
        prompts.append(prompt[max(0, len(prompt) + longest - max_length):])
    p = max(len(x) for x in prompts)
    rows = [(b, t) for b, (_, targets) in enumerate(items) for t in targets]
    t_len = max(len(t) for _, t in rows)
    prompt_ids = torch.full((len(items), p), pad_id, dtype=torch.long)  # [B, P]
    prompt_mask = torch.zeros((len(items), p), dtype=torch.long)  # [B, P]
    weight = torch.zeros((len(items), p), dtype=torch.float32)  # [B, P]
    for b, x in enumerate(prompts):
        prompt_ids[b, p - len(x):] = torch.tensor(x)
        prompt_mask[b, p - len(x):] = 1
        weight[b, p - len(x) + 1:] = prompt_weight  # a prompt's first token is never predicted
    target_ids = torch.full((len(rows), t_len), pad_id, dtype=torch.long)  # [R, T]
    target_mask = torch.zeros((len(rows), t_len), dtype=torch.long)  # [R, T]
    for r, (_, t) in enumerate(rows):
        target_ids[r, : len(t)] = torch.tensor(t)
        target_mask[r, : len(t)] = 1
    owner = torch.tensor([b for b, _ in rows], dtype=torch.long)  # [R]
    return SharedBatch(prompt_ids, prompt_mask, weight, owner, target_ids, target_mask)


def shared_loss(model, batch: SharedBatch) -> tuple["torch.Tensor", float]:
    """Weighted next-token loss of a SharedBatch, and the mean loss per target token.

    The prompts run once with a KV cache; each target row continues its prompt's cache
    (gradients flow through it into the prompt's activations). The first target token is
    predicted from the prompt's last position.
    """
    import torch
    import torch.nn.functional as F

    from mrtpo.replay.plumbing import cache_kwarg, output_cache, select_rows

    pos = (batch.prompt_mask.cumsum(-1) - 1).clamp(min=0)  # [B, P]
    out = model(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask, position_ids=pos, use_cache=True)
    p_logits = out.logits  # [B, P, V]
    cache = output_cache(out)
    select_rows(cache, batch.owner)
    cache_arg = cache_kwarg(model)
    lengths = batch.prompt_mask.sum(-1)[batch.owner]  # [R]
    t_pos = lengths[:, None] + torch.arange(batch.target_ids.shape[1])[None, :]  # [R, T]
    mask = torch.cat([batch.prompt_mask[batch.owner], batch.target_mask], dim=1)  # [R, P + T]
    t_logits = model(input_ids=batch.target_ids, attention_mask=mask, position_ids=t_pos,
                     use_cache=True, **{cache_arg: cache}).logits  # [R, T, V]
    # predictions of target tokens: the prompt's last logit, then the target's own
    pred = torch.cat([p_logits[batch.owner, -1:], t_logits[:, :-1]], dim=1)  # [R, T, V]
    t_nll = F.cross_entropy(pred.transpose(1, 2), batch.target_ids, reduction="none")  # [R, T]
    t_w = batch.target_mask.float()  # [R, T]
    p_nll = F.cross_entropy(p_logits[:, :-1].transpose(1, 2), batch.prompt_ids[:, 1:], reduction="none")  # [B, P-1]
    p_w = batch.prompt_weight[:, 1:]  # [B, P-1]
    loss = ((t_nll * t_w).sum() + (p_nll * p_w).sum()) / (t_w.sum() + p_w.sum())
    return loss, float((t_nll.detach() * t_w).sum() / t_w.sum())


def copy_batch(data: Sequence[ExampleData], cfg: SFTConfig, rng: random.Random):
    """Span-copying sequences: a random span of some prompt's tokens, then the same span.

    Predicting the second copy needs attention that looks up what followed the current
    token earlier in the context (an induction head). A from-scratch model forms that
    mechanism within a few hundred steps on such data, whereas the supervised targets alone
    teach it slowly; the policy needs it to copy function names, arguments and column names
    from its prompt. Returns ids [B, 2L] and the loss weight of predicting each token [B, 2L]
    (1 on the second copy).
    """
    import torch

    ids = torch.zeros((cfg.copy_batch, 2 * cfg.copy_span), dtype=torch.long)  # [B, 2L]
    weight = torch.zeros((cfg.copy_batch, 2 * cfg.copy_span))  # [B, 2L]
    for b in range(cfg.copy_batch):
        source = rng.choice(data).p0_ids
        n = rng.randint(min(8, cfg.copy_span), min(cfg.copy_span, len(source)))
        start = rng.randrange(len(source) - n + 1)
        span = source[start: start + n]
        seq = (span + span)[: 2 * cfg.copy_span]
        ids[b, : len(seq)] = torch.tensor(seq)
        weight[b, n + 1: len(seq)] = 1.0  # the first token of the copy cannot be known
    return ids, weight


def train_copy(model, data: Sequence[ExampleData], cfg: SFTConfig,
               on_step: Callable[[int, float], None] | None = None) -> list[float]:
    """`copy_steps` steps of span copying (warm-up, then the supervised pass's peak rate)."""
    import torch
    import torch.nn.functional as F

    rng = random.Random(cfg.seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    model.train()
    losses = []
    for step in range(cfg.copy_steps):
        for group in opt.param_groups:
            group["lr"] = cfg.lr * min(1.0, (step + 1) / max(1, cfg.warmup_steps))
        ids, weight = copy_batch(data, cfg, rng)  # [B, 2L]
        logits = model(input_ids=ids).logits[:, :-1]  # [B, 2L-1, V]
        nll = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")  # [B, 2L-1]
        w = weight[:, 1:]  # [B, 2L-1]
        loss = (nll * w).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(step, losses[-1])
    model.eval()
    return losses


def example_picker(data: Sequence[ExampleData], cfg: SFTConfig, rng: random.Random) -> Callable[[], ExampleData]:
    """Draw an example: a task by `task_weights`, then one of its examples uniformly."""
    by_task: dict[str, list[ExampleData]] = {}
    for d in data:
        by_task.setdefault(d.task.name, []).append(d)
    names = sorted(by_task)
    given = dict(cfg.task_weights)
    weights = [float(given.get(n, 1.0)) for n in names]

    def pick() -> ExampleData:
        return rng.choice(by_task[rng.choices(names, weights)[0]])
    return pick


def lr_at(step: int, cfg: SFTConfig) -> float:
    """Linear warm-up, then cosine decay to `lr * min_lr_ratio` at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    t = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def train(model, tokenizer, data: Sequence[ExampleData], cfg: SFTConfig,
          on_step: Callable[[int, float], None] | None = None) -> list[float]:
    """Run the supervised pass in place; returns the mean loss per target token of each step.

    Each step draws `batch_prompts` examples; a prompt is encoded once and its targets reuse
    its KV cache, so the long prompts (tool schemas, database schemas) cost once per prompt
    rather than once per target. Prompts of similar length are batched together.
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
    pick = example_picker(data, cfg, rng)
    model.train()
    losses: list[float] = []
    queue: list[list[tuple[list[int], list[list[int]]]]] = []
    for step in range(cfg.steps):
        if not queue:
            pool = [draw_prompt(pick(), cfg, rng)[:2] for _ in range(4 * cfg.batch_prompts)]
            pool.sort(key=lambda item: len(item[0]))
            queue = [pool[i: i + cfg.batch_prompts] for i in range(0, len(pool), cfg.batch_prompts)]
            rng.shuffle(queue)
        batch = collate_shared(queue.pop(), tokenizer.pad_token_id, cfg.max_length, cfg.prompt_loss_weight)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        loss, target_loss = shared_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        losses.append(target_loss)
        if on_step is not None:
            on_step(step, losses[-1])
    model.eval()
    return losses
