"""Learning curves: GRPO, GDPO, GDPO+SAW and MRTPO (on GDPO) on the bundled tasks.

Every method trains the same policy (default: the built-in `mrtpo-tiny`, built on first use)
with LoRA for the same steps and batch, for several seeds, through the project's trainer
(`mrtpo.harness.train`). It prints, per task, method and reward, the mean over seeds of the
reward over the first and the last tenth of the steps, and the first step at which the
seed-mean curve (smoothed over a tenth of the steps) reaches a threshold, set per reward
halfway from the common start (all methods' first tenth) to the maximum 1. It saves a PNG of
the curves with seed bands (min..max over seeds) when matplotlib is installed (the `plot`
extra). Nothing is asserted: these are measured figures.

    python benchmarks/learning/learning.py [--tasks toolcall,text2sql,instruct] [--seeds 0,1,2]
        [--steps N] [--out benchmarks/out/learning] [--threads N] [--quick]

Runs go to <out>/runs/<task>/<method>/seed<k>/, each trained in a fresh process; a finished run
is read back instead of run again and an interrupted one resumes, so the script can be
stopped and restarted (a run directory that holds a run with other settings is refused, not
mixed in). Settings
other than the task, method and seed are the built-in policy's as the recorded experiments had
them (`mrtpo.models.builtin.EXPERIMENT_DEFAULTS`), overridable with the flags below; the model
is `mrtpo-tiny` unless --model names another, as when these results were first recorded.

heldout.py (beside this script) draws held-out learning curves with the same runs: its runs
also measure held-out examples (`--heldout`, `--heldout-every`), and it shares `run_one`.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

METHODS = {  # name -> TrainConfig fields
    "grpo": {"advantage": "grpo", "saw": "off", "mrtpo": False},
    "gdpo": {"advantage": "gdpo", "saw": "off", "mrtpo": False},
    "gdpo+saw": {"advantage": "gdpo", "saw": "advantage", "mrtpo": False},
    "mrtpo": {"advantage": "gdpo", "saw": "off", "mrtpo": True},
}
# further methods --methods can name (not run by default)
EXTRA_METHODS = {
    "mrtpo-lambda0.5": {"advantage": "gdpo", "saw": "off", "mrtpo": True, "mrtpo_lambda": 0.5},
    # controls: MRTPO's weights shuffled within each response; the task's own reward spans
    "mrtpo-shuffled": {"advantage": "gdpo", "saw": "off", "mrtpo": True, "mrtpo_weights": "shuffled"},
    "mrtpo-spans": {"advantage": "gdpo", "saw": "off", "mrtpo": True, "mrtpo_weights": "spans"},
    # one contrast (P_all against P_none, every block left out) as every reward's weights
    "mrtpo-single": {"advantage": "gdpo", "saw": "off", "mrtpo": True, "mrtpo_weights": "single"},
}
ALL_METHODS = {**METHODS, **EXTRA_METHODS}
PATHS = ("model", "data", "eval_data")  # settings that name files: compared by name (check_settings)


def run_dir_of(out: Path, task: str, method: str, seed: int) -> Path:
    return out / "runs" / task / method / f"seed{seed}"


def run_config(run_dir: Path, task: str, method: str, seed: int, settings: dict, resume: bool = False):
    """The TrainConfig of one (task, method, seed): `settings` with the method's fields."""
    from mrtpo.harness import TrainConfig

    return TrainConfig(task=task, seed=seed, output_dir=str(run_dir), resume=resume,
                       **ALL_METHODS[method], **settings)


def finished(run_dir: Path, steps: int, measured: bool = False) -> list[dict] | None:
    """The run's first `steps` metrics records when it reached `steps` (and, with `measured`,
    holds its held-out measurement after the last step), else None."""
    from mrtpo.harness.run import heldout

    done = _read(run_dir / "metrics.jsonl")
    if len(done) < steps or (measured and not heldout.measured(heldout.read(run_dir), steps)):
        return None
    return done[:steps]


def check_settings(run_dir: Path, cfg) -> None:
    """Stop, naming the differences, when `run_dir` holds a run trained with other settings than
    `cfg` (a rerun with other flags on the same --out would mix runs or resume one under other
    settings). Paths (the model, the data) are compared by their last part, which another
    machine or checkout keeps (a built-in policy's build is `<name>-<fingerprint>`); what a
    resumed run may change (mrtpo.harness.config.RESUMABLE) is not compared."""
    from mrtpo.harness.config import RESUMABLE, ConfigError, read_yaml

    def comparable(key: str, value):
        return Path(str(value)).name if key in PATHS and value is not None else value

    path = run_dir / "config.yaml"
    if not path.is_file():
        return
    try:
        saved = read_yaml(path)
    except ConfigError as exc:
        raise SystemExit(f"{exc}; remove {run_dir} to train it afresh") from None
    given = cfg.to_dict()
    diffs = [f"{k}: saved {saved[k]!r}, now {given[k]!r}" for k in sorted(saved)
             if k in given and k not in RESUMABLE and comparable(k, saved[k]) != comparable(k, given[k])]
    if diffs:
        raise SystemExit(f"{run_dir} holds a run with other settings ({'; '.join(diffs)}); give another --out "
                         "(or remove that run) to train with these")


