"""Learning curves: GRPO, GDPO, GDPO+SAW and MRTPO (on GDPO) on the bundled tasks.

Every method trains the same policy (default: the default built-in policy, built on first use)
with LoRA for the same steps and batch, for several seeds, through the project's trainer
(`mrtpo.harness.train`). It prints, per task, method and reward, the mean over seeds of the
reward over the first and the last tenth of the steps, and the first step at which the
seed-mean curve (smoothed over a tenth of the steps) reaches a threshold, set per reward
halfway from the common start (all methods' first tenth) to the maximum 1. It saves a PNG of
the curves with seed bands (min..max over seeds) when matplotlib is installed (the `plot`
extra). Nothing is asserted: these are measured figures.

    python -m benchmarks.learning.learning [--tasks toolcall,text2sql,instruct] [--seeds 0,1,2]
        [--steps N] [--out benchmarks/out/learning] [--threads N] [--quick]

Runs go to <out>/runs/<task>/<method>/seed<k>/, each trained in a fresh process; a finished run
is read back instead of run again and an interrupted one resumes, so the script can be
stopped and restarted (a run directory that holds a run with other settings is refused, not
mixed in). Settings
other than the task, method and seed are the built-in policy's as the recorded experiments had
them (`mrtpo.models.builtin.EXPERIMENT_DEFAULTS`), overridable with the flags below; the model
is the default built-in policy unless --model names another (the first recorded results ran on
`mrtpo-tiny`, a toy policy since retired; their tables stay on the results page).

heldout.py (beside this script) draws held-out learning curves with the same runs
(benchmarks/lib/runs.py: the methods, the settings, `run_one`): its runs also measure held-out
examples (`--heldout`, `--heldout-every`).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

from benchmarks.lib.results import command, write_result
from benchmarks.lib.runs import ALL_METHODS, EXTRA_METHODS, METHODS, add_train_flags, model_settings, named, run_one


def reward_keys(histories: list[list[dict]]) -> list[str]:
    """`reward`, the mean of the per-reward means, and each reward present in most steps."""
    counts: dict[str, int] = {}
    total = 0
    for h in histories:
        for rec in h:
            total += 1
            for k, v in rec.items():
                if k.startswith("rewards/") and k.endswith("/mean") and v is not None:
                    counts[k] = counts.get(k, 0) + 1
    common = [k for k, c in counts.items() if c >= 0.5 * total]
    return ["reward", "rewards/mean"] + sorted(common)


def series(history: list[dict], key: str) -> list[float]:
    """One value per step (NaN where absent); `rewards/mean` is the mean over the rewards
    present at that step (instruction following: the instruction-level accuracy)."""
    out = []
    for rec in history:
        if key == "rewards/mean":
            vals = [v for k, v in rec.items() if k.startswith("rewards/") and k.endswith("/mean")
                    and v is not None and not math.isnan(v)]
            out.append(sum(vals) / len(vals) if vals else math.nan)
        else:
            v = rec.get(key)
            out.append(math.nan if v is None else float(v))
    return out


def nanmean(xs) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return sum(xs) / len(xs) if xs else math.nan


def present(xs: list[float]) -> list[float]:
    """The values of the steps where the reward was scored (instruction following draws
    different constraints each step, so a constraint's reward is absent from many steps)."""
    return [x for x in xs if not math.isnan(x)]


def smooth(xs: list[float], w: int) -> list[float]:
    """Trailing mean over the last `w` steps (NaN-aware)."""
    return [nanmean(xs[max(0, i - w + 1): i + 1]) for i in range(len(xs))]


def summarise(task: str, curves: dict[str, dict[str, list[list[float]]]], steps: int, frac: float,
              window: int | None = None):
    """Print start / end means over seeds and steps-to-threshold per method and reward; start
    and end are the means over the first and the last `window` steps (default: a tenth)."""
    tenth = window or max(1, steps // 10)
    keys = list(next(iter(curves.values())))
    print(f"\n== {task}: mean over seeds; start = first {tenth} step(s), end = last {tenth} step(s) (of those "
          "where the reward was scored); "
          f"threshold = start + {frac:g} * (1 - start), start over all methods")
    print(f"{'reward':<42} {'method':<9} {'start':>6} {'end':>6} {'change':>7} {'steps to thr':>12}")
    rows = []
    for key in keys:
        if key == "reward":
            continue  # a sum over a varying number of rewards: shown in the plot only
        starts = {m: nanmean([nanmean(present(s)[:tenth]) for s in curves[m][key]]) for m in curves}
        common = nanmean(list(starts.values()))
        thr = common + frac * (1 - common)
        for m in curves:
            runs = curves[m][key]
            end = nanmean([nanmean(present(s)[-tenth:]) for s in runs])
            mean_curve = [nanmean([s[i] for s in runs]) for i in range(steps)]
            sm = smooth(mean_curve, tenth)
            hit = next((i + 1 for i, v in enumerate(sm) if not math.isnan(v) and v >= thr), None)
            label = key.removeprefix("rewards/").removesuffix("/mean")
            label = "mean over rewards" if key == "rewards/mean" else label
            print(f"{label:<42} {m:<9} {starts[m]:>6.3f} {end:>6.3f} {end - starts[m]:>+7.3f} "
                  f"{(str(hit) if hit else '-') + f' (>={thr:.2f})':>12}")
            rows.append({"task": task, "reward": label, "method": m, "start": starts[m], "end": end,
                         "threshold": thr, "steps_to_threshold": hit})
    return rows


def plot(all_curves: dict, steps: int, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[plot]'): no plot written")
        return False
    tasks = list(all_curves)
    ncols = max(len([k for k in next(iter(all_curves[t].values())) if k != "reward"]) for t in tasks)
    fig, axes = plt.subplots(len(tasks), ncols, figsize=(3.6 * ncols, 2.8 * len(tasks)), squeeze=False)
    w = max(1, steps // 10)
    for r, task in enumerate(tasks):
        curves = all_curves[task]
        keys = [k for k in next(iter(curves.values())) if k != "reward"]
        for c in range(ncols):
            ax = axes[r][c]
            if c >= len(keys):
                ax.axis("off")
                continue
            key = keys[c]
            for method, by_key in curves.items():
                runs = [smooth(s, w) for s in by_key[key]]
                x = list(range(1, steps + 1))
                mean = [nanmean([s[i] for s in runs]) for i in range(steps)]
                lo = [min((s[i] for s in runs if not math.isnan(s[i])), default=math.nan) for i in range(steps)]
                hi = [max((s[i] for s in runs if not math.isnan(s[i])), default=math.nan) for i in range(steps)]
                line, = ax.plot(x, mean, label=method, lw=1.4)
                ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15, lw=0)
            label = "mean over rewards" if key == "rewards/mean" else key.removeprefix("rewards/").removesuffix("/mean")
            ax.set_title(f"{task}: {label}", fontsize=9)
            ax.set_xlabel("step", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.set_ylim(-0.02, 1.02)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def parser() -> argparse.ArgumentParser:
    from mrtpo.models.builtin import DEFAULT_MODEL

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default="toolcall,text2sql,instruct")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help=f"comma-separated; also: {', '.join(EXTRA_METHODS)} (MRTPO blended half with uniform weights)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--steps", type=int, default=None)
    add_train_flags(ap)
    ap.add_argument("--threshold-frac", type=float, default=0.5)
    ap.add_argument("--window", type=int, default=None,
                    help="steps in the start and end means (default: a tenth of the steps; a short run "
                         "wants more, e.g. half of 16)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--out", default="benchmarks/out/learning")
    ap.add_argument("--quick", action="store_true", help="2 seeds, 2 methods, 6 steps: a smoke run")
    return ap


def main() -> None:
    args = parser().parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from mrtpo.models.builds import resolve_model

    settings = model_settings(args.model, args)
    methods = args.methods.split(",")
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown:
        parser().error(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(ALL_METHODS)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.quick:
        methods, seeds, settings["steps"] = methods[-2:], seeds[:2], 6
    settings.setdefault("steps", 40)
    settings.update(model=resolve_model(args.model), lora=True, save_every=args.save_every,
                    save_total_limit=1 if args.save_every else 0, log_completions_every=0, eval_every=0,
                    heldout=0)  # every run trains on the whole sample, as the recorded results did
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"model {args.model}; settings {settings}; methods {methods}; seeds {seeds}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    all_curves, rows, seconds = {}, [], {}
    t0 = time.perf_counter()
    for task in args.tasks.split(","):
        histories = {m: [run_one(out, task, m, s, settings, args.threads) for s in seeds] for m in methods}
        keys = reward_keys([h for hs in histories.values() for h in hs])
        curves = {m: {k: [series(h, k) for h in hs] for k in keys} for m, hs in histories.items()}
        all_curves[task] = curves
        rows += summarise(task, curves, settings["steps"], args.threshold_frac, args.window)
        secs = {m: nanmean([sum(r.get("time/step") or 0.0 for r in h) for h in hs]) for m, hs in histories.items()}
        print("seconds per run (mean over seeds): " + ", ".join(f"{m} {s:.0f}" for m, s in secs.items()))
        seconds[task] = secs
    # the per-step curves (one list per seed, NaN as null) travel with the summary, so that a
    # results file keeps what its table and plot were made from
    curves_out = {t: {m: {k: [[None if math.isnan(v) else v for v in s] for s in runs] for k, runs in by_key.items()}
                      for m, by_key in c.items()} for t, c in all_curves.items()}
    write_result(out / "summary.json", "learning", {
        "command": command("benchmarks.learning.learning", sys.argv[1:]),
        "settings": {**settings, "model": named(args.model, settings["model"]), "model_name": args.model},
        "seeds": seeds,
        "window": args.window or max(1, settings["steps"] // 10), "rows": rows,
        "seconds_per_run": next(iter(seconds.values())) if len(seconds) == 1 else seconds,
        "curves": curves_out})
    png = out / "learning.png"
    if plot(all_curves, settings["steps"], png):
        print(f"\nplot: {png}")
    print(f"summary: {out / 'summary.json'}; total {time.perf_counter() - t0:.0f} s; "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
