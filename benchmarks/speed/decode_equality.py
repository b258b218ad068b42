"""Does decoding compiled into CUDA graphs sample what eager decoding samples, on real weights?

`mrtpo train` compiles the rollout's decoding steps on a CUDA policy by default
(`--compiled-decoding auto`; `benchmarks/speed/decode_graphs.py` timed it on random weights,
which say nothing of equality). This script samples the same batches twice with the trainer's
own seeded sampler (each row's uniforms come from its own seed, so a row draws the same token
wherever the two settings give the same probabilities): eager, then compiled, for each dtype of
`--dtypes`, on the policy as the trainer samples it (a LoRA adapter moved off its zero start and
folded, `Policy.merged`; in bf16 the folded copy of `--low-precision-fold`). Per dtype it reports:

- the rows, and the share whose completions are the same token for token;
- the share of tokens drawn before a row's first difference (a row that parts late is rounding
  that tipped one draw, not another distribution);
- the largest |log-prob difference| of a drawn token over the tokens both settings drew alike
  (the sampler records each drawn token's log-prob);
- the compiled setting's first batch apart (its compile) and the later batches' seconds.

Float32 should draw the same tokens. In bf16, compiled kernels may round differently, so some
rows may part after a few tokens: how many, and how far the log-probs moved, is what this
measures. Both settings decode through transformers' `generate` (not mrtpo's own CPU
decoder, which eager sampling takes on CPU in the trainer), so they differ by the compile and
the bucketed static cache alone. On CPU transformers compiles nothing: "compiled" there only
lengthens the static cache to its bucket (rollout.CACHE_BUCKET); on SmolLM2 (2 x 2 rows, 8
tokens, 2 batches, a 2-core AMD EPYC) every row drew alike in float32 and bf16, with float32
log-probs within 4.6e-6 (bf16: identical).

    python -m benchmarks.speed.decode_equality --model DIR                  # a CUDA GPU, SmolLM2 built in DIR
    python -m benchmarks.speed.decode_equality --device cpu --quick --model DIR
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

import torch

from benchmarks.lib.results import command, cpu_name, write_result
from benchmarks.lib.setting import adapted_policy, sample_batch, train_setup
from benchmarks.speed.timing import sync


def compare(eager: list[list[int]], compiled: list[list[int]], eager_logps: list[list[float]],
            compiled_logps: list[list[float]]) -> dict:
    """Two samplings of the same rows -> rows, rows alike, tokens drawn before each row's first
    difference (and in all), the largest |log-prob difference| over the tokens drawn alike."""
    same_rows = before = tokens = 0
    largest = 0.0
    for a, b, la, lb in zip(eager, compiled, eager_logps, compiled_logps):
        common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        same_rows += a == b
        before += common
        tokens += max(len(a), len(b))
        if common:
            largest = max(largest, max(abs(x - y) for x, y in zip(la[:common], lb[:common])))
    return {"rows": len(eager), "same_rows": same_rows, "tokens": tokens, "tokens_before_a_difference": before,
            "max_logp_difference": largest}


def merge(parts: list[dict]) -> dict:
    """The batches' comparisons summed (the largest difference the largest)."""
    out = {k: sum(p[k] for p in parts) for k in ("rows", "same_rows", "tokens", "tokens_before_a_difference")}
    out["max_logp_difference"] = max((p["max_logp_difference"] for p in parts), default=0.0)
    return out


