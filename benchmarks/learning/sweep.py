"""The first command's settings, chosen by a recorded sweep: learning rates x group shapes x seeds.

`mrtpo train --lora` with no `--model` is a newcomer's first run, and it must show learning
within its time budget: the held-out metric rises, and the training reward over the last fifth
of the steps is above the first fifth, in every seed. This script trains one method (default
MRTPO on GDPO) on one task for every learning rate (--lrs) and group shape (--shapes,
PROMPTSxCOMPLETIONS) with each seed, each run in a fresh process through the real entry point
(benchmarks/lib/runs.py's `run_or_read` and `run_one`, `mrtpo.harness.train`), measuring the
task's official metric greedily on --heldout held-out examples before step 1 and after the last
(`mrtpo train --heldout N`). Nothing is asserted: the figures are measured, and reported
whichever way they come out.

For each setting it prints and writes, per seed and as the mean over seeds:
- the held-out headline metric (--metric, default the task's official one) before and after,
  and its change with a 95% paired bootstrap
  interval over seeds and held-out examples (benchmarks/lib/stats.py's `paired_bootstrap` of each example's
  after - before, same seed);
- the training reward's mean over the first and the last fifth of the steps;
- whether both rose in every seed (`rises_every_seed`), and the seconds a run's steps took;
- every held-out metric's mean before and after (`metrics`: for text2sql, executes and format
  beside execution accuracy).

The setting chosen (`chosen`) is, among those measured with 3 seeds whose headline metric and
training reward rise in every seed, the one with the highest mean held-out official metric after
training (then the largest headline change); none when no setting rises in every seed (then say
so, and do not make it the default). The headline gates and the official metric ranks because a
rise can be gamed: on text2sql a policy that writes one query that runs for every question
raises `executes` to 1 and execution accuracy not at all. The results file (--json, else
<out>/summary.json), schema mrtpo.sweep/1:

    {"schema", "command", "settings": {what every run shares, "seeds", "lrs", "shapes"},
     "metric": the headline metric, "official_metric": the task's official metric,
     "interval": how the intervals were made,
     "rows": [{"lr", "shape", "batch_prompts", "num_generations", "heldout_before",
               "heldout_after", "change", "low", "high", "train_first", "train_last",
               "rises_every_seed", "seconds_per_run", "metrics": {metric: {"before", "after"}},
               "per_seed": [{"seed", "before", "after", "train_first", "train_last"}, ...]}, ...],
     "chosen": {"lr", "shape"} or null, "rule": how it was chosen}

The sweep that chose SmolLM2's first-command default (text2sql with the worked example, on the
bundled single-table questions):

    python -m benchmarks.learning.sweep --model smollm2-135m --task text2sql -o demo=true \\
        -o questions=single-table --lrs 5e-5,2e-4,3e-4,5e-4,1e-3 --shapes 2x4 --seeds 0,1,2 \\
        --steps 20 --heldout 32 --metric executes --threads 1 --json benchmarks/results/sweep-first-command-text2sql-smollm2-135m.json

That sweep ran with LoRA dropout 0.05, the experiments' pinned value; `mrtpo train` has trained
with 0 since 2026-12-06, so a sweep that stands for today's first command passes --lora-dropout 0.

Resuming works as in heldout.py: runs train in <out>/<lr>-<shape>/runs/<task>/<method>/seed<k>/,
and with --json each finished run is kept in <json without .json>/<lr>-<shape>/<method>/seed<k>/
(commit it): rerunning the command reads finished runs back and trains only what is missing,
and `--kept-only` writes the summary of what has finished so far without training anything.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from benchmarks.learning import heldout  # beside this script: its flags, settings and held-out split
from benchmarks.lib.results import command, write_result
from benchmarks.lib.runs import ALL_METHODS, Run, add_dropout_flag, finished, named, run_or_read
from benchmarks.lib.stats import LEVEL, RESAMPLES, paired_bootstrap

#: the seeds a setting needs before it can be chosen (fewer: it has not finished its seeds)
MIN_SEEDS = 3
RULE = (f"among the settings measured with at least {MIN_SEEDS} seeds whose held-out headline metric rose and "
        "whose training reward over the last fifth of the steps was above the first fifth in every seed, the "
        "highest mean held-out official metric after training, then the largest mean headline change")


def shapes_of(text: str) -> list[tuple[int, int]]:
    """'2x4,4x4' -> [(2, 4), (4, 4)]: prompts per step x completions per prompt."""
    shapes = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        try:
            prompts, completions = (int(x) for x in part.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--shapes: {part!r} is not PROMPTSxCOMPLETIONS (e.g. 2x4)") from None
        if prompts < 1 or completions < 2:
            raise SystemExit(f"--shapes: {part!r} needs >= 1 prompt and >= 2 completions (a group)")
        shapes.append((prompts, completions))
    return shapes


def setting_name(lr: float, shape: tuple[int, int]) -> str:
    """The directory of one setting's runs: 'lr0.0001-2x4'."""
    return f"lr{lr:g}-{shape[0]}x{shape[1]}"


