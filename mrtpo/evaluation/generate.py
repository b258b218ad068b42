"""Greedy generation for evaluation: batched, left-padded, through the model's chat template.
The one generation path of `mrtpo eval --model` and of `mrtpo train`'s held-out measurement.

Each prompt is the task's P0 as chat messages, rendered with the tokenizer's chat template
and `add_generation_prompt=True` (the assistant turn is opened, as at serving time), then
tokenised without extra special tokens (the template already has them). Prompts are sorted
by length so a batch holds similar lengths (less padding), padded on the left so every row's
last prompt token sits at the same position, and decoded greedily until EOS or
`max_new_tokens`. The output is in the input order. A rich progress bar on stderr counts
prompts (plain lines when stderr is not a terminal), so `--json` output on stdout stays clean.

Greedy decoding of a left-padded batch equals decoding each prompt alone (the attention mask
hides the padding and positions start at each row's first real token); the tests check it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Sequence

from mrtpo.chat import render_chat
from mrtpo.textio import scrub_all


@dataclass(frozen=True)
class GenerationConfig:
    """How to generate: greedy unless `temperature > 0`."""

    max_new_tokens: int = 512  # cap per response; BFCL and Spider answers are short, IFEval's long
    batch_size: int = 8  # prompts per forward batch
    temperature: float = 0.0  # 0 = greedy (the benchmark convention)
    device: str | None = None  # None: cuda when available, else cpu
    dtype: str = "auto"  # "auto": bfloat16 on cuda, float32 on cpu; or float32/bfloat16/float16
    seed: int = 0  # only used when sampling

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0 (0 means greedy)")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"unknown dtype {self.dtype!r}; use auto, float32, bfloat16 or float16")


def load_model(path: str | Path, config: GenerationConfig):
    """(model, tokenizer) from a local directory, a hub id, a built-in policy's name, or what
    `mrtpo train` wrote (a run directory, a checkpoint, an adapter: mrtpo.harness.run.trained),
    in eval mode, left padding. An adapter is merged into its base's weights."""
    import torch

    from mrtpo.harness.run import trained

    device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if config.dtype == "auto":
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    else:
        dtype = getattr(torch, config.dtype)
    model, tokenizer = trained.load(trained.locate(path), dtype=dtype, device=device)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def render_prompts(tokenizer, conversations: Sequence[list[dict]]) -> list[list[int]]:
    """Token ids of each conversation through the chat template, assistant turn opened."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            "the tokenizer has no chat template; evaluation renders prompts as chat messages. "
            "Use an instruction-tuned (chat) model, or set tokenizer.chat_template and save it")
    texts = [render_chat(tokenizer, scrub_all(list(msgs)), tokenize=False, add_generation_prompt=True)
             for msgs in conversations]  # scrub_all: tokenizers raise on lone surrogates
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


class Generation(NamedTuple):
    """One response: its text (special tokens removed), its length in tokens (the stop token
    included, as TRL and the trainer's rollout count a completion), and whether it was cut at
    `max_new_tokens` instead of stopping."""

    text: str
    tokens: int
    truncated: bool


def generate(model, tokenizer, conversations: Sequence[list[dict]], config: GenerationConfig = GenerationConfig(),
             progress: bool = True, description: str = "generating", fast: bool = True, lean: bool = True) -> list[str]:
    """One response per conversation, in input order (special tokens removed): `generations`'
    texts."""
    return [g.text for g in generations(model, tokenizer, conversations, config, progress, description, fast, lean)]


def generations(model, tokenizer, conversations: Sequence[list[dict]], config: GenerationConfig = GenerationConfig(),
                progress: bool = True, description: str = "generating", fast: bool = True,
                lean: bool = True) -> list[Generation]:
    """One Generation per conversation, in input order.

    `fast`: each batch's prompts are encoded as the trainer's rollout encodes them (the
    beginning they share once, then each rest), for a fraction of the prefill when the prompts
    share a system text or a worked example; greedy decoding of a model that
    `harness.fast.decode` supports (a Llama-shaped decoder on CPU) then runs there, as the
    trainer's rollout does (no `generate` machinery per step; a row that has stopped leaves
    the products), and otherwise through `generate` with a static KV cache. The same responses
    as plain `generate` (tested): the logits agree to float rounding, so on a real model a near
    tie can rarely go the other way (`benchmarks/speed/eval_decode.py` counts them). `lean`
    False keeps `generate` for decoding (benchmarks switch it off to measure it)."""
    import torch

    from mrtpo.harness.fast.decode import decode_prompts, supports

    prompts = render_prompts(tokenizer, conversations)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]), reverse=True)
    out: list[Generation | None] = [None] * len(prompts)
    eos = _eos_ids(model, tokenizer)
    pad = tokenizer.pad_token_id
    device = next(model.parameters()).device
    sampling = config.temperature > 0
    if sampling:
        torch.manual_seed(config.seed)
    lean = lean and fast and not sampling and supports(model)
    with _progress(progress, description, len(prompts)) as advance, torch.inference_mode():
        for start in range(0, len(order), config.batch_size):
            idx = order[start:start + config.batch_size]
            batch = [prompts[i] for i in idx]
            width = max(len(x) for x in batch)
            if lean and width > 1:  # greedy on CPU, a Llama-shaped model: harness.fast.decode (the same responses)
                new = decode_prompts(model, batch, 1, config.max_new_tokens, eos, pad)[0]  # [B][<= new]
            else:
                ids, mask, cache = _prompt_inputs(model, batch, pad, config.max_new_tokens, fast)  # [B, L]
                gen = model.generate(
                    input_ids=ids.to(device), attention_mask=mask.to(device),
                    max_new_tokens=config.max_new_tokens, do_sample=sampling,
                    temperature=config.temperature if sampling else None, top_p=None, top_k=None,
                    eos_token_id=eos, pad_token_id=pad, disable_compile=True, **cache,
                )  # [B, L + new]
                new = gen[:, width:].tolist()  # [B][new]
            for r, i in enumerate(idx):
                row = new[r]
                tokens = _until_eos(row, eos)
                stopped = len(tokens) < len(row)  # a stop token came (counted, as the rollout counts it)
                out[i] = Generation(tokenizer.decode(tokens, skip_special_tokens=True), len(tokens) + stopped,
                                    not stopped)
            advance(len(idx))
    return [o or Generation("", 0, False) for o in out]


def _prompt_inputs(model, prompts: list[list[int]], pad: int, max_new_tokens: int, fast: bool):
    """(ids [B, L], mask [B, L], generate's cache kwarg or {}) for left-padded prompts; with
    `fast`, their KV cache but the last token's, the shared beginning encoded once."""
    from mrtpo.harness.fast.prefix import prefix_layout

    if fast and max(map(len, prompts)) > 1:
        from mrtpo.harness.rollout import prompt_cache
        from mrtpo.replay.plumbing import cache_kwarg, decoder_of

        try:
            decoder = decoder_of(model)
        except TypeError:  # not a decoder-only transformers LM: plain generate
            decoder = None
        if decoder is not None:
            ids, mask, cache = prompt_cache(model, prompts, 1, pad, max_new_tokens=max_new_tokens)[:3]
            return ids, mask, {cache_kwarg(decoder): cache}
    ids, mask = prefix_layout(prompts, pad, 0, max(map(len, prompts)))  # [B, L] plain left padding
    return ids, mask, {}


def _eos_ids(model, tokenizer) -> list[int]:
    ids = model.generation_config.eos_token_id
    ids = list(ids) if isinstance(ids, (list, tuple)) else ([] if ids is None else [ids])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("neither the model's generation config nor the tokenizer names an EOS token")
    return ids


def _until_eos(tokens: list[int], eos: list[int]) -> list[int]:
    """The generated tokens before the first EOS (padding after it is dropped with it)."""
    for k, t in enumerate(tokens):
        if t in eos:
            return tokens[:k]
    return tokens


class _progress:
    """A rich progress bar on stderr (or nothing), used as `with _progress(...) as advance`."""

    def __init__(self, enabled: bool, description: str, total: int):
        self.enabled, self.description, self.total = enabled, description, total
        self._bar = None

    def __enter__(self):
        if not self.enabled:
            return lambda n: None
        from mrtpo.progress import PlainProgress, lines_wanted

        if lines_wanted():  # a log: plain lines at a steady rate, not a bar drawn at the end
            lines, done = PlainProgress(self.description, self.total, unit="prompt"), [0]
            lines.update(0)

            def advance(n: int) -> None:
                done[0] += n
                lines.update(done[0])
            return advance
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True))
        self._bar.__enter__()
        task = self._bar.add_task(self.description, total=self.total)
        return lambda n: self._bar.advance(task, n)

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.__exit__(*exc)
        return False
