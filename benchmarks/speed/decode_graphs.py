"""Decoding on a GPU with and without CUDA graphs: seconds per new token of the rollout.

`mrtpo.harness.rollout.sample` as the trainer calls it (the LoRA folded in, the loop's per-row
seeded sampler, the static cache), eager against `compiled=True`, where transformers compiles
the decoding steps with `torch.compile`'s "reduce-overhead" mode (CUDA graphs: one launch
per step instead of one per operation). On one H200 the eager rollout took 58 to 78 ms per new
token in three measurements of 8 to 64 rows (docs/results.md, "Speed"): Python calls and kernel
launches, not the GPU. This measures what graphs take off that, and what the compile costs.

The policy is random-initialised with SmolLM2-135M-Instruct's shape (a Llama: 30 layers, 576
wide, 9 heads / 3 key-value heads, MLP 1,536, vocabulary 49,152, tied embeddings), built with
`from_config`, so nothing has to travel to the device; its tokenizer is gpu.py's (trained
here in seconds). A random policy rarely stops, so every
row decodes about --max-new-tokens tokens; seconds per token are the rollout's over the
longest completion. Both settings sample the same --batches batches of prompts (text2sql with
the worked example; their lengths differ, as a run's batches do) with the same seeds: first
batch 0 (for the compiled setting, with the compile), then every batch --repeats times. The
compiled setting rounds the static cache's length up to a bucket (rollout.CACHE_BUCKET), so a
batch compiles again only when its cache falls in a new bucket (a slow run in the table). The
completions are compared (compiled kernels round differently, so some may part after a few
tokens). The ms per token are the medians over the runs after each setting's first. Printed as
it goes; --json writes the figures.

    python -m benchmarks.speed.decode_graphs                          # a CUDA GPU, ~2-3 minutes
    python -m benchmarks.speed.decode_graphs --device cpu --quick     # the plumbing on CPU (no graphs there)
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.lib.results import command, write_result
from benchmarks.lib.setting import build_policy, loop_sampler
from benchmarks.speed.timing import sync

SMOLLM2_SHAPE = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                     num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192, rope_theta=100000.0,
                     rms_norm_eps=1e-5, tie_word_embeddings=True)
QUICK_SHAPE = dict(SMOLLM2_SHAPE, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batch-prompts", type=int, default=8)
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1, help="timed passes over the batches, per setting, after its first rollout")
    ap.add_argument("--batches", type=int, default=3, help="batches of other prompts (other prompt lengths)")
    ap.add_argument("--quick", action="store_true", help="a 2-layer model, 2 x 2 rows, 8 tokens")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.batch_prompts, args.num_generations, args.max_new_tokens, args.repeats, args.batches = 2, 2, 8, 1, 2
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import sample
    from mrtpo.tasks import get_task

    cuda = args.device.startswith("cuda")
    task = get_task("text2sql", demo=True)
    examples = task.load()[: args.batch_prompts * args.batches]
    doc: dict = {"device": torch.cuda.get_device_name() if cuda else "cpu",
                 "dtype": args.dtype, "shape": "quick" if args.quick else "SmolLM2-135M", "batch_rows":
                 args.batch_prompts * args.num_generations, "max_new_tokens": args.max_new_tokens, "runs": [],
                 "command": command("benchmarks.speed.decode_graphs", sys.argv[1:] if argv is None else argv)}
    with tempfile.TemporaryDirectory(prefix="mrtpo-decode-") as tmp:
        build_policy(Path(tmp), QUICK_SHAPE if args.quick else SMOLLM2_SHAPE, "Llama", args.dtype)
        policy = load_policy(tmp, lora=True, device=args.device, dtype=args.dtype)
        completions = {}
        batches = [examples[i:i + args.batch_prompts] for i in range(0, len(examples), args.batch_prompts)]

        def rollout(compiled: bool, batch: int, label: str, timed: bool = True):
            sync()
            t = time.perf_counter()
            r = sample(policy, task, batches[batch], args.num_generations, temperature=0.7,  # LoRA folded inside
                       max_new_tokens=args.max_new_tokens, compiled=compiled,
                       logits_processor=loop_sampler(0, 0.7))
            sync()
            seconds = time.perf_counter() - t
            tokens = max(len(x) for x in r.response_ids)
            run = {"setting": "compiled" if compiled else "eager", "label": label, "timed": timed, "batch": batch,
                   "prompt_tokens": max(len(x) for x in r.prompt_ids), "seconds": round(seconds, 3),
                   "decode_steps": tokens, "ms_per_token": round(1000 * seconds / max(1, tokens), 2)}
            doc["runs"].append(run)
            completions.setdefault((run["setting"], batch), r.response_ids)
            print(f"{label} (batch {batch}, prompts up to {run['prompt_tokens']} tokens): {seconds:.2f} s, "
                  f"{tokens} decode steps, {run['ms_per_token']:.1f} ms per token", flush=True)

        # each setting: batch 0 first (for the compiled one, with the compile), then every batch
        # once (other prompt lengths: a batch whose cache falls in a new bucket compiles again)
        for compiled in (False, True):
            name = "compiled" if compiled else "eager"
            rollout(compiled, 0, f"{name}, first" + (" (with the compile)" if compiled else ""), timed=False)
            for i in range(args.repeats):
                for b in range(len(batches)):
                    rollout(compiled, b, f"{name} {i + 1}")
    per_setting = {s: [r["ms_per_token"] for r in doc["runs"] if r["setting"] == s and r["timed"]]
                   for s in ("eager", "compiled")}
    doc["ms_per_token"] = {s: statistics.median(v) for s, v in per_setting.items() if v}
    if len(doc["ms_per_token"]) == 2:
        doc["ratio"] = round(doc["ms_per_token"]["compiled"] / doc["ms_per_token"]["eager"], 3)
    pairs = [(x, y) for (setting, b), rows in completions.items() if setting == "eager"
             for x, y in zip(rows, completions.get(("compiled", b), []))]
    doc["compared_completions"] = len(pairs)
    doc["same_completions"] = sum(x == y for x, y in pairs)
    doc["same_first_tokens"] = sum(x[:8] == y[:8] for x, y in pairs)
    print(f"ms per new token: {doc['ms_per_token']}; compiled / eager {doc.get('ratio')}; same completions "
          f"{doc['same_completions']}/{len(pairs)} (first 8 tokens {doc['same_first_tokens']})", flush=True)
    return write_result(args.json, "decode-graphs", doc)


if __name__ == "__main__":
    main()
