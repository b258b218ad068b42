"""A ceiling for MRTPO's placement: each reward's credit on the tokens that reward is about.

MRTPO places reward k's credit on a response's tokens in proportion to a distance the policy
computes (removing block k). Whether that helps learning depends on two things: whether the
distance lands where reward k is decided (`mrtpo probe` measures that), and whether credit
that lands there helps at all in this setting. This benchmark answers the second question on
toolcall, without the policy: it replaces the replay's distances by indicators of the
response's own structure, read off the text,

- `format`: everything outside the function names, argument names and argument values (the
  tags, the JSON punctuation and keys, any text around the call);
- `schema`: each call's function name and its argument names;
- `correct`: the argument values,

and trains with them exactly as `mrtpo train` trains MRTPO (on GDPO, same settings and seeds
as `benchmarks/learning/learning.py`), so its curves sit beside the stored GRPO / GDPO / MRTPO runs of
that script's output directory. A response with nothing in a reward's spans (no call could be
found) gets that reward's credit uniformly, as MRTPO does for an all-zero distance.

This is a diagnostic, not a method: the spans are hand-written for toolcall's JSON calls
(`ToolCallTask.reward_spans`). The span runs are `mrtpo train --mrtpo-weights spans`: the
setting travels in the run's config into the process that trains, and everything else is
`mrtpo train` unchanged.

    python -m benchmarks.experiments.span_placement [--seeds 0,1,2] [--lambdas 1] [--threads 1]
        [--out benchmarks/out/learning] [--compare gdpo,mrtpo] [--steps N] [--json PATH]

Runs go to <out>/runs/toolcall/mrtpo-spans[-lambda<L>]/seed<k>/ (resumable, locked, as in
learning.py); the summary compares them with the `--compare` methods' runs found there (or
trains those too when they are missing).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from benchmarks.learning import learning  # the learning curves' summary
from benchmarks.lib.runs import ALL_METHODS, run_one
from benchmarks.lib.results import command, write_result


def paired_changes(curves: dict, base: str, steps: int) -> dict[str, dict[str, list[float]]]:
    """method -> reward -> per seed, (last tenth - first tenth) minus the same of `base` on
    that seed (a seed's first batch is the same for every method, so pairs share a start)."""
    tenth = max(1, steps // 10)

    def change(s: list[float]) -> float:
        v = learning.present(s)
        return learning.nanmean(v[-tenth:]) - learning.nanmean(v[:tenth])

    out: dict[str, dict[str, list[float]]] = {}
    for method, by_key in curves.items():
        if method == base:
            continue
        out[method] = {}
        for key, runs in by_key.items():
            if key == "reward":
                continue
            label = "mean over rewards" if key == "rewards/mean" else key.removeprefix("rewards/").removesuffix("/mean")
            out[method][label] = [change(a) - change(b) for a, b in zip(runs, curves[base][key])]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--lambdas", default="1", help="MRTPO's lambda for the span runs, comma-separated")
    ap.add_argument("--compare", default="gdpo,mrtpo",
                    help="methods of learning.py shown beside; the first is the baseline of the paired differences")
    ap.add_argument("--model", default=None, help="policy (default: the default built-in policy); a built-in brings its train settings")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--log-completions-every", type=int, default=0,
                    help="log each Nth step's completions with their token weights (0: none)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default="benchmarks/out/learning")
    ap.add_argument("--json", default=None, help="also write the summary rows here")
    args = ap.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from mrtpo.models.builtin import DEFAULT_MODEL, EXPERIMENT_DEFAULTS, builtin_name
    from mrtpo.models.builds import resolve_model

    model = args.model or DEFAULT_MODEL  # its recorded results ran on mrtpo-tiny, since retired
    settings = dict(EXPERIMENT_DEFAULTS.get(builtin_name(model) or DEFAULT_MODEL, {}))
    settings.pop("task", None)
    if args.steps:
        settings["steps"] = args.steps
    if args.max_new_tokens:
        settings["max_new_tokens"] = args.max_new_tokens
    settings.setdefault("steps", 40)
    settings.update(model=resolve_model(model), lora=True, save_every=0,
                    log_completions_every=args.log_completions_every, eval_every=0,
                    heldout=0)  # every run trains on the whole sample, as the recorded results did
    seeds = [int(s) for s in args.seeds.split(",")]
    span_methods = []
    for lam in [float(x) for x in args.lambdas.split(",")]:
        name = "mrtpo-spans" if lam == 1 else f"mrtpo-spans-lambda{lam:g}"
        # the runs read their fields from this table (benchmarks/lib/runs.py)
        ALL_METHODS[name] = {"advantage": "gdpo", "saw": "off", "mrtpo": True, "mrtpo_lambda": lam,
                             "mrtpo_weights": "spans"}
        span_methods.append(name)
    out = Path(args.out)
    print(f"settings {settings}; seeds {seeds}; load average {os.getloadavg()[0]:.1f}", flush=True)
    t0 = time.perf_counter()
    histories = {m: [run_one(out, "toolcall", m, s, settings) for s in seeds]
                 for m in args.compare.split(",") if m}
    histories.update({m: [run_one(out, "toolcall", m, s, settings) for s in seeds]
                      for m in span_methods})
    keys = learning.reward_keys([h for hs in histories.values() for h in hs])
    curves = {m: {k: [learning.series(h, k) for h in hs] for k in keys} for m, hs in histories.items()}
    rows = learning.summarise("toolcall", curves, settings["steps"], 0.5)
    base = args.compare.split(",")[0]
    paired = paired_changes(curves, base, settings["steps"]) if base in curves else {}
    for method, by_key in paired.items():
        print(f"\nchange minus {base}'s, per seed ({method}):")
        for key, diffs in by_key.items():
            mean = sum(diffs) / len(diffs)
            print(f"  {key:<18} mean {mean:+.3f}; seeds " + " ".join(f"{d:+.3f}" for d in diffs))
    write_result(args.json, "span-placement", {"settings": settings, "seeds": seeds, "rows": rows,
                                               "paired_change_minus_" + base: paired,
                                               "command": command("benchmarks.experiments.span_placement",
                                                                  sys.argv[1:])})
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
