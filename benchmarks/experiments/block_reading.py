"""Does the policy read the reference block, or recall the answer from P0?

For each bundled example of a task with a reference block (a block whose text is the reference
answer itself: toolcall's `correct`, text2sql's `result`), one wrong answer is drawn from the
benchmarks' error makers (`benchmarks/lib/wrong_answers.py`'s `candidate_errors`): one in the strict
format that gets that reward wrong (another argument value, a changed literal, ...). At the
first token where it differs from the reference, with the common prefix fed, the script reads
the policy's probability of the wrong answer's token and of the reference's token under

- P0 (no blocks);
- P_all (the reference in its block);
- P_all with the wrong answer in the block instead (a counterfactual reference).

A model that reads the block puts most of its mass on the reference's token under P_all and
moves it to the wrong answer's token under the counterfactual; a model that recalls the answer
from P0 gives the three contexts about the same figures. The last line is the "copy gain":
p(wrong token | counterfactual) - p(wrong token | P_all), 0 for a model that ignores the block,
near 1 for one that copies it. Nothing is asserted; `--json PATH` writes the figures.

    python -m benchmarks.experiments.block_reading [--tasks toolcall,text2sql] [--model smollm2-135m]
        [--json PATH] [--threads N] [--seed 0]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys

from benchmarks.lib.results import command, write_result

CONTEXTS = ("P0", "P_all", "counterfactual")


def measure(model_name: str, task_name: str, seed: int = 0) -> dict:
    import torch

    from mrtpo.contexts import block_texts, context_messages, render_ids
    from mrtpo.credit.records import response_ids
    from mrtpo.harness.policy import load_policy
    from mrtpo.models.builds import resolve_model
    from mrtpo.tasks import get_task

    from benchmarks.lib.wrong_answers import argument_values, candidate_errors

    task = get_task(task_name)
    path = resolve_model(model_name)
    policy = load_policy(path, lora=False)
    tok, model = policy.tokenizer, policy.model.eval()
    examples = task.load(None)
    references = [task.reference(ex) for ex in examples]
    values = argument_values(task.format, [r for r in references if r is not None])
    rng = random.Random(seed)
    rows = []
    for ex, ref in zip(examples, references):
        if ref is None:
            continue
        rewards = task.rewards(ex)
        ref_verdicts = task.score(ex, ref)
        blocks = block_texts(task, ex, ref_verdicts)
        ks = [k for k, b in enumerate(blocks) if b.strip() == ref.strip()]
        if not ks:
            continue
        k = ks[0]
        wrong = None
        for _, text in candidate_errors(task.format, ref, rng, 30, values):
            if task.format.parse(text).strict and task.score(ex, text)[k].score < ref_verdicts[k].score:
                wrong = text
                break
        if wrong is None:
            continue
        rid, wid = response_ids(tok, ref), response_ids(tok, wrong)
        at = next((i for i, (a, b) in enumerate(zip(rid, wid)) if a != b), None)
        if at is None:
            continue
        changed = list(blocks)
        changed[k] = wrong
        contexts = {"P0": task.messages(ex), "P_all": context_messages(task, ex, blocks)[0],
                    "counterfactual": context_messages(task, ex, changed)[0]}
        row = {"example": ex.id, "reward": rewards[k].name, "wrong_answer": wrong, "token": at}
        for name, msgs in contexts.items():
            ids = render_ids(tok, msgs) + wid[:at]
            with torch.no_grad():
                p = model(input_ids=torch.tensor([ids])).logits[0, -1].float().softmax(-1)  # [V]
            row[name] = {"wrong": float(p[wid[at]]), "reference": float(p[rid[at]])}
        rows.append(row)
    if not rows:
        raise SystemExit(f"task {task_name!r}: no example has a reference block (a block whose text is the "
                         "reference answer) with a wrong answer to put in it; run it on toolcall or text2sql")
    summary = {name: {"wrong": statistics.mean(r[name]["wrong"] for r in rows),
                      "reference": statistics.mean(r[name]["reference"] for r in rows)} for name in CONTEXTS}
    gain = summary["counterfactual"]["wrong"] - summary["P_all"]["wrong"]
    shown = model_name if str(path) == model_name else f"{model_name} ({path})"
    return {"task": task_name, "model": shown, "examples": len(rows), "mean": summary, "copy_gain": gain,
            "rows": rows}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="toolcall,text2sql", help="comma-separated tasks")
    ap.add_argument("--model", default="smollm2-135m", help="policy (default: the default built-in one)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0, help="which wrong answers are drawn")
    return ap


def main() -> None:
    args = parser().parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    results = [measure(args.model, name.strip(), args.seed) for name in args.tasks.split(",") if name.strip()]
    for r in results:
        print(f"{r['task']}: model {r['model']}, {r['examples']} examples; mean probability at the first "
              "token where the wrong answer differs from the reference")
        print("| context | p(wrong answer's token) | p(reference's token) |")
        print("|---|---|---|")
        for name in CONTEXTS:
            print(f"| {name} | {r['mean'][name]['wrong']:.3f} | {r['mean'][name]['reference']:.3f} |")
        print(f"{r['task']}: copy gain {r['copy_gain']:+.3f} (0: the block is not read; near 1: it is copied)")
    write_result(args.json, "block-reading",
                 {"results": results, "command": command("benchmarks.experiments.block_reading", sys.argv[1:])})


if __name__ == "__main__":
    main()
