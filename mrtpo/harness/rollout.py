"""Rollout: B prompts, G sampled completions each, with the sampled token ids kept exactly.

Prompts are P0 (`task.messages(example)`) rendered through the tokenizer's chat template
with the generation prompt; sampling always uses P0 (blocks only enter the replay). Rows are
grouped: completions `g*G .. g*G+G-1` answer prompt g, which is the layout the advantage
estimators expect. A completion ends at the first stop token (kept, as it was sampled and
the policy is trained to emit it) or is `truncated` at `max_new_tokens`. A prompt whose
tokens plus `max_new_tokens` do not fit in the model's positions is refused (`check_prompt`):
it is a data problem, and cutting the prompt would train on a question the data never asked.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from mrtpo.tasks.base import Example, Task
from mrtpo.textio import scrub, scrub_all


@dataclass
class Batch:
    """Prompt + response as model inputs: left-padded prompts, right-padded responses."""

    input_ids: torch.Tensor  # [N, P + T]
    attention_mask: torch.Tensor  # [N, P + T]
    position_ids: torch.Tensor  # [N, P + T]
    response_mask: torch.Tensor  # [N, T] 1 on response tokens

    def rows(self, idx: slice) -> "Batch":
        return Batch(self.input_ids[idx], self.attention_mask[idx], self.position_ids[idx],
                     self.response_mask[idx])


@dataclass
class Rollout:
    examples: list[Example]  # N: each prompt's example repeated G times
    prompts: list[str]  # N rendered P0 texts
    prompt_ids: list[list[int]]  # N
    response_ids: list[list[int]]  # N sampled ids, exactly
    responses: list[str]  # N decoded (special tokens dropped)
    truncated: list[bool]  # N: no stop token within max_new_tokens
    group_size: int

    def __len__(self) -> int:
        return len(self.response_ids)

    @property
    def max_length(self) -> int:
        return max((len(r) for r in self.response_ids), default=0)

    def batch(self, pad_id: int, device: torch.device | str = "cpu") -> Batch:
        """Left-pad prompts to P, right-pad responses to T; positions count real tokens only."""
        p = max(len(x) for x in self.prompt_ids)
        t = max(1, self.max_length)
        n = len(self)
        ids = torch.full((n, p + t), pad_id, dtype=torch.long)  # [N, P + T]
        attn = torch.zeros((n, p + t), dtype=torch.long)  # [N, P + T]
        for i, (pr, rs) in enumerate(zip(self.prompt_ids, self.response_ids)):
            ids[i, p - len(pr):p] = torch.tensor(pr)
            attn[i, p - len(pr):p] = 1
            if rs:
                ids[i, p:p + len(rs)] = torch.tensor(rs)
                attn[i, p:p + len(rs)] = 1
        pos = (attn.cumsum(-1) - 1).clamp(min=0)  # [N, P + T]
        resp = attn[:, p:].clone()  # [N, T]
        return Batch(ids.to(device), attn.to(device), pos.to(device), resp.to(device))

    def response_mask(self) -> torch.Tensor:
        t = max(1, self.max_length)
        mask = torch.zeros(len(self), t)  # [N, T]
        for i, r in enumerate(self.response_ids):
            mask[i, :len(r)] = 1
        return mask


def prompt_cache(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, repeats: int):
    """KV cache of the B left-padded prompts [B, P] but their last token, each row repeated
    `repeats` times ([B*G, P - 1]): `generate` then runs only the last prompt token before
    decoding, instead of encoding every prompt G times. Positions as `generate` numbers them."""
    from mrtpo.replay.plumbing import output_cache

    pos = attention_mask.long().cumsum(-1) - 1  # [B, P]
    pos = pos.masked_fill(attention_mask == 0, 1)
    out = model(input_ids=input_ids[:, :-1], attention_mask=attention_mask[:, :-1],
                position_ids=pos[:, :-1], use_cache=True, logits_to_keep=1)
    cache = output_cache(out)
    cache.batch_repeat_interleave(repeats)
    return cache


def render_prompt(tokenizer, task: Task, example: Example) -> str:
    """P0 as the text the model sees: chat template + generation prompt. Lone surrogates in the
    data become U+FFFD: tokenizers raise an opaque TypeError on them."""
    from mrtpo.chat import render_chat

    return render_chat(tokenizer, scrub_all(task.messages(example)), tokenize=False, add_generation_prompt=True)


def prompt_token_ids(tokenizer, text: str) -> list[int]:
    # the chat template already wrote any BOS/special tokens it wants
    return tokenizer(scrub(text), add_special_tokens=False)["input_ids"]


def check_prompt(task: Task, example: Example, prompt_tokens: int, max_new_tokens: int,
                 positions: int | None) -> None:
    """Refuse (DataError naming the task and example) a prompt that leaves no room for the
    response in the model's `positions`."""
    if positions is None or prompt_tokens + max_new_tokens <= positions:
        return
    from mrtpo.harness.data import DataError

    raise DataError(f"task {task.name!r}, example {example.id!r} ({example.source or 'no source'}): "
                    f"the prompt is {prompt_tokens:,} tokens, and with --max-new-tokens "
                    f"{max_new_tokens} it does not fit in the model's {positions:,} positions. "
                    "Shorten or drop that example, lower --max-new-tokens, or use a model with "
                    "more positions.")