def run_one(out: Path, task: str, method: str, seed: int, settings: dict, threads: int | None = None,
            measure=None) -> list[dict]:
    """Train one (task, method, seed), or read it back when it already finished.

    With `measure` (the held-out metric, `mrtpo.evaluation.heldout.measure`; a module-level
    function, as the spawned trainer receives it pickled) the run measures its held-out
    examples (`settings["heldout"]`, `heldout_every`), and it has finished only once it holds
    the measurement after its last step.

    The run directory is locked while it is read (as `mrtpo train` locks it): a second copy
    of the benchmark started on the same --out is refused instead of deleting this one's run.
    The run itself trains in a fresh process (`train_apart`), which takes the lock again."""
    from mrtpo.harness.run.lock import LOCK_NAME, RunLock

    run_dir = run_dir_of(out, task, method, seed)
    measured = measure is not None and bool(settings.get("heldout"))
    with RunLock(run_dir):
        check_settings(run_dir, run_config(run_dir, task, method, seed, settings))
        done = finished(run_dir, settings["steps"], measured)
        if done is not None:
            return done
        done = _read(run_dir / "metrics.jsonl")
        resume = (run_dir / "config.yaml").is_file() and any(run_dir.glob("checkpoints/step-*"))
        if not resume:  # a run that died before its first checkpoint: start it afresh
            import shutil

            for p in run_dir.iterdir():
                if p.name != LOCK_NAME:
                    shutil.rmtree(p) if p.is_dir() else p.unlink()
    cfg = run_config(run_dir, task, method, seed, settings, resume=resume)
    t0 = time.perf_counter()
    train_apart(cfg, threads, measure)
    history = _read(run_dir / "metrics.jsonl")
    print(f"  ran {task} {method} seed {seed}: {len(history) - len(done) if resume else len(history)} steps in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    return history[: settings["steps"]]


def train_apart(cfg, threads: int | None = None, measure=None) -> None:
    """`mrtpo.harness.train(cfg, measure=measure)` in a fresh (spawned) process, with `threads`
    torch threads.

    One process per run: a process that has trained a model keeps gigabytes it no longer
    uses, and the next run's verifier workers, forked from it, held a copy of them (about
    5 GB each run on SmolLM2-135M, against 0.1 GB forked from a fresh process), so that two
    runs side by side ran out of 24 GB. A run that fails stops the benchmark; rerunning it
    resumes from the run's last checkpoint."""
    import multiprocessing as mp

    from mrtpo.harness import train

    before = os.environ.get("OMP_NUM_THREADS")
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)  # the child's torch reads it at start
    try:
        proc = mp.get_context("spawn").Process(target=train, args=(cfg,), kwargs={"measure": measure})
        proc.start()
    finally:
        if threads:
            if before is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = before
    proc.join()
    if proc.exitcode != 0:
        raise SystemExit(f"the run in {cfg.output_dir} failed (its process exited with code {proc.exitcode}); "
                         "rerun the benchmark to resume it from its last checkpoint")


def _named(name: str, path: str) -> str:
    """The model as the results files name it: `name (path)` when a built-in name resolved."""
    return name if str(path) == name else f"{name} ({path})"


def _read(path: Path) -> list[dict]:
    from mrtpo.harness.run.files import JsonlLog

    return JsonlLog(path).read()  # a torn last line (a run killed mid-write) is dropped


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


def add_train_flags(ap: argparse.ArgumentParser, save_every: int = 0) -> None:
    """The training settings both learning scripts take (None: the model's own, see model_settings)."""
    ap.add_argument("--batch-prompts", type=int, default=None)
    ap.add_argument("--num-generations", type=int, default=None)
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--save-every", type=int, default=save_every,
                    help="checkpoint every N steps, so an interrupted run resumes there (0: at the end only)")


def model_settings(model: str, args: argparse.Namespace, task: str | None = None) -> dict:
    """The training settings of every run: a built-in policy's (by name or built directory) as the
    recorded experiments had them (`EXPERIMENT_DEFAULTS`), less the task, then the flags of
    add_train_flags that were given. With `task`, the policy's task options are kept only when
    they are for that task (SmolLM2's `demo` is its toolcall setting); without, as the recorded
    learning results had them."""
    from mrtpo.models.builtin import EXPERIMENT_DEFAULTS, builtin_name

    settings = dict(EXPERIMENT_DEFAULTS.get(builtin_name(model) or "", {}))
    own_task = settings.pop("task", None)
    if task is not None and own_task != task:
        settings.pop("task_args", None)
    settings.update({k: v for k, v in {"steps": args.steps, "batch_prompts": args.batch_prompts,
                                       "num_generations": args.num_generations,
                                       "max_new_tokens": args.max_new_tokens, "lr": args.lr}.items()
                     if v is not None})
    return settings


def parser() -> argparse.ArgumentParser:
    from mrtpo.models.builtin import TINY_MODEL

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default="toolcall,text2sql,instruct")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help=f"comma-separated; also: {', '.join(EXTRA_METHODS)} (MRTPO blended half with uniform weights)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--model", default=TINY_MODEL)
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
    from mrtpo.models.default import resolve_model

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
    (out / "summary.json").write_text(json.dumps({
        "command": " ".join(["python benchmarks/learning/learning.py", *sys.argv[1:]]),
        "settings": {**settings, "model": _named(args.model, settings["model"]), "model_name": args.model},
        "seeds": seeds,
        "window": args.window or max(1, settings["steps"] // 10), "rows": rows,
        "seconds_per_run": next(iter(seconds.values())) if len(seconds) == 1 else seconds,
        "curves": curves_out}, indent=1) + "\n")
    png = out / "learning.png"
    if plot(all_curves, settings["steps"], png):
        print(f"\nplot: {png}")
    print(f"summary: {out / 'summary.json'}; total {time.perf_counter() - t0:.0f} s; "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
