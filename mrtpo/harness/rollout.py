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

import contextlib
from dataclasses import dataclass
from typing import NamedTuple

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

    def rows(self, idx: "slice | torch.Tensor") -> "Batch":
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
    # N: each sampled token's log-prob under the model that sampled it, when it was not the
    # trained weights (--rollout-dtype bfloat16); the update's importance-sampling correction
    sampling_logps: list[list[float]] | None = None
    # the prompts' common beginning (system text, worked example) as the sampling model encoded
    # it (plumbing.EncodedStart): the replay takes it while the weights stand (None: no such
    # beginning; a bf16 copy's, --rollout-dtype, is never taken: another model)
    prompt_start: object = None
    # with compiled decoding: (rows, static cache positions), the shape the decoding steps were
    # compiled for; a shape seen before reuses its compiled steps (None: eager decoding)
    compiled_shape: tuple[int, int] | None = None

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

    def sampling_logp_matrix(self) -> torch.Tensor | None:
        """`sampling_logps` right-padded with 0 to the batch's [N, T]; None when not kept."""
        if self.sampling_logps is None:
            return None
        out = torch.zeros(len(self), max(1, self.max_length))  # [N, T]
        for i, r in enumerate(self.sampling_logps):
            out[i, :len(r)] = torch.tensor(r, dtype=out.dtype)
        return out

    def response_mask(self) -> torch.Tensor:
        t = max(1, self.max_length)
        mask = torch.zeros(len(self), t)  # [N, T]
        for i, r in enumerate(self.response_ids):
            mask[i, :len(r)] = 1
        return mask


#: with compiled decoding, the static cache's length is rounded up to a multiple of this, so
#: that batches whose prompts differ in length share one compiled shape (each new shape
#: compiles again: about a minute for SmolLM2 on an H200); the attention still reads the extra,
#: masked positions at every step (up to 255 of them; their cost is not measured)
CACHE_BUCKET = 256


def compiled_decoding(setting: str, device) -> bool:
    """`--compiled-decoding`: "on", "off", or "auto" = on for a CUDA policy (CUDA graphs take
    decoding from launch-bound to its arithmetic; `benchmarks/speed/decode_graphs.py`), off
    elsewhere (transformers compiles nothing on CPU)."""
    from mrtpo.harness.policy import on_for_cuda

    return on_for_cuda(setting, device, "compiled decoding")