@torch.no_grad()
def sample(policy, task: Task, examples: list[Example], num_generations: int, *,
           temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 256,
           greedy: bool = False, logits_processor: list | None = None) -> Rollout:
    """Sample `num_generations` completions for each example (greedy: one, argmax).

    `logits_processor`: extra transformers logits processors, e.g. the loop's per-row seeded
    sampling (mrtpo.harness.distributed.RowSeededSampling).
    """
    from transformers import GenerationConfig

    tok = policy.tokenizer
    g = 1 if greedy else num_generations
    texts = [render_prompt(tok, task, ex) for ex in examples]
    ids = [prompt_token_ids(tok, t) for t in texts]
    from mrtpo.contexts import model_positions

    positions = model_positions(policy.model)
    for ex, x in zip(examples, ids):
        check_prompt(task, ex, len(x), max_new_tokens, positions)
    p = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), p), policy.pad_id, dtype=torch.long)  # [B, P]
    attn = torch.zeros((len(ids), p), dtype=torch.long)  # [B, P]
    for i, x in enumerate(ids):
        input_ids[i, p - len(x):] = torch.tensor(x)
        attn[i, p - len(x):] = 1
    input_ids, attn = input_ids.to(policy.device), attn.to(policy.device)  # [B, P]
    stops = policy.stop_ids
    # a processor that draws each token itself (RowSeededSampling) leaves a single finite
    # score: transformers' own sampling would pick that token too, so decode greedily
    draws = any(getattr(proc, "draws_tokens", False) for proc in logits_processor or [])
    sampled = not greedy and not draws
    gen = GenerationConfig(
        max_new_tokens=max_new_tokens, do_sample=sampled,
        temperature=temperature if sampled else None, top_p=top_p if sampled else None,
        top_k=None, eos_token_id=stops, pad_token_id=policy.pad_id,
    )
    was_training = policy.model.training
    policy.model.eval()
    try:
        with policy.merged() as model:
            kwargs = {}
            if g > 1 and p > 1:  # each prompt encoded once for its G completions
                from mrtpo.replay.plumbing import cache_kwarg, decoder_of

                kwargs[cache_kwarg(decoder_of(model))] = prompt_cache(model, input_ids, attn, g)
            out = model.generate(input_ids=input_ids.repeat_interleave(g, 0),
                                 attention_mask=attn.repeat_interleave(g, 0),  # [B*G, P]
                                 generation_config=gen, logits_processor=logits_processor, **kwargs)
    finally:
        policy.model.train(was_training)
    new = out[:, p:].tolist()  # [B*G, <= max_new_tokens]
    stop_set = set(stops)
    response_ids, truncated = [], []
    for row in new:
        end = next((j for j, t in enumerate(row) if t in stop_set), None)
        response_ids.append(row if end is None else row[:end + 1])
        truncated.append(end is None)
    return Rollout(
        examples=[ex for ex in examples for _ in range(g)],
        prompts=[t for t in texts for _ in range(g)],
        prompt_ids=[x for x in ids for _ in range(g)],
        response_ids=response_ids,
        responses=[tok.decode(r, skip_special_tokens=True) for r in response_ids],
        truncated=truncated,
        group_size=g,
    )
