"""Held-out learning curves: does MRTPO learn more than GDPO on examples no run trains on?

MRTPO (on GDPO), GDPO, and a control, MRTPO with its token weights shuffled within each
response (`mrtpo-shuffled`, `mrtpo_weights: shuffled`: the weights' distribution without their
placement), train the same policy with the same settings for each seed, each run in a fresh
process through the real entry point (benchmarks/lib/runs.py's `run_one`,
`mrtpo.harness.train`). A seed fixes the LoRA's initialisation, the prompts of every step and
every completion's sampling seed, so the methods' runs of one seed are paired: they start alike
and differ in where the credit lands. Every run measures the task's official metric (`mrtpo eval`'s numbers: execution
accuracy for text2sql, AST accuracy for toolcall, IFEval's for instruct) greedily on the same
held-out examples, never trained on, before step 1, every --heldout-every steps and after the
last (`mrtpo train --heldout N --heldout-every K`: heldout.json's `_curve`, with each
example's value). Held-out figures, not training-reward means, are what it compares.

It prints, per metric and method, the held-out curve (the mean over seeds at each measured
step) and, per pair of methods (mrtpo - gdpo, mrtpo - mrtpo-shuffled, mrtpo-shuffled - gdpo),
the paired difference after the last step with a 95% interval and each seed's difference. The
interval is a paired bootstrap over seeds and held-out examples (benchmarks/lib/stats.py's
`paired_bootstrap`): each of 10,000 resamples draws the seeds with replacement and,
independently, the held-out examples with replacement (one draw shared by the seeds, which all
measure the same examples), and takes the mean of the per-example differences (a's value minus
b's, same seed, same example) over what it drew; the interval holds the central 95% of those
means (percentile method). With 3 seeds the seed draw is coarse, so each seed's difference is
reported beside it. It writes
(--json, else <out>/summary.json):

    {"schema": "mrtpo.learning-heldout/1" (its kind, for the results page), "command",
     "settings": {"model", "task", "task_args", "seeds": [0, 1, 2], "steps", "heldout",
                  "heldout_every", "heldout_examples", "heldout_source", "methods", ...},
     "metric": the headline metric, "interval": how the intervals were made,
     "curves": {method: {metric: {"steps": [0, 25, ...], "mean": [...], "per_seed": [[...], ...]}}},
     "paired": [{"a", "b", "reward": metric, "mean", "low", "high", "per_seed": [...], "step",
                 "seeds": how many, "seed_ids", "examples",
                 "better": per seed [examples a scored higher, b higher]}, ...],
     "seconds_per_run": {method: seconds (training steps only, mean over seeds)},
     "replay_share": {method: the replay's share of its training steps' seconds (`replay_share`)},
     "provenance": {method: {seed: {"commit", "cpu"} the kept run finished on, or null}}}

and a PNG of the held-out curves (mean over seeds, band min..max) beside it when matplotlib is
installed. For SmolLM2 on text2sql the held-out split must hold >= 100 examples, more than a
quarter of the bundled sample (39 rows, whose `result` SmolLM2 never gets), so the data is the
bundled single-table set (`-o questions=single-table`: 430 rows, the last 102 held out; SmolLM2
scores execution accuracy 0.04 on them before training) or Spider (data_cards/spider.md, with
--data and --eval-data: held out are the first --heldout rows of --eval-data):

    python -m benchmarks.learning.heldout --model smollm2-135m --task text2sql -o demo=true \\
        -o questions=single-table --steps 100 --heldout 100 --heldout-every 25 --threads 2 \\
        --json benchmarks/results/learning-heldout-text2sql-smollm2-135m.json

Resuming, within and across sessions: runs train one after another in
<out>/runs/<task>/<method>/seed<k>/ (checkpointed every --save-every steps); rerunning the same
command reads finished runs back and resumes an interrupted one from its last checkpoint (a
--out that holds runs with other settings is refused). With --json, each run that finishes is
also kept beside the results file, in <json without .json>/<method>/seed<k>/ (its config.yaml,
metrics.jsonl: the training curves, and heldout.json: the held-out curve with every example's
value; no checkpoints, about 0.1-0.3 MB a run). Commit that directory after each finished run
(`git add benchmarks/results/learning-heldout-text2sql-smollm2-135m/`): a later session, on
this machine or a fresh checkout, reads the kept runs back and trains only the missing ones
(an interrupted run whose <out> is gone starts again). Once every run has finished, commit the
results file and its PNG too.

While some runs are still going (another session, another machine), `--kept-only` writes the
part result from the kept runs alone and trains nothing: each pair of methods is compared on
the seeds both have finished, and each row says how many.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from benchmarks.lib.results import command, write_result
from benchmarks.lib.runs import (ALL_METHODS, Run, add_train_flags, model_settings, named, read_kept, read_provenance,
                                 run_or_read)
from benchmarks.lib.stats import LEVEL, RESAMPLES, paired_bootstrap

#: the kind its results file declares (benchmarks/results_page.py renders it by that)
KIND = "learning-heldout"
METHODS = ("gdpo", "mrtpo", "mrtpo-shuffled")
PAIRS = (("mrtpo", "gdpo"), ("mrtpo", "mrtpo-shuffled"), ("mrtpo-shuffled", "gdpo"),
         ("mrtpo", "mrtpo-single"), ("mrtpo-single", "gdpo"))  # a - b


# ------------------------------------------------------------------------------ pairs
def pairs_of(methods: Sequence[str]) -> list[tuple[str, str]]:
    """The (a, b) pairs compared as a - b: those of PAIRS whose methods ran, then every other
    pair of the methods (the later one minus the earlier one)."""
    out = [(a, b) for a, b in PAIRS if a in methods and b in methods]
    for i, b in enumerate(methods):
        for a in methods[i + 1:]:
            if (a, b) not in out and (b, a) not in out:
                out.append((a, b))
    return out


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return sum(xs) / len(xs) if xs else None


def replay_share(runs: list[Run]) -> float | None:
    """The replay's share of `runs`' training-step seconds (time/replay over time/step, each
    summed over the steps of every run), None without timings. Unlike seconds per run it is
    measured within each run, so it holds whatever else shared the cores; 1 / (1 - share) is
    about what MRTPO's step costs against GDPO's, whose step is the same but for the replay."""
    step = sum(r.get("time/step") or 0.0 for run in runs for r in run.history)
    replay = sum(r.get("time/replay") or 0.0 for run in runs for r in run.history)
    return replay / step if step > 0 else None


# ------------------------------------------------------------------------------ summary
def metrics_of(runs: list[Run]) -> list[str]:
    """The metrics measured, in the order the task's metric gives them (the headline first)."""
    names: dict[str, None] = {}
    for run in runs:
        for p in run.curve:
            names.update({k: None for k in p if k != "step" and not k.startswith("_")})
    return list(names)