def cache_room(width: int, max_new_tokens: int, bucket: int | None = None) -> int:
    """Positions the static cache holds: the `width` cached prompt columns, the last prompt
    token and `max_new_tokens`, rounded up to a multiple of `bucket` when one is given."""
    room = width + 1 + max_new_tokens
    return -(-room // bucket) * bucket if bucket else room


class PromptCache(NamedTuple):
    """`prompt_cache`'s result."""

    ids: torch.Tensor  # [B*G, P]
    mask: torch.Tensor  # [B*G, P]
    cache: object  # every prompt token but the last, each row repeated G times
    start: object  # plumbing.EncodedStart of the prompts' common beginning, or None
    room: int | None = None  # the static cache's positions (None: a dynamic cache)


def prompt_cache(model, prompts: list[list[int]], repeats: int, pad_id: int, *,
                 max_new_tokens: int | None = None, common_prefix: bool = True,
                 bucket: int | None = None) -> PromptCache:
    """The B prompts [B][P_b] as `generate` input with their KV cache: (ids [B*G, P], mask
    [B*G, P], cache of every prompt token but the last, each row repeated `repeats` = G times,
    the common beginning's KV as the replay can reuse it under the same weights).

    `generate` then runs only the last prompt token before decoding, instead of encoding every
    prompt G times; with `common_prefix` the beginning all prompts share is encoded once for
    all (`prefix.encode_prompts`, whose layout the ids and mask take). `max_new_tokens`: the
    cache is a static one with room for that many tokens, written in place as decoding goes
    (a dynamic cache copies itself whole at every new token: half of decoding's time on 2
    cores); None, or a model whose layers are not all full-attention, keeps the dynamic one.
    `bucket`: the static cache's length rounded up to a multiple of it (`cache_room`); the
    extra positions stay masked, so the completions are the same."""
    from mrtpo.harness.fast.prefix import encode_prompts, prefix_layout
    from mrtpo.replay.plumbing import cache_kwarg, decoder_of, device_of

    decoder, device = decoder_of(model), device_of(model)
    enc = encode_prompts(decoder, [x[:-1] for x in prompts], device, cache_kwarg(decoder),
                         share_common=common_prefix, keep_start=model)
    ids, mask = prefix_layout(prompts, pad_id, enc.common, enc.width + 1)  # [B, P]
    cache = enc.cache
    cache.batch_repeat_interleave(repeats)
    room = None
    if max_new_tokens is not None:
        room = cache_room(enc.width, max_new_tokens, bucket)
        cache = _static_copy(model, cache, enc.width, room)
        room = room if cache is not enc.cache else None
    return PromptCache(ids.to(device).repeat_interleave(repeats, 0), mask.to(device).repeat_interleave(repeats, 0),
                       cache, enc.start, room)


def _static_copy(model, cache, length: int, room: int):
    """A StaticCache of `room` positions holding the dynamic `cache`'s first `length`; the
    dynamic cache itself when a layer is not a plain full-attention one (sliding windows)."""
    from transformers import StaticCache
    from transformers.cache_utils import StaticLayer

    static = StaticCache(config=model.config, max_cache_len=room)
    if len(static.layers) != len(cache.layers) or any(type(x) is not StaticLayer for x in static.layers):
        return cache
    for dst, src in zip(static.layers, cache.layers):
        dst.lazy_initialization(src.keys, src.values)
        dst.keys[:, :, :length] = src.keys
        dst.values[:, :, :length] = src.values
        dst.cumulative_length.fill_(length)
    return static


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
           greedy: bool = False, logits_processor: list | None = None,
           static_cache: bool = True, common_prefix: bool = True, packed: bool = True, cascade: bool = True,
           dtype: torch.dtype | None = None, compiled: bool = False, lean: bool = True) -> Rollout:
    """Sample `num_generations` completions for each example (greedy: one, argmax).

    `dtype`: sample from a copy of the policy in this dtype (`Policy.sampler`; None: the
    weights themselves); a processor that records its tokens' log-probs (RowSeededSampling
    with `record_logps`) fills the rollout's `sampling_logps`.

    `logits_processor`: extra transformers logits processors, e.g. the loop's per-row seeded
    sampling (mrtpo.harness.distributed.RowSeededSampling). `static_cache`, `common_prefix`:
    the fast paths of `prompt_cache`; `packed`: the vocabulary head's weight packed once on
    CPU (MKL or oneDNN, by the CPU), and on the lean path every layer's projections too
    (`harness.packed`);
    `cascade`: decoding attention reads each prompt's cached keys and values once for its G
    rows (`harness.cascade`). All on; the same completions,
    tested; benchmarks switch them off to measure them. `lean`: on CPU, a Llama-shaped model
    whose tokens are drawn by a processor (or greedily) decodes with `harness.decode` instead of
    `generate` (the same completions, tested); `static_cache` and `cascade` are `generate`'s
    settings, which that path does not take.

    `compiled`: let transformers compile the decoding steps (with the static cache, on a GPU:
    `torch.compile`'s "reduce-overhead", CUDA graphs), the cache's length rounded up to a
    multiple of CACHE_BUCKET so that batches of other prompt lengths reuse a compiled shape
    (`Rollout.compiled_shape` says which). Off here by default; the trainer turns it on for CUDA
    policies (`compiled_decoding`, `--compiled-decoding`). Transformers compiles nothing on CPU.
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
    stops = policy.stop_ids
    # a processor that draws each token itself (RowSeededSampling) leaves a single finite
    # score: transformers' own sampling would pick that token too, so decode greedily
    draws = any(getattr(proc, "draws_tokens", False) for proc in logits_processor or [])
    sampled = not greedy and not draws
    gen = GenerationConfig(
        max_new_tokens=max_new_tokens, do_sample=sampled,
        temperature=temperature if sampled else None, top_p=top_p if sampled else None,
        top_k=None, eos_token_id=stops, pad_token_id=policy.pad_id,
        disable_compile=not compiled,
    )
    was_training = policy.model.training
    policy.model.eval()
    try:
        with policy.sampler(dtype) as model:
            from mrtpo.harness.fast.decode import decode_prompts, supports

            room = None
            if lean and p > 1 and not sampled and not compiled and supports(model):
                new, start = decode_prompts(model, ids, g, max_new_tokens, stops, policy.pad_id,
                                            logits_processor or [], common_prefix, packed)
            else:
                new, start, room = _generate(model, ids, g, gen, policy.pad_id, logits_processor, static_cache,
                                             common_prefix, packed, cascade, compiled, max_new_tokens)
    finally:
        policy.model.train(was_training)
    stop_set = set(stops)
    response_ids, truncated = [], []
    for row in new:
        end = next((j for j, t in enumerate(row) if t in stop_set), None)
        response_ids.append(row if end is None else row[:end + 1])
        truncated.append(end is None)
    recorded = next((proc.logps() for proc in logits_processor or [] if getattr(proc, "record_logps", False)), None)
    sampling_logps = None if recorded is None else [
        recorded[i, :len(r)].tolist() for i, r in enumerate(response_ids)]  # [B*G][len]
    return Rollout(
        examples=[ex for ex in examples for _ in range(g)],
        prompts=[t for t in texts for _ in range(g)],
        prompt_ids=[x for x in ids for _ in range(g)],
        response_ids=response_ids,
        responses=[tok.decode(r, skip_special_tokens=True) for r in response_ids],
        truncated=truncated,
        group_size=g,
        sampling_logps=sampling_logps,
        prompt_start=start,
        compiled_shape=(len(ids) * g, room) if compiled and room is not None else None,
    )


def _generate(model, ids: list[list[int]], g: int, gen, pad_id: int, logits_processor, static_cache: bool,
              common_prefix: bool, packed: bool, cascade: bool, compiled: bool, max_new_tokens: int):
    """(new tokens per row [B*G][<= max_new_tokens], the prompts' encoded start, the static
    cache's positions or None) through transformers' `generate`, with the fast paths `sample`
    names."""
    from mrtpo.harness.fast.cascade import shared_prompt_attention
    from mrtpo.harness.fast.packed import packed_head
    from mrtpo.replay.plumbing import cache_kwarg, decoder_of, device_of

    p = max(len(x) for x in ids)
    if p > 1:  # each prompt encoded once for its G completions, their shared beginning once
        input_ids, attn, cache, start, room = prompt_cache(
            model, ids, g, pad_id, common_prefix=common_prefix,
            max_new_tokens=max_new_tokens if static_cache else None,
            bucket=CACHE_BUCKET if compiled else None)  # [B*G, P]
        kwargs = {cache_kwarg(decoder_of(model)): cache}
    else:
        input_ids = torch.tensor(ids, device=device_of(model)).repeat_interleave(g, 0)  # [B*G, 1]
        attn, kwargs, start, room = torch.ones_like(input_ids), {}, None, None
    with contextlib.ExitStack() as fast:
        if packed:
            fast.enter_context(packed_head(model, input_ids.shape[0]))
        if cascade and kwargs:  # rows g*G .. g*G+G-1 share the cache's prompt columns
            fast.enter_context(shared_prompt_attention(model, g, input_ids.shape[1] - 1))
        out = model.generate(input_ids=input_ids, attention_mask=attn, generation_config=gen,
                             logits_processor=logits_processor, **kwargs)
    return out[:, p:].tolist(), start, room
