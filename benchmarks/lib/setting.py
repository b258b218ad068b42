"""The setting a benchmark measures in, built the way `mrtpo train` builds it.

- `train_setup`: the TrainConfig a model trains with (a built-in brings the settings of the
  recorded experiments), its task and the first batch's examples;
- `adapted_policy`: the policy with a LoRA adapter, seeded, its B matrices moved off their zero
  start (`move_adapter`) so that its gradients are all non-trivial;
- `sample_batch`: one batch sampled by the loop's own sampler (`RowSeededSampling`, each row
  from its own seeded generator, as `mrtpo train`'s step 1 on one process draws it);
- `step_parser` / `parse_step_args` / `step_settings`: the one-step scripts' common flags and
  the settings their results record;
- `build_policy`: a random-initialised policy of a given shape, saved as a directory (for
  shapes no built-in has: speed/gpu.py's 0.5B, speed/decode_graphs.py's SmolLM2-shaped).
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch


# ------------------------------------------------------------------------------ config, task, examples
def train_setup(model: str, task_name: str, options: list[str] | None, max_new_tokens: int | None = None):
    """(TrainConfig, task, task_args, the first batch's examples): `mrtpo train`'s settings for
    `model` (a built-in brings the settings of the recorded experiments, its task options only
    for its own task) on `task_name` with `-o` options."""
    from mrtpo.harness.config import TrainConfig
    from mrtpo.models.builtin import EXPERIMENT_DEFAULTS, with_train_defaults
    from mrtpo.tasks import get_task
    from mrtpo.tasks.options import read_options

    values = with_train_defaults({"model": model, "task": task_name}, EXPERIMENT_DEFAULTS)
    task_args = {**values.get("task_args", {}), **read_options(options or [])}
    cfg = TrainConfig(**{**values, "task": task_name, "task_args": task_args,
                         **({"max_new_tokens": max_new_tokens} if max_new_tokens else {})})
    task = get_task(task_name, **task_args)
    return cfg, task, task_args, task.load()[: cfg.batch_prompts]


def step_parser(doc: str, repeats: int | None = None) -> argparse.ArgumentParser:
    """The arguments every one-step speed script takes (--model, --task, -o, --threads, --json),
    with `repeats`: also --repeats (that default) and --seed (0), for scripts that alternate
    settings over rounds; the script adds its own."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--task", default="text2sql")
    ap.add_argument("-o", dest="options", action="append", default=None, metavar="KEY=VALUE")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    if repeats is not None:
        ap.add_argument("--repeats", type=int, default=repeats)
        ap.add_argument("--seed", type=int, default=0)
    return ap


def parse_step_args(ap: argparse.ArgumentParser, argv: list[str] | None):
    """(`ap`'s arguments, the 1-minute load average before the run), with --threads applied:
    another job on the cores slows every setting alike, but says how to read the times."""
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    return args, os.getloadavg()[0]


def step_settings(cfg, task_args: dict) -> dict:
    """The train settings a speed result was measured with, as its JSON records them."""
    return {k: getattr(cfg, k) for k in ("batch_prompts", "num_generations", "max_new_tokens",
                                         "temperature")} | {"task_args": task_args}


# ------------------------------------------------------------------------------ the policy
def move_adapter(policy, seed: int) -> None:
    """Set every LoRA B matrix of `policy` to seeded noise (0.01 x normal): an adapter away from
    its zero start, as after some training, so that its gradients are all non-trivial and
    folding it changes the weights. The same seed gives the same adapter."""
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.01)


def adapted_policy(model: str, cfg, seed: int | None, *, lora_dropout: float = 0.0, sparse_dropout: bool = True,
                   **load):
    """`model` (a built-in name, built on first use, or a directory) with `cfg`'s LoRA adapter:
    its A matrices drawn from `seed` and its B matrices moved (`move_adapter`, same seed), so
    the same policy in every run and every copy; `seed` None: torch's generator as it stands
    and the B matrices at their zero start, as `mrtpo train` begins. Float32 on the CPU unless
    `load` says otherwise (further `harness.policy.load_policy` arguments)."""
    from mrtpo.harness.policy import load_policy
    from mrtpo.models.builds import resolve_model

    if seed is not None:
        torch.manual_seed(seed)
    policy = load_policy(resolve_model(model), lora=True, lora_r=cfg.lora_r, lora_alpha=cfg.lora_alpha,
                         lora_dropout=lora_dropout, sparse_dropout=sparse_dropout,
                         **{"device": "cpu", "dtype": "float32", **load})
    if seed is not None:
        move_adapter(policy, seed)
    return policy


# ------------------------------------------------------------------------------ the loop's sampler
def loop_sampler(seed: int, temperature: float, top_p: float = 1.0, record_logps: bool = False) -> list:
    """The logits processors `mrtpo train` samples step 1 with on one process (run seed
    `seed`): each row from its own seeded generator (`harness.distributed.RowSeededSampling`)."""
    from mrtpo.harness.distributed import RowSeededSampling

    return [RowSeededSampling(seed, 1, 0, temperature, top_p, record_logps)]


def sample_batch(policy, task, examples, cfg, seed: int, record_logps: bool = False, **paths):
    """`cfg.num_generations` completions of each of `examples`, sampled as `mrtpo train`'s loop
    samples them (its sampler with run seed `seed`; `cfg`'s temperature, top-p and new tokens);
    `paths`: further `harness.rollout.sample` arguments (the fast paths, the dtype)."""
    from mrtpo.harness.rollout import sample

    return sample(policy, task, examples, cfg.num_generations, temperature=cfg.temperature, top_p=cfg.top_p,
                  max_new_tokens=cfg.max_new_tokens,
                  logits_processor=loop_sampler(seed, cfg.temperature, cfg.top_p, record_logps), **paths)


# ------------------------------------------------------------------------------ a random policy
#: the random policies' vocabulary: mrtpo-tiny's (retired), so their shapes stay as recorded
TOKENIZER_VOCAB = 4096


def tokenizer():
    """(tokenizer, where it came from): a byte-level BPE with a ChatML template trained here on
    the bundled tasks' text (a few seconds, seeded by its input)."""
    from mrtpo.models.tiny import train_tokenizer
    from mrtpo.tasks import get_task

    texts = []
    for name in ("toolcall", "text2sql", "instruct"):
        task = get_task(name)
        for ex in task.load():
            texts += [ex.prompt, ex.system or ""]
            try:
                texts.append(task.reference(ex))
            except Exception:  # a task without references
                pass
    return train_tokenizer(texts, vocab_size=TOKENIZER_VOCAB), "trained here on the bundled tasks' text"


def build_policy(path: Path, shape: dict, architecture: str = "Qwen2", dtype: str = "bfloat16") -> str:
    """A random-initialised `architecture` ("Qwen2" or "Llama") model of `shape` in `dtype`
    with `tokenizer()`, saved to `path` -> what was built, in words."""
    import transformers
    from transformers import AutoModelForCausalLM

    from mrtpo.models.tiny import save_policy

    tok, where = tokenizer()
    config = getattr(transformers, f"{architecture}Config")(**shape, bos_token_id=None, eos_token_id=tok.eos_token_id,
                                                            pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    save_policy(model, tok, path)
    n = sum(p.numel() for p in model.parameters())
    return (f"{architecture} from_config, {n / 1e6:.0f}M parameters, vocabulary {shape['vocab_size']}, {dtype}; "
            f"tokenizer {where}")
