"""Would another weighting put each reward's credit on its own tokens? The probe's edits, one replay.

MRTPO's weights are `w_k(t) = q_k(t) / mean_t q_k(t)` (the paper's): each reward's distances
normalised on their own, so a reward whose distances are small everywhere (toolcall's
`schema` on an argument value: 0.07 against `correct`'s 0.45) still puts a full response's
worth of weight wherever its distance is largest, even where another reward's is far larger.
This script replays the probe's edits once (`mrtpo.credit.probe.replay_edits`, the same
edits, scoring and contexts as `mrtpo probe`) and takes the probe's figures (lift of the
weight's mass on the edited span, and on its first token; specificity = own lift / the best
other reward's) of three weightings of the same distances:

- `paper`: `q_k / mean_t q_k` (a reward's share of its own mass, as `mrtpo probe` reports);
- `share`: each token's distance split among the rewards, `q_k(t) / sum_j q_j(t)`, then
  normalised to mean 1 per reward: where another reward's distance dominates a token, this
  reward's weight there is small;
- `contrast`: `max(q_k(t) - max_{j != k} q_j(t), 0)`, then mean 1: a reward weighs only the
  tokens where its distance is the largest (one whose distance is never the largest falls
  back to weight 1 everywhere, as an empty block does; counted as `flat`).

With `--control`, the same figures on a random-init model of the same shape (lifts about 1
say the weighting itself invents no specificity). Nothing here changes training.

    python -m benchmarks.experiments.weight_specificity --model smollm2-135m \
        [--tasks toolcall,text2sql,instruct] [--limit 10] [--control] [--json OUT]

The toolcall and text2sql tasks get `demo=true` on SmolLM2 (its train defaults), as the probe
figures on the results page were measured without it: `--no-demo` drops it.
"""
from __future__ import annotations

import argparse
import math
import time

import torch

from benchmarks.lib.results import command, write_result


def paper(q: torch.Tensor) -> torch.Tensor:
    """[K, T] -> [K, T]: the distances themselves (their shares are the mean-1 weights')."""
    return q


def share(q: torch.Tensor) -> torch.Tensor:
    """[K, T] -> [K, T]: each token's distance split among the rewards."""
    total = q.sum(0, keepdim=True)  # [1, T]
    return torch.where(total > 0, q / total.clamp(min=1e-30), torch.zeros_like(q))


def contrast(q: torch.Tensor) -> torch.Tensor:
    """[K, T] -> [K, T]: a reward's distance above the largest other reward's, else 0."""
    if q.shape[0] < 2:
        return q
    top2 = q.topk(2, dim=0).values  # [2, T]
    other = torch.where(q >= top2[0:1], top2[1:2], top2[0:1])  # [K, T] the largest other reward's
    return (q - other).clamp(min=0)


WEIGHTINGS = {"paper": paper, "share": share, "contrast": contrast}


def specificity(lift: dict[str, float], reward: str) -> float:
    """Own lift over the best other reward's; inf where every other reward's is 0 and the own
    is not (`contrast` often leaves the others nothing on a span), NaN where undefined."""
    own = lift.get(reward, math.nan)
    others = [v for r, v in lift.items() if r != reward and not math.isnan(v)]
    if math.isnan(own) or not others:
        return math.nan
    best = max(others)
    if best <= 0:
        return math.inf if own > 0 else math.nan
    return own / best


def figures(kinds) -> dict:
    """Per edit kind: span and first-token specificity, and the lifts they come from."""
    return {k.kind: {"reward": k.reward, "edits": k.edits, "specificity": specificity(k.lift, k.reward),
                     "decision_specificity": specificity(k.decision_lift, k.reward),
                     "lift": k.lift, "decision_lift": k.decision_lift} for k in kinds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tasks", default="toolcall,text2sql,instruct")
    ap.add_argument("--limit", type=int, default=10, help="examples per task")
    ap.add_argument("--control", action="store_true", help="also on a random-init model of the same shape")
    ap.add_argument("--no-demo", action="store_true", help="toolcall and text2sql without the worked example")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="write the figures here (mrtpo.table/1)")
    args = ap.parse_args()

    from mrtpo.credit.probe import edit_results, random_control, replay_edits, summarize
    from mrtpo.harness.policy import load_policy
    from mrtpo.models.builds import resolve_model
    from mrtpo.tasks import get_task

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    policy = load_policy(resolve_model(args.model), lora=False)
    models = {"model": policy.model}
    if args.control:
        models["random-init control"] = random_control(policy.model)
    rows, flats, pairs, t0 = [], {w: 0 for w in WEIGHTINGS}, 0, time.perf_counter()
    for name in args.tasks.split(","):
        options = {"demo": True} if name in ("toolcall", "text2sql") and not args.no_demo else {}
        task = get_task(name, **options)
        examples = task.load()[: args.limit]
        for which, model in models.items():
            replayed = replay_edits(task, model, policy.tokenizer, examples)
            for n, row in enumerate(replayed.rows if which == "model" else []):
                k = replayed.items[n].num_rewards // 2  # (reward, response) pairs left no mass
                q = replayed.q[n, :k, : len(row[2])]
                pairs += int((q.sum(-1) > 0).sum())
                for w, fn in WEIGHTINGS.items():
                    flats[w] += int(((fn(q).sum(-1) <= 0) & (q.sum(-1) > 0)).sum())
            for w, fn in WEIGHTINGS.items():
                for kind, f in figures(summarize(edit_results(replayed, fn))).items():
                    rows.append({"task": name, "model": which, "weighting": w, "kind": kind, **f})
        print(f"{name}: {len(replayed.rows)} edits ({time.perf_counter() - t0:.0f} s)", flush=True)

    def fmt(x: float) -> str:
        return "-" if math.isnan(x) else "inf" if math.isinf(x) else f"{x:.2f}"

    columns = ["task", "edit (reward)", "model"] + [f"{w}: span / 1st token" for w in WEIGHTINGS]
    table = []
    for task, kind, which in dict.fromkeys((r["task"], r["kind"], r["model"]) for r in rows):
        cells = []
        for w in WEIGHTINGS:
            r = next(r for r in rows if (r["task"], r["kind"], r["model"], r["weighting"]) == (task, kind, which, w))
            cells.append(f"{fmt(r['specificity'])} / {fmt(r['decision_specificity'])}")
        reward = next(r["reward"] for r in rows if (r["task"], r["kind"]) == (task, kind))
        table.append([task, f"{kind} ({reward})", which, *cells])
    print("\n| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    for cells in table:
        print("| " + " | ".join(cells) + " |")
    note = ("(reward, response) pairs a weighting leaves no mass, so weight 1 everywhere: "
            + ", ".join(f"{w} {n}" for w, n in flats.items()) + f" (of {pairs} with a non-zero distance)")
    print(note)
    write_result(args.json, "table", {
        "section": "probe", "model": args.model,
        "title": f"specificity of three weightings of the same distances, {args.limit} examples per task",
        "command": command("benchmarks.experiments.weight_specificity",
                           ["--model", args.model, "--tasks", args.tasks, "--limit", str(args.limit)]
                           + (["--control"] if args.control else [])),
        "columns": columns, "rows": table, "notes": [note], "figures": rows}, strict=True)


if __name__ == "__main__":
    main()
