"""Speed against the peer: `mrtpo train` and TRL's GRPOTrainer, with and without MRTPO.

Four runs on the same policy, task, batch and LoRA settings: the compact harness with GDPO
(`--no-mrtpo`), TRL's GRPOTrainer through `python -m mrtpo.integrations.trl --no_mrtpo
--multi_objective_aggregation normalize_then_sum` (GDPO, TRL's own advantages), and both
with MRTPO on GDPO. Each run is a fresh process (`--worker`) that trains a few steps and
reports each step's wall time and completion tokens; the first `--warmup` steps (lazy
initialisation, allocator warm-up) are not counted. The four runs are alternated (the order
reversed on every other repeat, so a drift in the machine's load hits them alike), repeated;
the table gives the median over repeats of each run's seconds per 1,000 completion tokens
(completion lengths differ between runs, since each samples its own completions), and each
ratio is the median over repeats of that repeat's ratio (runs of one repeat are minutes
apart, so on a shared machine they see about the same load).

    python -m benchmarks.speed.peer [--model smollm2-135m] [--task toolcall] [--steps 6] [--repeats 2]
        [--batch-prompts 4] [--num-generations 8] [--max-new-tokens 160] [--temperature 1.0]
        [-o KEY=VALUE ...] [--grad-accum 1] [--threads N] [--quick]

On SmolLM2-135M-Instruct (CPU-sized; its tool calls need the task's worked example):

    python -m benchmarks.speed.peer --model smollm2-135m -o demo=true --batch-prompts 2 \
        --num-generations 4 --max-new-tokens 64 --temperature 0.7 --lr 5e-5 --grad-accum 2 --threads 1

(`--grad-accum 2`: both sides split the 8 completions into 2 micro-batches, the same gradient.
TRL's single micro-batch runs the 8 prompt + completion sequences, about 860 tokens each,
through the 30 layers with gradients at once: about 19 GB, which a 24 GB machine does not
always have.)

Both sides do the same arithmetic: float32 on CPU and bf16 on a GPU, no gradient
checkpointing (TRL's GRPOConfig defaults to `bf16=True`, CPU autocast included, and to
`gradient_checkpointing=True`, which recomputes the forward in backward; both are set
explicitly here, as `mrtpo train`'s defaults). Printed: per run the
median seconds per 1k tokens, tokens per step and step seconds; per phase of the harness
(generate, verify, replay, update) seconds per 1k tokens; and as the last line the ratios:
harness / TRL per token with and without MRTPO, and MRTPO's overhead (MRTPO / GDPO per
token) in each. Since the MRTPO and GDPO runs sample different completions after their first
step, the harness's overhead is also given on the MRTPO run's own steps: step time over step
time less the replay (the only phase GDPO lacks; the other phases run the same code). The
update's cost grows with the padded batch (completions x the longest one), so the phase line
also gives the update per 1k padded tokens. TRL is optional: `pip install -e ".[trl]"`.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.lib.processes import module_env

RUNS = [("harness", False), ("trl", False), ("harness", True), ("trl", True)]
PHASES = ("generate", "verify", "replay", "update")


def label(side: str, mrtpo: bool) -> str:
    name = "mrtpo train" if side == "harness" else "TRL GRPOTrainer"
    return f"{name} {'MRTPO (on GDPO)' if mrtpo else 'GDPO'}"


# ----------------------------------------------------------------------------------- workers
def harness_worker(args, mrtpo: bool, out_dir: Path) -> list[dict]:
    """`mrtpo train`'s loop for --steps steps -> one record per step."""
    from mrtpo.harness import TrainConfig, train

    cfg = TrainConfig(model=args.model, task=args.task, steps=args.steps, batch_prompts=args.batch_prompts,
                      num_generations=args.num_generations, max_new_tokens=args.max_new_tokens, lr=args.lr,
                      lora=True, lora_r=16, lora_alpha=32, lora_dropout=0.05, advantage="gdpo", mrtpo=mrtpo,
                      seed=args.seed, output_dir=str(out_dir), save_every=0, log_completions_every=0,
                      device=args.device, temperature=args.temperature, task_args=task_options(args),
                      grad_accum=args.grad_accum)
    steps = []

    def on_step(record: dict) -> None:
        phases = {p: v for k, v in record.items() for p in PHASES if k.endswith(f"/{p}")}
        step_s = next(v for k, v in record.items() if k.endswith("/step"))
        n = args.batch_prompts * args.num_generations
        steps.append({"seconds": step_s, "tokens": record["completions/mean_length"] * n, "phases": phases,
                      "padded": record["completions/max_length"] * n})

    train(cfg, on_step=on_step)
    return steps


