"""Training runs for the learning benchmarks: each (task, method, seed) trained by the real
entry point (`mrtpo.harness.train`) in a process of its own, read back once it finished,
kept beside a results file (its record, no checkpoints) and read from there by a later session.

- methods: the advantage settings the benchmarks compare (`METHODS`, `EXTRA_METHODS`);
- settings: a built-in policy's as the recorded experiments had them (`model_settings`), the
  flags that change them (`add_train_flags`);
- a run: `run_one` trains or reads back <out>/runs/<task>/<method>/seed<k>/ (resuming an
  interrupted one; a directory that holds a run with other settings is refused);
- kept runs: `keep` copies a run's record with its `provenance`; `read_kept` reads it back when
  it finished with the same settings; `run_or_read` is the two together.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import NamedTuple

from benchmarks.lib.results import cpu_name, current_commit

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
ALL_METHODS = {**METHODS, **EXTRA_METHODS}  # span_placement.py adds its lambda variants here
PATHS = ("model", "data", "eval_data")  # settings that name files: compared by name (check_settings)
KEPT_FILES = ("config.yaml", "metrics.jsonl", "heldout.json")  # what a kept run holds (no checkpoints)
PROVENANCE = "provenance.json"  # beside them: the commit and CPU a kept run finished on


# ------------------------------------------------------------------------------ settings
def add_train_flags(ap: argparse.ArgumentParser, save_every: int = 0) -> None:
    """The training settings the learning scripts take (None: the model's own, see model_settings)."""
    ap.add_argument("--batch-prompts", type=int, default=None)
    ap.add_argument("--num-generations", type=int, default=None)
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--lr", type=float, default=None)
    add_dropout_flag(ap)
    ap.add_argument("--save-every", type=int, default=save_every,
                    help="checkpoint every N steps, so an interrupted run resumes there (0: at the end only)")


def add_dropout_flag(ap: argparse.ArgumentParser) -> None:
    """--lora-dropout: the recorded experiments pin 0.05 for the built-in policies
    (EXPERIMENT_DEFAULTS); `mrtpo train`'s own default is 0, which a run that stands for the
    first command must use."""
    ap.add_argument("--lora-dropout", type=float, default=None,
                    help="LoRA dropout (default: the recorded experiments' 0.05 for a built-in policy, else "
                         "`mrtpo train`'s 0)")


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
                                       "max_new_tokens": args.max_new_tokens, "lr": args.lr,
                                       "lora_dropout": getattr(args, "lora_dropout", None)}.items()
                     if v is not None})
    return settings


def named(name: str, path: str) -> str:
    """The model as the results files name it: `name (path)` when a built-in name resolved."""
    return name if str(path) == name else f"{name} ({path})"


# ------------------------------------------------------------------------------ one run
def run_dir_of(out: Path, task: str, method: str, seed: int) -> Path:
    return out / "runs" / task / method / f"seed{seed}"


def run_config(run_dir: Path, task: str, method: str, seed: int, settings: dict, resume: bool = False):
    """The TrainConfig of one (task, method, seed): `settings` with the method's fields."""
    from mrtpo.harness import TrainConfig

    return TrainConfig(task=task, seed=seed, output_dir=str(run_dir), resume=resume,
                       **ALL_METHODS[method], **settings)


def read_log(path: Path) -> list[dict]:
    """A run's JSONL log (metrics.jsonl), one record per line; a torn last line (a run killed
    mid-write) is dropped."""
    from mrtpo.harness.run.files import JsonlLog

    return JsonlLog(path).read()