def one_dtype(args, dtype: str) -> dict:
    """Both settings over `args.batches` batches on one policy in `dtype` -> its comparison and seconds."""
    from mrtpo.harness.data import prompts_for_step
    from mrtpo.harness.policy import low_precision_fold

    cfg, task, _, _ = train_setup(args.model, args.task, args.options, args.max_new_tokens)
    cfg = replace(cfg, batch_prompts=args.batch_prompts, num_generations=args.num_generations)
    examples = task.load()
    policy = adapted_policy(args.model, cfg, args.seed, device=args.device, dtype=dtype,
                            fold_copy=low_precision_fold("auto", args.device))
    parts, seconds = [], {"eager": [], "compiled": []}
    for b in range(args.batches):  # other prompts, other prompt lengths: other cache buckets, as in a run
        batch = [examples[i] for i in prompts_for_step(len(examples), b, args.batch_prompts, args.seed)]
        got = {}
        for setting in ("eager", "compiled"):
            sync(policy.device)
            t0 = time.perf_counter()
            with torch.no_grad(), policy.merged():
                # both through transformers' generate (lean=False: not mrtpo's own CPU decoder), so
                # the two settings differ by the compile and the bucketed cache alone
                got[setting] = sample_batch(policy, task, batch, cfg, args.seed + b, record_logps=True,
                                            compiled=setting == "compiled", lean=False)
            sync(policy.device)
            seconds[setting].append(round(time.perf_counter() - t0, 3))
        e, c = got["eager"], got["compiled"]
        parts.append(compare(e.response_ids, c.response_ids, e.sampling_logps, c.sampling_logps))
        print(f"{dtype} batch {b}: {parts[-1]['same_rows']}/{parts[-1]['rows']} rows alike, largest log-prob "
              f"difference {parts[-1]['max_logp_difference']:.2e}; eager {seconds['eager'][-1]:.1f} s, compiled "
              f"{seconds['compiled'][-1]:.1f} s", flush=True)
    return {**merge(parts), "seconds": seconds, "folded_copy": policy.folds_a_copy}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="a built-in name (built on first use) or a directory")
    ap.add_argument("--task", default="text2sql")
    ap.add_argument("-o", dest="options", action="append", default=None, metavar="KEY=VALUE")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--batch-prompts", type=int, default=8)
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--batches", type=int, default=3, help="batches of other prompts (the first compiles)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="2 x 2 rows, 8 new tokens, 2 batches")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.batch_prompts, args.num_generations, args.max_new_tokens, args.batches = 2, 2, 8, 2
    if args.device != "cpu" and not torch.cuda.is_available():
        sys.exit("no CUDA device here; pass --device cpu (transformers compiles nothing there)")
    device = torch.cuda.get_device_name() if args.device != "cpu" else f"CPU ({cpu_name()})"
    results: dict = {}
    for dtype in args.dtypes.split(","):  # the file is written after each, so a stopped run keeps the first
        results[dtype] = one_dtype(args, dtype)
        doc = write_result(args.json, "table", document(args, results, device, argv), strict=True)
    rows = doc["rows"]
    print(doc["title"])
    for row in rows:
        print("  " + ", ".join(f"{c}: {v}" for c, v in zip(doc["columns"], row)))
    return doc


def document(args, results: dict, device: str, argv) -> dict:
    """The results file's document for the dtypes measured so far (a `table`; the largest
    difference written in scientific notation, the page's numbers having two decimals)."""
    rows = []
    for dtype, r in results.items():
        later = r["seconds"]["compiled"][1:]
        rows.append([dtype, r["rows"], r["same_rows"] / max(1, r["rows"]),
                     r["tokens_before_a_difference"] / max(1, r["tokens"]), f"{r['max_logp_difference']:.1e}",
                     r["seconds"]["compiled"][0], round(sum(later) / len(later), 3) if later else None,
                     round(sum(r["seconds"]["eager"]) / len(r["seconds"]["eager"]), 3)])
    title = (f"compiled decoding against eager on the trainer's sampler, {args.task}, {args.batch_prompts} x "
             f"{args.num_generations}, {args.max_new_tokens} new tokens, {args.batches} batches, {device}")
    doc = {"section": "decode-graphs", "title": title, "model": args.model,
           "columns": ["dtype", "rows", "rows alike", "tokens before a difference", "largest log-prob difference",
                       "compiled: first batch s (compile)", "compiled: later batches s", "eager: batch s"],
           "rows": rows, "results": results, "device": device,
           "notes": ["each row's uniforms come from its own seed (the trainer's RowSeededSampling): the settings "
                     "draw alike wherever their probabilities agree; float32 should match exactly",
                     "a LoRA adapter moved off its zero start and folded as the trainer samples (bf16 on CUDA: "
                     "the folded copy, --low-precision-fold)"],
           "command": command("benchmarks.speed.decode_equality", sys.argv[1:] if argv is None else argv)}
    return doc


if __name__ == "__main__":
    main()