def fifths(history: list[dict], key: str = "reward") -> tuple[float | None, float | None]:
    """(mean of `key` over the first fifth of the steps, over the last fifth), as `mrtpo train`'s
    summary prints them."""
    from mrtpo.commands.train import fifth_means

    return fifth_means([r[key] if isinstance(r.get(key), (int, float)) else None for r in history])


def summarise(runs: list[Run], metric: str, steps: int) -> dict:
    """One setting's row (without its name): held-out before/after with the paired interval of the
    change, the training reward's first and last fifth, per seed and as means over seeds."""
    per_seed, diffs = [], []
    for run in runs:
        before, after = run.point(0) or {}, run.point(steps) or {}
        first, last = fifths(run.history)
        per_seed.append({"seed": run.seed, "before": before.get(metric), "after": after.get(metric),
                         "train_first": first, "train_last": last})
        xb = (before.get("_per_example") or {}).get(metric)
        xa = (after.get("_per_example") or {}).get(metric)
        if xb is not None and xa is not None:
            diffs.append([float("nan") if b is None or a is None else a - b for a, b in zip(xa, xb)])
    change, low, high = paired_bootstrap(diffs) if len(diffs) == len(runs) and diffs else (None,) * 3
    rises = all(s["before"] is not None and s["after"] is not None and s["after"] > s["before"]
                and s["train_first"] is not None and s["train_last"] is not None
                and s["train_last"] > s["train_first"] for s in per_seed)
    mean = heldout._mean
    names = heldout.metrics_of(runs)
    metrics = {m: {"before": mean([(run.point(0) or {}).get(m) for run in runs]),
                   "after": mean([(run.point(steps) or {}).get(m) for run in runs])} for m in names}
    return {"heldout_before": mean([s["before"] for s in per_seed]),
            "heldout_after": mean([s["after"] for s in per_seed]),
            "change": change, "low": low, "high": high,
            "train_first": mean([s["train_first"] for s in per_seed]),
            "train_last": mean([s["train_last"] for s in per_seed]),
            "rises_every_seed": bool(per_seed) and rises,
            "seconds_per_run": mean([sum(r.get("time/step") or 0.0 for r in run.history) for run in runs]),
            "metrics": metrics, "per_seed": per_seed}


def choose(rows: list[dict], official: str | None = None) -> dict | None:
    """The setting RULE picks, as {"lr", "shape"}, or None. `official` names the task's official
    metric in each row's `metrics` (the headline when None or absent): the headline must rise,
    the official metric decides among the settings where it does. A rise can be gamed (a policy
    that writes one query that runs for every question raises `executes` to 1), so the headline
    gates and the task's own measure of correctness ranks."""
    ok = [r for r in rows if r["rises_every_seed"] and r["change"] is not None
          and len(r.get("per_seed") or []) >= MIN_SEEDS]
    if not ok:
        return None

    def after(r: dict) -> float:
        value = ((r.get("metrics") or {}).get(official) or {}).get("after") if official else None
        value = value if value is not None else r.get("heldout_after")
        return float("-inf") if value is None else value

    # means of per-seed rates that are equal in exact arithmetic can differ in the last bit
    # ((0 + 0.01 + 0.06) / 3 against (0 + 0 + 0.07) / 3), so compare them rounded
    best = max(ok, key=lambda r: (round(after(r), 9), r["change"]))
    return {"lr": best["lr"], "shape": best["shape"]}


def table(summary: dict) -> None:
    s = summary["settings"]
    print(f"\n== {s['task']} on {s['model_name']}: {summary['metric']} on {s['heldout_examples']} held-out examples "
          f"(greedy), {s['steps']} steps, seeds {', '.join(map(str, s['seeds']))}")
    print(f"{'lr':>8} {'shape':>6} {'before':>7} {'after':>7} {'change':>7} {'95% interval':>17} "
          f"{'train 1st/5':>11} {'last/5':>7} {'rises':>6} {'s/run':>6}")
    fmt = lambda v, f="{:.3f}": "-" if v is None else f.format(v)  # noqa: E731
    for r in summary["rows"]:
        interval = "-" if r["low"] is None else f"[{r['low']:+.3f}, {r['high']:+.3f}]"
        print(f"{r['lr']:>8g} {r['shape']:>6} {fmt(r['heldout_before']):>7} {fmt(r['heldout_after']):>7} "
              f"{fmt(r['change'], '{:+.3f}'):>7} {interval:>17} {fmt(r['train_first']):>11} "
              f"{fmt(r['train_last']):>7} {'yes' if r['rises_every_seed'] else 'no':>6} "
              f"{fmt(r['seconds_per_run'], '{:.0f}'):>6}")
    chosen = summary["chosen"]
    print(f"\nchosen: {'none: no setting measured with enough seeds rose in every seed' if chosen is None else chosen} ({summary['rule']})")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    heldout.add_task_flags(ap)
    ap.add_argument("--method", default="mrtpo", help=f"one of {', '.join(ALL_METHODS)}")
    ap.add_argument("--metric", default=None,
                    help="the held-out headline metric that must rise in every seed (default: the task's official "
                         "metric); the official metric still ranks the settings where it rises")
    ap.add_argument("--lrs", default="5e-5,1e-4,2e-4,5e-4", help="comma-separated learning rates")
    ap.add_argument("--shapes", default="2x4", help="comma-separated PROMPTSxCOMPLETIONS per step")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--heldout", type=int, default=32, help="held-out examples every run is measured on")
    ap.add_argument("--max-new-tokens", type=int, default=None)
    add_dropout_flag(ap)
    ap.add_argument("--save-every", type=int, default=5,
                    help="checkpoint every N steps, so an interrupted run resumes there (0: at the end only)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--kept-only", action="store_true",
                    help="train nothing: summarise the runs kept beside --json so far (a row per setting with any)")
    ap.add_argument("--out", default="benchmarks/out/sweep", help="where the runs train")
    ap.add_argument("--json", default=None,
                    help="the results file (e.g. benchmarks/results/sweep-first-command-TASK-MODEL.json); finished "
                         "runs are kept beside it, in the directory of its name (default: <out>/summary.json)")
    return ap