def curves(runs: dict[str, list[Run]], metrics: list[str]) -> dict:
    """{method: {metric: {"steps", "mean" (over the seeds measured at that step), "per_seed",
    "seeds" (which, in per_seed's order)}}}."""
    steps = sorted({p["step"] for rs in runs.values() for r in rs for p in r.curve})
    out: dict = {}
    for method, rs in runs.items():
        out[method] = {}
        for metric in metrics:
            per_seed = [[(r.point(s) or {}).get(metric) for s in steps] for r in rs]  # [S][steps]
            out[method][metric] = {"steps": steps, "mean": [_mean(col) for col in zip(*per_seed)],
                                   "per_seed": per_seed, "seeds": [r.seed for r in rs]}
    return out


def paired(runs: dict[str, list[Run]], metrics: list[str], step: int) -> list[dict]:
    """Per metric with per-example values (the headline first) and pair of methods: the paired
    difference at `step` (the last), mean over the seeds both methods ran and the examples, its
    bootstrap interval and each seed's difference."""
    rows = []
    for metric in metrics:
        for a, b in pairs_of(list(runs)):
            of_b = {r.seed: r for r in runs[b]}
            both = [(ra, of_b[ra.seed]) for ra in runs[a] if ra.seed in of_b]
            diffs = [_differences(ra, rb, step, metric) for ra, rb in both]  # [S][E]
            if not diffs or any(d is None for d in diffs):
                continue  # a metric without per-example values (a mean over instructions, ...)
            mean, low, high = paired_bootstrap(diffs)
            rows.append({"a": a, "b": b, "reward": metric, "mean": mean, "low": low, "high": high,
                         "per_seed": [_mean(d) for d in diffs], "step": step, "seeds": len(diffs),
                         "seed_ids": [ra.seed for ra, _ in both], "examples": len(diffs[0]),
                         "better": better_counts(diffs)})
    return rows


