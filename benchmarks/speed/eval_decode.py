"""Greedy evaluation decoding (`mrtpo eval --model`, `mrtpo train`'s held-out measurements)
through the rollout's lean decoder against transformers' `generate`, side by side in one run.

Both decode the same held-out prompts of a task greedily, in the evaluation's batches
(`evaluation.generate.generations`, the prompts encoded once as the rollout encodes them), one
with `lean` (harness.fast.decode, what a Llama-shaped model on CPU takes) and one without
(`generate` on the static prompt cache, the path before), alternated for `--repeats` rounds
(the first order flips each round) after a warm-up round of each. It prints and writes the
medians, their ratio, and how many responses came out the same (greedy decoding of logits
that agree to float rounding: a near tie can go the other way). Written as a
`mrtpo.table/1` file for the results page.

    python -m benchmarks.speed.eval_decode [--model smollm2-135m] [--task instruct] [-o prompts=generated]
        [--eval-data ifeval] [--examples 32] [--max-new-tokens 128] [--repeats 3] [--threads 1]
        [--json benchmarks/results/speed-eval-decode-smollm2-135m-instruct.json]
"""
from __future__ import annotations

import statistics
import sys

import torch

from benchmarks.lib.results import command, cpu_name, print_table, write_result
from benchmarks.lib.setting import parse_step_args, step_parser
from benchmarks.speed.timing import timed

PATHS = ("lean", "generate")


def decoded(model, tok, conversations, config, order: list[str]) -> dict:
    """{path: (generations, seconds)} for the paths in `order`."""
    from mrtpo.evaluation.generate import generations

    return {path: timed(lambda: generations(model, tok, conversations, config, progress=False,
                                            lean=path == "lean")) for path in order}


def main(argv: list[str] | None = None) -> dict:
    ap = step_parser(__doc__, repeats=3)
    ap.add_argument("--eval-data", default=None, help="held-out file or name (as mrtpo train's --eval-data)")
    ap.add_argument("--examples", type=int, default=32, help="held-out prompts decoded per round")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=8, help="prompts per batch (the evaluation's default)")
    args, load = parse_step_args(ap, argv)
    from mrtpo.evaluation.generate import GenerationConfig, load_model
    from mrtpo.harness.fast.decode import supports
    from mrtpo.harness.data import load_splits
    from mrtpo.models.builtin import builtin_name
    from mrtpo.tasks import get_task
    from mrtpo.tasks.options import read_options

    task_args = read_options(args.options or [])
    task = get_task(args.task, **task_args)
    splits = load_splits(task, None, args.eval_data, args.examples)
    if not splits.heldout:
        raise SystemExit(f"--task {args.task}: no held-out examples; pass --eval-data FILE")
    conversations = [task.messages(ex) for ex in splits.heldout]
    config = GenerationConfig(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, device="cpu")
    model, tok = load_model(args.model, config)
    if not supports(model):
        raise SystemExit(f"--model {args.model}: the lean decoder does not take this model (see harness.fast.decode)")
    decoded(model, tok, conversations, config, list(PATHS))  # warm-up
    rounds = []
    for r in range(args.repeats):
        order = list(PATHS) if r % 2 == 0 else list(PATHS)[::-1]
        got = decoded(model, tok, conversations, config, order)
        (lean, t_lean), (plain, t_plain) = got["lean"], got["generate"]
        rounds.append({"lean": t_lean, "generate": t_plain, "same": sum(a == b for a, b in zip(lean, plain)),
                       "responses": len(plain), "tokens": sum(g.tokens for g in plain)})
        print(f"round {r + 1}: lean {t_lean:.1f} s, generate {t_plain:.1f} s, same responses "
              f"{rounds[-1]['same']}/{len(plain)}", flush=True)
    med = {p: statistics.median(x[p] for x in rounds) for p in PATHS}
    rows = [["generate (static prompt cache)", med["generate"], 1.0],
            ["lean decoder (harness.fast.decode)", med["lean"], med["lean"] / med["generate"]]]
    threads = torch.get_num_threads()
    notes = [f"{len(conversations)} held-out prompts ({splits.heldout_source}), batches of {args.batch_size}, "
             f"at most {args.max_new_tokens} new tokens; {rounds[0]['tokens']} response tokens a round",
             f"same responses: {sum(x['same'] for x in rounds)} of {sum(x['responses'] for x in rounds)} over "
             f"{args.repeats} rounds",
             f"{threads} thread{'' if threads == 1 else 's'} of {cpu_name()}, 1-minute load average at the start "
             f"{load:.1f}; medians of {args.repeats} alternated rounds after a warm-up round"]
    title = (f"greedy held-out decoding of {args.task} ({len(conversations)} prompts, {args.max_new_tokens} new "
             f"tokens at most): the lean decoder against generate, {threads} thread{'' if threads == 1 else 's'}")
    doc = {"section": "speed-step", "title": title, "model": builtin_name(args.model) or args.model,
           "columns": ["decoding", "seconds", "ratio to generate"], "rows": rows, "notes": notes,
           "settings": {"task_args": task_args, "eval_data": args.eval_data, "examples": len(conversations),
                        "max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size},
           "rounds": rounds,
           "command": command("benchmarks.speed.eval_decode", sys.argv[1:] if argv is None else argv)}
    print_table(doc)
    return write_result(args.json, "table", doc)


if __name__ == "__main__":
    main()