def main(argv: list[str] | None = None, measure=None) -> dict:
    """Train (or read back) every run of the grid, then print and write the summary, which it
    returns. `measure` is the held-out metric handed to the spawned trainers (default: the
    official one, mrtpo.evaluation.heldout.measure)."""
    args = parser().parse_args(argv)
    if args.method not in ALL_METHODS:
        parser().error(f"unknown method {args.method}; known: {', '.join(ALL_METHODS)}")
    try:
        lrs = [float(x) for x in args.lrs.split(",") if x.strip()]
    except ValueError:
        parser().error(f"--lrs: {args.lrs!r} is not a comma-separated list of numbers")
    if not lrs or any(not 0 < lr < 1 for lr in lrs):
        parser().error("--lrs: give learning rates between 0 and 1")
    shapes = shapes_of(args.shapes)
    seeds = [int(s) for s in args.seeds.split(",") if s]
    if args.heldout < 1 or args.steps < 1 or not seeds:
        parser().error("--heldout and --steps must be >= 1, and --seeds name at least one seed")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from mrtpo.evaluation.heldout import measure as official_measure
    from mrtpo.models.builds import resolve_model

    model_path = resolve_model(args.model)
    base = argparse.Namespace(**vars(args), lr=None, batch_prompts=None, num_generations=None,
                              heldout_every=0)
    common = heldout.run_settings(base, model_path)
    n_held, source = heldout.heldout_split(args.task, common)
    out = Path(args.out)
    results = Path(args.json) if args.json else out / "summary.json"
    kept_root = results.with_suffix("") if args.json else None
    print(f"model {args.model}; task {args.task}; method {args.method}; lrs {lrs}; shapes {args.shapes}; "
          f"seeds {seeds}; held out: {source}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
          flush=True)
    t0, rows, metric, official = time.perf_counter(), [], args.metric, None
    for shape in shapes:
        for lr in lrs:
            name = setting_name(lr, shape)
            settings = {**common, "lr": lr, "batch_prompts": shape[0], "num_generations": shape[1]}
            kept = kept_root / name if kept_root else None
            if args.kept_only:  # a summary of what finished so far, training nothing
                seeds_here = [s for s in seeds if kept is not None and
                              finished(kept / args.method / f"seed{s}", args.steps, measured=True) is not None]
                if not seeds_here:
                    continue
            else:
                seeds_here = seeds
            runs = [run_or_read(out / name, kept, args.task, args.method, s, settings, args.threads,
                                        measure or official_measure) for s in seeds_here]
            official = official or (heldout.metrics_of(runs) or [None])[0]
            metric = args.metric or official
            if heldout.metrics_of(runs) and metric not in heldout.metrics_of(runs):
                parser().error(f"--metric {metric}: the task measures {', '.join(heldout.metrics_of(runs))}")
            rows.append({"lr": lr, "shape": f"{shape[0]}x{shape[1]}", "batch_prompts": shape[0],
                         "num_generations": shape[1], **summarise(runs, metric, args.steps)})
            print(f"  {name}: {args.method} x {len(seeds_here)} seeds done ({time.perf_counter() - t0:.0f} s)", flush=True)
    shared = {k: v for k, v in common.items() if k not in ("lr", "batch_prompts", "num_generations")}
    summary = {
        "command": command("benchmarks.learning.sweep", sys.argv[1:] if argv is None else argv, quoted=True),
        "settings": {**shared, "model": named(args.model, model_path), "model_name": args.model,
                     "task": args.task, "method": args.method, "seeds": seeds, "lrs": lrs,
                     "shapes": [f"{p}x{c}" for p, c in shapes], "heldout_examples": n_held, "heldout_source": source},
        "metric": metric,
        "official_metric": official,
        "interval": (f"{LEVEL:.0%} paired bootstrap of each held-out example's after - before over seeds "
                     f"and examples ({RESAMPLES} resamples, percentile interval)"),
        "rows": rows,
        "chosen": choose(rows, official),
        "rule": RULE,
    }
    table(summary)
    summary = write_result(results, "sweep", summary, strict=True)
    print(f"results: {results}; total {time.perf_counter() - t0:.0f} s")
    return summary


if __name__ == "__main__":
    main()