def better_counts(diffs: Sequence[Sequence[float]]) -> list[list[int]]:
    """Per seed, [examples where a scored higher, examples where b did] from the paired
    differences `diffs[s][e]` (NaN skipped): the discordant pairs of a McNemar-style reading,
    which show whether a mean difference comes from many examples or a few."""
    return [[sum(1 for x in d if x > 0), sum(1 for x in d if x < 0)] for d in diffs]


def _differences(ra: Run, rb: Run, step: int, metric: str) -> list[float] | None:
    """a's value minus b's on each held-out example at `step` (one seed; NaN where the metric
    does not apply), or None when the metric has no per-example values."""
    if ra.seed != rb.seed or ra.example_ids != rb.example_ids:
        raise SystemExit(f"{ra.method} and {rb.method} (seed {ra.seed}, {rb.seed}) are not paired: they "
                         "measured other held-out examples or seeds")
    xa, xb = _per_example(ra, step, metric), _per_example(rb, step, metric)
    if xa is None or xb is None:
        return None
    return [math.nan if x is None or y is None else x - y for x, y in zip(xa, xb)]


def _per_example(run: Run, step: int, metric: str) -> list | None:
    point = run.point(step)
    if point is None:
        raise SystemExit(f"the {run.method} run of seed {run.seed} has no held-out measurement at step {step}")
    return (point.get("_per_example") or {}).get(metric)


def table(task: str, summary: dict) -> None:
    """Print the held-out curves (mean over seeds) and the paired differences."""
    settings = summary["settings"]
    print(f"\n== {task}: held-out ({settings['heldout_examples']} examples, greedy), mean over seeds "
          f"{', '.join(map(str, settings['seeds']))}")
    by_method = summary["curves"]
    steps = next(iter(next(iter(by_method.values())).values()))["steps"]
    print(f"{'metric':<26} {'method':<15} " + " ".join(f"{'step ' + str(s):>9}" for s in steps))
    for metric in summary["metrics"]:
        for method, c in by_method.items():
            cells = " ".join(f"{'-' if v is None else f'{v:.3f}':>9}" for v in c[metric]["mean"])
            print(f"{metric:<26} {method:<15} {cells}")
    part = {m: c[summary["metric"]].get("seeds") for m, c in by_method.items()}
    if any(have != settings["seeds"] for have in part.values()):  # --kept-only while some runs still go
        print("a part result; seeds per method: " + "; ".join(f"{m} {have}" for m, have in part.items()))
    print(f"\n== paired differences after step {settings['steps']} ({summary['interval']})")
    print(f"{'metric':<26} {'a - b':<28} {'mean':>7} {'low':>7} {'high':>7}   per seed   examples a > b / b > a")
    for r in summary["paired"]:
        seeds = " ".join("-" if d is None else f"{d:+.3f}" for d in r["per_seed"])
        better = " ".join(f"{x}/{y}" for x, y in r.get("better") or [])
        print(f"{r['reward']:<26} {r['a'] + ' - ' + r['b']:<28} {r['mean']:>+7.3f} {r['low']:>+7.3f} "
              f"{r['high']:>+7.3f}   {seeds}   {better}")