def finished(run_dir: Path, steps: int, measured: bool = False) -> list[dict] | None:
    """The run's first `steps` metrics records when it reached `steps` (and, with `measured`,
    holds its held-out measurement after the last step), else None."""
    from mrtpo.harness.run import heldout

    done = read_log(run_dir / "metrics.jsonl")
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
        done = read_log(run_dir / "metrics.jsonl")
        resume = (run_dir / "config.yaml").is_file() and any(run_dir.glob("checkpoints/step-*"))
        if not resume:  # a run that died before its first checkpoint: start it afresh
            import shutil

            for p in run_dir.iterdir():
                if p.name != LOCK_NAME:
                    shutil.rmtree(p) if p.is_dir() else p.unlink()
    cfg = run_config(run_dir, task, method, seed, settings, resume=resume)
    t0 = time.perf_counter()
    train_apart(cfg, threads, measure)
    history = read_log(run_dir / "metrics.jsonl")
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


# ------------------------------------------------------------------------------ read back, kept
class Run(NamedTuple):
    """One finished run read back: its held-out curve and its training metrics."""

    method: str
    seed: int
    curve: list[dict]  # heldout.json's points: {"step", metric: value, "_per_example": {...}}
    example_ids: list[str]
    history: list[dict]  # metrics.jsonl, one record per step

    def point(self, step: int) -> dict | None:
        return next((p for p in self.curve if p["step"] == step), None)


def read_run(run_dir: Path, method: str, seed: int, steps: int) -> Run:
    """The run in `run_dir` (a training run or a kept copy), up to `steps`."""
    from mrtpo.harness.run import heldout

    doc = heldout.read(run_dir)
    return Run(method, seed, [p for p in heldout.curve(doc) if p["step"] <= steps],
               list(doc.get("_example_ids") or []), read_log(run_dir / "metrics.jsonl")[:steps])


def provenance() -> dict:
    """{"commit": the short HEAD of this checkout (None outside git), "cpu": the processor's
    name with its family and model}: what a kept run says it finished on (float rounding,
    hence greedy near-ties, follow the code and the CPU)."""
    return {"commit": current_commit(), "cpu": cpu_name(family=True)}


def keep(run_dir: Path, kept: Path) -> None:
    """Copy a run's record (KEPT_FILES) to `kept`, each file whole or not at all (a finished run's;
    speed/gpu.py also keeps the runs its budget stopped, to compare them where they all got to),
    with its PROVENANCE."""
    from mrtpo.textio import write_atomic

    kept.mkdir(parents=True, exist_ok=True)
    for name in KEPT_FILES:
        if (run_dir / name).is_file():
            write_atomic(kept / name, (run_dir / name).read_text(encoding="utf-8"))
    write_atomic(kept / PROVENANCE, json.dumps(provenance()) + "\n")


def read_provenance(kept_root: Path | None, method: str, seed: int) -> dict | None:
    """A kept run's PROVENANCE, None when it has none (runs kept before it was written)."""
    path = kept_root / method / f"seed{seed}" / PROVENANCE if kept_root is not None else None
    return json.loads(path.read_text(encoding="utf-8")) if path is not None and path.is_file() else None


def read_kept(kept_root: Path, task: str, method: str, seed: int, settings: dict) -> Run | None:
    """The kept copy of (method, seed) when it finished with these settings, else None."""
    kept = kept_root / method / f"seed{seed}"
    if finished(kept, settings["steps"], measured=True) is None:
        return None
    check_settings(kept, run_config(kept, task, method, seed, settings))
    return read_run(kept, method, seed, settings["steps"])


def run_or_read(out: Path, kept_root: Path | None, task: str, method: str, seed: int, settings: dict,
                threads: int | None, measure) -> Run:
    """One (method, seed): read back from its kept copy when that finished with these settings
    (an earlier session's), else trained or read back from <out> (run_one, which resumes an
    interrupted run) and then kept."""
    steps = settings["steps"]
    done = read_kept(kept_root, task, method, seed, settings) if kept_root is not None else None
    if done is not None:
        return done
    kept = kept_root / method / f"seed{seed}" if kept_root is not None else None
    run_one(out, task, method, seed, settings, threads, measure)
    run_dir = run_dir_of(out, task, method, seed)
    if kept is not None:
        keep(run_dir, kept)
        print(f"  kept {method} seed {seed} in {kept}: commit it", flush=True)
    return read_run(run_dir, method, seed, steps)