def trl_worker(args, mrtpo: bool, out_dir: Path) -> list[dict]:
    """`python -m mrtpo.integrations.trl` (its `main`) for --steps steps -> one record per step."""
    import torch
    from transformers import TrainerCallback

    from mrtpo.integrations.trl import main

    class StepClock(TrainerCallback):
        def __init__(self):
            self.steps: list[dict] = []
            self._t0 = 0.0

        def on_step_begin(self, *_, **__):
            self._t0 = time.perf_counter()

        def on_step_end(self, *_, **__):
            self.steps.append({"seconds": time.perf_counter() - self._t0})

        def on_log(self, _args, _state, _control, logs=None, **__):
            if logs and "completions/mean_length" in logs and self.steps:
                n = args.batch_prompts * args.num_generations
                self.steps[-1]["tokens"] = logs["completions/mean_length"] * n

    cuda = args.device != "cpu" and torch.cuda.is_available()
    argv = ["--model_name_or_path", args.model, "--task", args.task, "--output_dir", str(out_dir),
            "--max_steps", str(args.steps),
            "--per_device_train_batch_size", str(args.batch_prompts * args.num_generations // args.grad_accum),
            "--gradient_accumulation_steps", str(args.grad_accum),  # one generation batch per step
            "--num_generations", str(args.num_generations), "--max_completion_length", str(args.max_new_tokens),
            "--learning_rate", str(args.lr), "--lr_scheduler_type", "constant", "--seed", str(args.seed),
            "--use_peft", "--lora_r", "16", "--lora_alpha", "32", "--lora_dropout", "0.05",
            "--lora_target_modules", "all-linear", "--multi_objective_aggregation", "normalize_then_sum",
            "--logging_steps", "1", "--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true",
            "--gradient_checkpointing", "false", "--bf16", "true" if cuda else "false",
            "--temperature", str(args.temperature)]
    if args.task_option:
        argv += ["--task_args", *args.task_option]
    if not cuda:
        argv.append("--use_cpu")
    if not mrtpo:
        argv.append("--no_mrtpo")
    clock = StepClock()
    main(argv, callbacks=[clock])
    return clock.steps


def run_worker(args) -> None:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from mrtpo.models.builds import resolve_model

    args.model = resolve_model(args.model, progress=False)  # the driver built it already
    with tempfile.TemporaryDirectory(prefix="peer-") as tmp:
        fn = harness_worker if args.worker == "harness" else trl_worker
        steps = fn(args, args.mrtpo, Path(tmp) / "run")
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux
    Path(args.result).write_text(json.dumps({"steps": steps, "peak_rss_gb": peak_gb}))


def task_options(args) -> dict:
    """-o KEY=VALUE pairs -> the task's keyword arguments, parsed as `mrtpo train -o` parses them."""
    from mrtpo.tasks.options import OptionSyntaxError, read_options

    try:
        return read_options(args.task_option)
    except OptionSyntaxError as exc:
        sys.exit(f"-o {exc.item!r}: write KEY=VALUE, e.g. demo=true")


# ---------------------------------------------------------------------------------- driver
def launch(args, side: str, mrtpo: bool, result: Path) -> tuple[list[dict], float]:
    """One fresh worker process -> (its per-step records, its peak resident memory in GB)."""
    cmd = [sys.executable, "-m", "benchmarks.speed.peer", "--worker", side, "--mrtpo" if mrtpo else "--no-mrtpo",
           "--result", str(result)]
    for name in ("model", "task", "steps", "batch_prompts", "num_generations", "max_new_tokens", "lr", "seed",
                 "threads", "device", "temperature", "grad_accum"):
        cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    for pair in args.task_option:
        cmd += ["-o", pair]
    proc = subprocess.run(cmd, env=module_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{label(side, mrtpo)} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    out = json.loads(result.read_text())
    return out["steps"], out["peak_rss_gb"]


def per_1k(steps: list[dict], warmup: int, key=lambda s: s["seconds"]) -> float:
    kept = steps[warmup:] or steps
    return 1000 * sum(key(s) for s in kept) / max(sum(s["tokens"] for s in kept), 1.0)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="policy for both sides (default: the default built-in one)")
    ap.add_argument("--task", default="toolcall")
    ap.add_argument("--steps", type=int, default=6, help="steps per run, --warmup of them not counted")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2, help="times each of the four runs is repeated")
    ap.add_argument("--batch-prompts", type=int, default=4)
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature, both sides")
    ap.add_argument("-o", "--task-option", action="append", default=[], metavar="KEY=VALUE",
                    help="the task's option, both sides (repeatable), e.g. -o demo=true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--grad-accum", type=int, default=1,
                    help="micro-batches per step, both sides (the same gradient, less memory)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per run (0: torch's default)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda for a GPU (bf16 on both sides)")
    ap.add_argument("--only", default="", help="comma-separated subset: harness, trl")
    ap.add_argument("--quick", action="store_true", help="3 steps (1 warm-up), 1 repeat")
    ap.add_argument("--worker", choices=["harness", "trl"], help=argparse.SUPPRESS)
    ap.add_argument("--mrtpo", action=argparse.BooleanOptionalAction, default=True, help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    return ap


def main() -> None:
    ap = parser()
    args = ap.parse_args()
    if args.worker:
        return run_worker(args)
    if args.quick:
        args.steps, args.warmup, args.repeats = 3, 1, 1
    if args.steps <= args.warmup:
        sys.exit(f"--steps {args.steps} must exceed --warmup {args.warmup}")
    sides = [s.strip() for s in args.only.split(",") if s.strip()] or ["harness", "trl"]
    if "trl" in sides:
        try:
            import trl  # noqa: F401
        except ImportError:
            sys.exit('TRL is not installed: pip install -e ".[trl]" (or pass --only harness)')
    from mrtpo.models.builds import resolve_model

    args.model = resolve_model(args.model)  # build the built-in policy once, before any timing
    runs = [r for r in RUNS if r[0] in sides]
    print(f"policy {args.model}, task {args.task}, {args.batch_prompts} prompts x {args.num_generations}, "
          f"up to {args.max_new_tokens} new tokens, T={args.temperature}, task options {task_options(args)}, "
          f"LoRA r16, {args.steps} steps per run ({args.warmup} warm-up), "
          f"{args.repeats} repeats, device {args.device}; load average {load()}", flush=True)
    results: dict[tuple[str, bool], list[list[dict]]] = {r: [] for r in runs}
    peaks: dict[tuple[str, bool], list[float]] = {r: [] for r in runs}
    with tempfile.TemporaryDirectory(prefix="peer-") as tmp:
        for rep in range(args.repeats):
            for side, mrtpo in (runs if rep % 2 == 0 else runs[::-1]):
                t0 = time.perf_counter()
                steps, peak = launch(args, side, mrtpo, Path(tmp) / f"{side}-{mrtpo}-{rep}.json")
                results[side, mrtpo].append(steps)
                peaks[side, mrtpo].append(peak)
                print(f"  repeat {rep + 1}: {label(side, mrtpo)}: {per_1k(steps, args.warmup):.2f} s per 1k tokens "
                      f"({time.perf_counter() - t0:.0f} s with start-up; peak RSS {peak:.1f} GB; "
                      f"load average {load()})", flush=True)

    med = {r: statistics.median(per_1k(s, args.warmup) for s in results[r]) for r in runs}
    print()
    print("| run | s per 1k tokens | tokens per step | s per step | peak RSS GB |")
    print("|---|---|---|---|---|")
    for r in runs:
        kept = [st for s in results[r] for st in s[args.warmup:]]
        print(f"| {label(*r)} | {med[r]:.2f} | {statistics.median(s['tokens'] for s in kept):.0f} | "
              f"{statistics.median(s['seconds'] for s in kept):.2f} | {max(peaks[r]):.1f} |")
    for mrtpo in (False, True):
        if ("harness", mrtpo) not in results:
            continue
        parts = []
        for p in PHASES:
            vals = [per_1k(s, args.warmup, key=lambda st, p=p: st["phases"].get(p, 0.0)) for s in results["harness", mrtpo]]
            if any(vals):
                parts.append(f"{p} {statistics.median(vals):.2f}")
        padded = [1000 * sum(st["phases"].get("update", 0.0) for st in s[args.warmup:])
                  / max(sum(st.get("padded", 0.0) for st in s[args.warmup:]), 1.0) for s in results["harness", mrtpo]]
        if any(padded):
            parts.append(f"update per 1k padded tokens {statistics.median(padded):.2f}")
        print(f"harness phases, {'MRTPO' if mrtpo else 'GDPO'} (s per 1k tokens): " + ", ".join(parts))
    print(f"load average after the runs: {load()}")
    # ratios within a repeat compare runs made minutes apart, under about the same load; the
    # median over repeats of those is steadier than a ratio of medians on a shared machine
    def ratio(a, b) -> float:
        return statistics.median(per_1k(x, args.warmup) / per_1k(y, args.warmup) for x, y in zip(results[a], results[b]))

    ratios = []
    if ("trl", False) in med and ("harness", False) in med:
        ratios.append(f"harness / TRL per token: {ratio(('harness', False), ('trl', False)):.2f}x GDPO, "
                      f"{ratio(('harness', True), ('trl', True)):.2f}x MRTPO")
    for side in sides:
        ratios.append(f"MRTPO overhead ({side}): {ratio((side, True), (side, False)):.2f}x")
        if side == "harness":  # on its own steps: step / (step - replay)
            own = [s["seconds"] / max(s["seconds"] - s["phases"].get("replay", 0.0), 1e-9)
                   for r in results["harness", True] for s in r[args.warmup:]]
            ratios[-1] += f" per token, {statistics.median(own):.2f}x on its own steps"
    print("; ".join(ratios))


if __name__ == "__main__":
    main()