def plot(summary: dict, path: Path) -> bool:
    """The held-out curves, one panel per metric: mean over seeds, band min..max; a method
    with fewer seeds than the comparison's (a part result) names them in the legend."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[plot]'): no plot written")
        return False
    metrics = summary["metrics"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.8 * len(metrics), 3.0), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for method, c in summary["curves"].items():
            m = c[metric]
            x = [s for s, v in zip(m["steps"], m["mean"]) if v is not None]
            cols = [[v for v in col if v is not None] for col in zip(*m["per_seed"])]
            cols = [col for col in cols if col]
            seeds = m.get("seeds")
            label = method if seeds in (None, summary["settings"]["seeds"]) else f"{method} (seeds {seeds})"
            line, = ax.plot(x, [v for v in m["mean"] if v is not None], marker="o", ms=3, lw=1.4, label=label)
            ax.fill_between(x, [min(col) for col in cols], [max(col) for col in cols], color=line.get_color(),
                            alpha=0.15, lw=0)
        ax.set_title(f"{summary['settings']['task']}: held-out {metric}", fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


# ------------------------------------------------------------------------------ main
def add_task_flags(ap: argparse.ArgumentParser) -> None:
    """The policy, task, task options and data flags the held-out scripts share (this and sweep.py)."""
    ap.add_argument("--model", default="smollm2-135m", help="policy: a built-in name or a directory")
    ap.add_argument("--task", default="text2sql")
    ap.add_argument("-o", "--task-option", dest="options", action="append", default=[], metavar="KEY=VALUE",
                    help="task option, repeatable (e.g. -o demo=true)")
    ap.add_argument("--data", default=None, help="the task's training data (default: its bundled sample)")
    ap.add_argument("--eval-data", default=None,
                    help="held-out data: its first --heldout examples (default: the last of --data, held out)")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_task_flags(ap)
    ap.add_argument("--methods", default=",".join(METHODS),
                    help=f"comma-separated, of {', '.join(ALL_METHODS)}")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--heldout", type=int, default=100, help="held-out examples every run is measured on")
    ap.add_argument("--heldout-every", type=int, default=25, help="measure them every N steps (and at 0 and the end)")
    add_train_flags(ap, save_every=5)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--out", default="benchmarks/out/learning-heldout", help="where the runs train")
    ap.add_argument("--kept-only", action="store_true",
                    help="train nothing: summarise the runs kept beside --json (a part result while others run)")
    ap.add_argument("--json", default=None,
                    help="the results file (e.g. benchmarks/results/learning-heldout-TASK-MODEL.json); finished "
                         "runs are kept beside it, in the directory of its name (default: <out>/summary.json, "
                         "nothing kept)")
    return ap


def run_settings(args: argparse.Namespace, model_path: str) -> dict:
    """The settings every run trains with: the model's (runs.model_settings), the task
    options, the data, the held-out measurement, and a checkpoint every --save-every steps
    (the newest kept) so that an interrupted run resumes near where it stopped."""
    from mrtpo.tasks.options import read_options

    settings = model_settings(args.model, args, task=args.task)
    settings.update(model=model_path, steps=args.steps, lora=True,
                    task_args={**settings.get("task_args", {}), **read_options(args.options)},
                    data=args.data, eval_data=args.eval_data, heldout=args.heldout, heldout_every=args.heldout_every,
                    save_every=args.save_every, save_total_limit=1 if args.save_every else 0,
                    log_completions_every=0, eval_every=0)
    return settings


def heldout_split(task: str, settings: dict) -> tuple[int, str]:
    """(how many examples the runs hold out, where from), refusing fewer than asked for."""
    from mrtpo.harness.data import load_splits
    from mrtpo.tasks import get_task

    splits = load_splits(get_task(task, **settings["task_args"]), settings["data"], settings["eval_data"],
                         settings["heldout"])
    if len(splits.heldout) < settings["heldout"]:
        raise SystemExit(f"--heldout {settings['heldout']}: the data holds out only {len(splits.heldout)} examples "
                         f"({splits.heldout_source or 'none'}; without --eval-data at most a quarter of --data); "
                         "pass --eval-data FILE or a larger --data, or a smaller --heldout")
    return len(splits.heldout), splits.heldout_source


def main(argv: list[str] | None = None, measure=None) -> dict:
    """Train (or read back) every run, then print, write and plot the summary, which it returns.
    `measure` is the held-out metric, a module-level function the spawned trainers receive
    (default: the official one, mrtpo.evaluation.heldout.measure)."""
    args = parser().parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown:
        parser().error(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(ALL_METHODS)}")
    if args.heldout < 1 or args.steps < 1 or args.heldout_every < 0:
        parser().error("--heldout and --steps must be >= 1, --heldout-every >= 0")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from mrtpo.evaluation.heldout import measure as official
    from mrtpo.models.builds import resolve_model

    settings = run_settings(args, resolve_model(args.model))
    n_held, source = heldout_split(args.task, settings)
    out = Path(args.out)
    results = Path(args.json) if args.json else out / "summary.json"
    kept_root = results.with_suffix("") if args.json else None
    print(f"model {args.model}; task {args.task}; methods {methods}; seeds {seeds}; held out: {source}; "
          f"settings {settings}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    t0 = time.perf_counter()
    if args.kept_only:
        if kept_root is None:
            parser().error("--kept-only reads the runs kept beside --json: give --json")
        found = {m: [read_kept(kept_root, args.task, m, s, settings) for s in seeds] for m in methods}
        runs = {m: [r for r in rs if r is not None] for m, rs in found.items()}
        print("kept runs: " + "; ".join(f"{m} seeds {[r.seed for r in rs] or 'none'}" for m, rs in runs.items()))
        runs = {m: rs for m, rs in runs.items() if rs}
        if not runs:
            raise SystemExit(f"--kept-only: no finished run with these settings is kept in {kept_root}")
    else:
        runs = {m: [run_or_read(out, kept_root, args.task, m, s, settings, args.threads, measure or official)
                    for s in seeds] for m in methods}
    metrics = metrics_of([r for rs in runs.values() for r in rs])
    summary = {
        "command": command("benchmarks.learning.heldout", sys.argv[1:] if argv is None else argv, quoted=True),
        "settings": {**settings, "model": named(args.model, settings["model"]), "model_name": args.model,
                     "task": args.task, "seeds": seeds, "methods": methods, "heldout_examples": n_held,
                     "heldout_source": source},
        "metric": metrics[0] if metrics else None,
        "metrics": metrics,
        "interval": (f"{LEVEL:.0%} paired bootstrap over seeds and held-out examples (both drawn with "
                     f"replacement, {RESAMPLES} resamples, percentile interval)"),
        "curves": curves(runs, metrics),
        "paired": paired(runs, metrics, args.steps),
        "seconds_per_run": {m: _mean([sum(r.get("time/step") or 0.0 for r in run.history) for run in rs])
                            for m, rs in runs.items()},
        "replay_share": {m: replay_share(rs) for m, rs in runs.items()},
        "provenance": {m: {str(r.seed): read_provenance(kept_root, m, r.seed) for r in rs} for m, rs in runs.items()},
    }
    table(args.task, summary)
    summary = write_result(results, KIND, summary, strict=True)
    png = results.with_suffix(".png") if args.json else out / "heldout.png"
    if plot(summary, png):
        print(f"\nplot: {png}")
    print(f"results: {results}; total {time.perf_counter() - t0:.0f} s")
    return summary


if __name__ == "__main__":
    main()
