"""Where does a reward's distance concentrate, against a random-init model of the same shape?

`mrtpo credit TASK --model M` reports, per reward, the share of a response's tokens that
holds 80% of the reward's distance (the "top-80 share"; the paper: 13-15% for tool calling,
26-29% for text-to-SQL, an instruction's end phrase 40% of its distance on 4% of the
tokens). A low share alone does not say the policy read the block: a model that has learnt
nothing can concentrate its distances too (on a few tokens whose next-token distributions
happen to move most). This script computes the figure as `mrtpo credit` does
(`mrtpo.credit.records.compute` on each example's reference and a corrupted copy, one group
per example; `mrtpo.statistics.summarize`), for the policy and for a random-init model
of the same architecture and tokenizer (`mrtpo.credit.probe.random_control`, the probe's
control), and writes both side by side beside the paper's figures. Nothing is asserted.

    python -m benchmarks.experiments.credit_concentration --model smollm2-135m \
        [--tasks toolcall,text2sql,instruct] [--limit 10] [--json OUT] [--threads 1]

The toolcall and text2sql tasks get `demo=true` on SmolLM2 (its train defaults); `--no-demo`
drops it.
"""
from __future__ import annotations

import argparse
import sys
import time

from benchmarks.lib.results import command, declared, write_result

DEMO_TASKS = ("toolcall", "text2sql")


def measure(policy, control, task_name: str, limit: int, demo: bool) -> list[dict]:
    """Per reward of the task (then all rewards pooled): responses, and the mean (min-max)
    top-80 share for the policy (a loaded `Policy`) and for `control` (a model of its shape)."""
    from mrtpo.credit.records import compute, responses_for
    from mrtpo.statistics import summarize
    from mrtpo.tasks import get_task

    task = get_task(task_name, **({"demo": True} if demo and task_name in DEMO_TASKS else {}))
    examples = task.load()[:limit]
    responses = responses_for(task, examples, None)
    summaries = {}
    for label, model in (("model", policy.model), ("control", control)):
        records = compute(task, examples, responses, model, policy.tokenizer)
        summaries[label] = {r.name: r for r in summarize(records)}
    rows = []
    for name, r in summaries["model"].items():
        c = summaries["control"].get(name)
        rows.append({"task": task_name, "reward": name, "responses": r.responses,
                     "model": [r.share_mean, r.share_min, r.share_max],
                     "control": [c.share_mean, c.share_min, c.share_max] if c else [None] * 3})
    return rows


def _cell(share: list) -> str:
    mean, lo, hi = share
    return "-" if mean is None else f"{100 * mean:.0f}% ({100 * lo:.0f}-{100 * hi:.0f}%)"


def table(rows: list[dict], model_name: str, command: str, limit: int) -> dict:
    """The rows as a `mrtpo.table/1` file for the results page."""
    from mrtpo.statistics import paper_figure

    return declared("table", {
        "section": "probe", "model": model_name,
        "title": ("credit concentration: the share of a response's tokens that holds 80% of a reward's distance "
                  f"(lower is more concentrated), first {limit} examples, the reference and a corrupted copy of "
                  "each, beside a random-init model of the same shape"),
        "command": command,
        "columns": ["task", "reward", "responses", "top-80 share: mean (min-max)", "random-init control",
                    "the paper"],
        "rows": [[r["task"], r["reward"], str(r["responses"]), _cell(r["model"]), _cell(r["control"]),
                  paper_figure(r["task"], r["reward"]) or ""] for r in rows],
        "notes": ["the paper's figures are for its own (larger) policies and data",
                  "the control's distances are those of a model that has learnt nothing: a share as low as "
                  "the control's says nothing about block reading"],
    })


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tasks", default="toolcall,text2sql,instruct")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--no-demo", action="store_true", help="leave the worked example out")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", help="write the mrtpo.table/1 file here")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from mrtpo.credit.probe import random_control
    from mrtpo.harness.run.trained import load_frozen_policy

    policy = load_frozen_policy(args.model)  # loaded once for every task, as is its control
    control = random_control(policy.model)
    rows = []
    for name in [t.strip() for t in args.tasks.split(",") if t.strip()]:
        t0 = time.perf_counter()
        part = measure(policy, control, name, args.limit, not args.no_demo)
        rows += part
        for r in part:
            print(f"{name:<9} {r['reward']:<34} {r['responses']:>3} responses  model {_cell(r['model']):<14} "
                  f"control {_cell(r['control'])}")
        print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
    if args.json:
        write_result(args.json, "table", table(rows, args.model, command("benchmarks.experiments.credit_concentration",
                                                                          sys.argv[1:]), args.limit), strict=True)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
