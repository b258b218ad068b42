"""Does MRTPO's placement make a better update? A paired one-step test.

For each of R batches: B prompts, G completions each sampled from the starting policy (a fresh
LoRA, so the pretrained model itself; with `--start CHECKPOINT`, a `mrtpo train` checkpoint's
adapter: a mid-training policy), scored by every reward of the task. A batch where every
group scored every reward alike has no credit to place: every method's step and effect is 0
there, so it is recorded as such without a pool (it still counts, as a batch of training would). Every method takes
ONE optimizer step from the same starting weights on the same batch, completions and scores;
only the token advantages differ:

- grpo, gdpo, gdpo+saw: one advantage per response (the estimators);
- mrtpo: GDPO's credit placed by the replay's JS distances (the method);
- mrtpo-shuffled: the same distances permuted within each response (the weights'
  distribution without their placement: a control);
- mrtpo-single: one contrast for every reward, the JS distance between P_all and the prompt
  with every block left out (`--mrtpo-weights single`: placement without the per-reward split;
  its own replay, timed as `replay-single`);
- oracle: GDPO's credit on the tokens the task says each reward is about (`Task.reward_spans`;
  toolcall only): the ceiling of placement;
- mrtpo-bf16-sampled: MRTPO's step on a batch sampled from a bfloat16 copy of the weights (the
  trainer's `--rollout-dtype bfloat16`), with TRL's importance-sampling correction
  (sequence_mask, C_max 3.0) on the float32 log-probs; scored, replayed and stepped in
  float32. With it among the methods, both batches are drawn as the trainer draws them (each
  row from its own seeded generator, `harness.distributed.RowSeededSampling`), so the two
  share every token until bfloat16 rounding flips a draw, and `mrtpo-bf16-sampled - mrtpo`
  is what sampling in bfloat16 does to the step.

The measure is each update's effect on each reward's expected value on the batch's prompts,
estimated on a pool of P fresh completions per prompt from the starting policy, drawn
after the batch and shared by all methods (importance weights: the change of E[r_k] is
mean_y (rho(y) - 1) (r_k(y) - mean r_k), rho = pi_new(y) / pi_start(y) under the sampling
temperature). The step is the trainer's own: `mrtpo.harness.update.update` with a fresh AdamW,
whose first step moves every weight with a gradient by the learning rate (Adam's first step is
lr * g / |g|), so every method's step has the same parameter norm, reported beside its KL
from the start on the pool (k3 estimator over whole completions). Per method and reward the
mean over batches has a 95% interval (Student t), and so do the paired differences
mrtpo - gdpo, mrtpo - mrtpo-shuffled (and the others against gdpo). `total` is the task's
weighted sum of rewards.

    python -m benchmarks.experiments.one_step --model smollm2-135m --task text2sql -o demo=true \
        --batches 30 --pool 32 --seed 0 --json benchmarks/results/one-step-text2sql-smollm2-135m.json

Each finished batch is appended to `--out` (JSONL, default benchmarks/out/one-step/); a rerun
with the same settings reads those back and goes on from the next batch, so the script can be
stopped and restarted, and `--batches` raised later. Settings other than the task's are
`mrtpo train`'s for the model (a built-in brings its train defaults).

`--combine A.jsonl B.jsonl ...` runs nothing: it summarises the batches of several such files
whose settings are the same but the seed (runs with other seeds draw other prompts and
completions, so their batches are independent and pool into one paired test; several can run
at once, on one GPU or on several machines):

    python -m benchmarks.experiments.one_step --combine runs/text2sql-seed*.jsonl --json pooled.json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from benchmarks.lib.results import command, write_result
from benchmarks.lib.setting import adapted_policy, sample_batch
from benchmarks.lib.stats import t_interval

METHODS = ("grpo", "gdpo", "gdpo+saw", "mrtpo", "mrtpo-shuffled", "mrtpo-single", "oracle", "mrtpo-bf16-sampled")
BF16_SAMPLED = "mrtpo-bf16-sampled"
PAIRS = (("mrtpo-bf16-sampled", "mrtpo"), ("mrtpo", "gdpo"), ("mrtpo", "mrtpo-shuffled"), ("mrtpo-shuffled", "gdpo"), ("mrtpo", "mrtpo-single"),
         ("mrtpo-single", "gdpo"), ("oracle", "gdpo"),
         ("mrtpo", "oracle"), ("gdpo+saw", "gdpo"), ("grpo", "gdpo"))


# ------------------------------------------------------------------------------ one batch
@torch.no_grad()
def sequence_logps(policy, rollout, temperature: float, rows_per_pass: int = 32) -> torch.Tensor:
    """log pi(y | x) of every completion under the policy as it stands, at the sampling
    temperature -> [N]. Each pass holds up to `rows_per_pass` completions, whole groups when
    a group fits: each prompt is encoded once for its completions and the beginning the
    prompts share (system text, worked example) once for the pass (`forward.token_logps`)."""
    from mrtpo.harness.forward import token_logps

    out = torch.zeros(len(rollout))
    batch = rollout.batch(policy.pad_id, policy.device)
    t = batch.response_mask.shape[1]
    step = rows_per_pass // rollout.group_size * rollout.group_size or rows_per_pass  # whole groups, if one fits
    was = policy.model.training
    policy.model.eval()
    try:
        with policy.merged() as model:
            for i in range(0, len(rollout), step):
                b = batch.rows(slice(i, min(i + step, len(rollout))))
                logp, _ = token_logps(model, b.input_ids, b.attention_mask, b.position_ids, t,
                                      temperature, share_prompts=True)  # [n, T]
                out[i:i + len(logp)] = (logp * b.response_mask).sum(-1).cpu()
    finally:
        policy.model.train(was)
    return out


def effects(logp_new, logp_start, pool_scores, group_size: int) -> dict[str, float]:
    """The change of each reward's expected value (reward name -> float) and `kl`, estimated
    on the pool: per prompt, mean_y (rho - 1) (r - mean r), then the mean over prompts; kl is
    the k3 estimate of KL(start || new) per completion, mean over the pool."""
    rho = torch.exp(logp_new - logp_start)  # [M]
    out: dict[str, float] = {}
    for name, r in pool_scores.items():  # r [M], NaN where the reward does not apply
        per_prompt = []
        for g in range(0, len(r), group_size):
            rg, wg = r[g:g + group_size], rho[g:g + group_size]
            keep = ~torch.isnan(rg)
            if keep.sum() < 2:
                continue
            per_prompt.append(float(((wg[keep] - 1) * (rg[keep] - rg[keep].mean())).mean()))
        out[name] = sum(per_prompt) / len(per_prompt) if per_prompt else math.nan
    log_ratio = logp_start - logp_new  # [M]
    out["kl"] = float((torch.exp(-log_ratio) - 1 + log_ratio).mean())
    return out


def run_batch(policy, task, scorer, examples, cfg, pool: int, methods, seed: int,
              copy_dtype: torch.dtype = torch.bfloat16) -> dict:
    """One batch: sample, score, replay, one step per method, effects on the pool -> a record.
    `copy_dtype`: the copy mrtpo-bf16-sampled draws from (tests pass float32: the same step as
    mrtpo's)."""
    from mrtpo.advantages import estimate, place, shuffle_within
    from mrtpo.harness.metrics import weighted_total
    from mrtpo.harness.rollout import sample
    from mrtpo.harness.token_credit import policy_replayer, replay_distances, span_distances
    from mrtpo.harness.update import update

    G = cfg.num_generations
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    row_seeded = BF16_SAMPLED in methods
    if row_seeded:  # as the trainer draws (module doc), so that the bf16 batch pairs token by token
        train_r = sample_batch(policy, task, examples, cfg, seed)
    else:
        train_r = sample(policy, task, examples, G, temperature=cfg.temperature, top_p=cfg.top_p,
                         max_new_tokens=cfg.max_new_tokens)
    scored = scorer.score(train_r.examples, train_r.responses)  # [B*G, K]
    w, f = scored.weights, scored.floors
    credit = {"grpo": estimate(scored.scores, G, "grpo", weights=w, floors=f),
              "gdpo": estimate(scored.scores, G, "gdpo", weights=w, floors=f),
              "gdpo+saw": estimate(scored.scores, G, "gdpo", weights=w, saw="advantage", floors=f)}
    record = {"batch_seed": seed, "examples": [ex.id for ex in examples],
              "train_means": {name: float(torch.nanmean(scored.scores[:, k])) for k, name in enumerate(scored.names)},
              "effects": {}, "param_norm": {}, "seconds": {}}
    bf16 = None
    if row_seeded:  # the same rows drawn from a bfloat16 copy, with their log-probs for the correction
        bf_r = sample_batch(policy, task, examples, cfg, seed, record_logps=True, dtype=copy_dtype)
        bf_scored = scorer.score(bf_r.examples, bf_r.responses)  # [B*G, K]
        bf16 = (bf_r, bf_scored, estimate(bf_scored.scores, G, "gdpo", weights=bf_scored.weights,
                                          floors=bf_scored.floors))
        record["bf16_sampled"] = {"same_completions": sum(a == b for a, b in zip(train_r.responses, bf_r.responses)),
                                  "completions": len(bf_r.responses)}
    if bool(credit["gdpo"].per_reward.abs().sum() == 0) and (bf16 is None or bool(bf16[2].per_reward.abs().sum() == 0)):
        # every group scored every reward alike: every estimator's credit is 0, so every method's
        # step is 0 and so is its effect (AdamW moves nothing on a zero gradient); no pool needed
        zero = {**{name: 0.0 for name in scored.names}, "total": 0.0, "kl": 0.0}
        record.update(flat=True, pool_means={}, effects={m: dict(zero) for m in methods},
                      param_norm={m: 0.0 for m in methods})
        record["seconds"] = {"sample": time.perf_counter() - t0, "batch": time.perf_counter() - t0}
        return record
    torch.manual_seed(seed + 1)
    pool_r = sample(policy, task, examples, pool, temperature=cfg.temperature, top_p=cfg.top_p,
                    max_new_tokens=cfg.max_new_tokens)
    t_sample = time.perf_counter() - t0
    pooled = scorer.score(pool_r.examples, pool_r.responses)  # [B*P, K']
    pool_scores = {name: pooled.scores[:, k] for k, name in enumerate(pooled.names)}
    pool_scores["total"] = weighted_total(pooled.scores, pooled.weights)  # [B*P]
    mask = train_r.response_mask()  # [N, T]
    t1 = time.perf_counter()
    q, _ = replay_distances(policy_replayer(policy), task, train_r, scored, cfg.temperature,
                            credit=credit["gdpo"])  # [N, K, T]
    t_replay = time.perf_counter() - t1
    distances = {"mrtpo": q, "mrtpo-shuffled": shuffle_within(q, mask, torch.Generator().manual_seed(seed))}
    if "mrtpo-single" in methods:
        t1 = time.perf_counter()
        distances["mrtpo-single"], _ = replay_distances(policy_replayer(policy), task, train_r, scored,
                                                        cfg.temperature, credit=credit["gdpo"], single=True)
        record["seconds"]["replay-single"] = time.perf_counter() - t1
    if "oracle" in methods:
        distances["oracle"] = span_distances(policy.tokenizer, task, train_r, scored)
    advantages = {m: place(credit[m], None, mask) for m in ("grpo", "gdpo", "gdpo+saw")}
    advantages.update({m: place(credit["gdpo"], d, mask) for m, d in distances.items()})  # [N, T]
    batches, sampling = {}, {}  # a method's own batch and its sampling log-probs, where not train_r's
    if bf16 is not None:
        bf_r, bf_scored, bf_credit = bf16
        t1 = time.perf_counter()
        q_bf, _ = replay_distances(policy_replayer(policy), task, bf_r, bf_scored, cfg.temperature,
                                   credit=bf_credit)  # [N, K, T]
        record["seconds"]["replay-bf16-sampled"] = time.perf_counter() - t1
        advantages[BF16_SAMPLED] = place(bf_credit, q_bf, bf_r.response_mask())  # [N, T]
        batches[BF16_SAMPLED] = bf_r.batch(policy.pad_id, policy.device)
        sampling[BF16_SAMPLED] = bf_r.sampling_logp_matrix()  # [N, T]

    params = policy.trainable_parameters()
    start = [p.detach().clone() for p in params]
    logp_start = sequence_logps(policy, pool_r, cfg.temperature)  # [M]
    record.update(flat=False, pool_means={k: float(torch.nanmean(v)) for k, v in pool_scores.items()})
    record["seconds"].update(sample=t_sample, replay=t_replay)
    batch = train_r.batch(policy.pad_id, policy.device)
    for m in methods:
        t2 = time.perf_counter()
        optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        torch.manual_seed(seed)  # the same LoRA-dropout draws for every method
        stats = update(policy, optimizer, batches.get(m, batch), advantages[m], temperature=cfg.temperature,
                       loss_type=cfg.loss_type, epsilon=cfg.epsilon, epsilon_high=cfg.epsilon_high, beta=0.0,
                       num_iterations=1, grad_accum=cfg.grad_accum, max_grad_norm=cfg.max_grad_norm,
                       max_completion_length=cfg.max_new_tokens, sampling_logps=sampling.get(m),
                       is_mode=cfg.importance_sampling_mode, is_clip_max=cfg.importance_sampling_clip_max)
        if m in sampling:  # TRL's sampling/* statistics of the correction
            record["bf16_sampled"].update({k: v for k, v in stats.items() if k.startswith("sampling/")})
        record["param_norm"][m] = math.sqrt(sum(float((p.detach() - s).pow(2).sum()) for p, s in zip(params, start)))
        record["effects"][m] = effects(sequence_logps(policy, pool_r, cfg.temperature), logp_start,
                                       pool_scores, pool)
        with torch.no_grad():
            for p, s in zip(params, start):
                p.copy_(s)
        record["seconds"][m] = time.perf_counter() - t2
    record["seconds"]["batch"] = time.perf_counter() - t0
    return record


# ------------------------------------------------------------------------------ summary
def summarise(records: list[dict], methods, rewards) -> tuple[list[dict], list[dict]]:
    """(rows: per method and reward, the mean effect over batches with its 95% interval;
    paired: per pair (a, b) and reward, the mean of a - b with its interval). `kl` and
    `param_norm` come as rewards named so, and `per_sqrt_kl` divides each batch's total
    effect by the square root of its KL (the effect per unit of distribution change)."""
    rows, paired = [], []

    def values(m: str, r: str) -> list[float]:
        if r == "param_norm":
            return [rec["param_norm"][m] for rec in records]
        if r == "total_per_sqrt_kl":
            return [rec["effects"][m]["total"] / math.sqrt(rec["effects"][m]["kl"])
                    if rec["effects"][m]["kl"] > 0 else 0.0 for rec in records]
        return [rec["effects"][m].get(r, math.nan) for rec in records]

    names = list(rewards) + ["kl", "param_norm", "total_per_sqrt_kl"]
    for m in methods:
        for r in names:
            mean, low, high = t_interval(values(m, r))
            rows.append({"method": m, "reward": r, "mean": mean, "low": low, "high": high})
    for a, b in PAIRS:
        if a in methods and b in methods:
            for r in list(rewards) + ["total_per_sqrt_kl"]:
                mean, low, high = t_interval([x - y for x, y in zip(values(a, r), values(b, r))])
                paired.append({"a": a, "b": b, "reward": r, "mean": mean, "low": low, "high": high})
    return rows, paired


def verdict(p: dict) -> str:
    if not (p["low"] == p["low"]):
        return "?"
    return "a > b" if p["low"] > 0 else "a < b" if p["high"] < 0 else "no difference"


def plot(rows: list[dict], methods, rewards, path: Path, title: str) -> bool:
    """Per reward, each method's mean effect with its 95% interval; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len(rewards), figsize=(3.2 * len(rewards), 3.2), squeeze=False)
    for ax, r in zip(axes[0], rewards):
        got = [next(x for x in rows if x["method"] == m and x["reward"] == r) for m in methods]
        ys = [g["mean"] for g in got]
        err = [[g["mean"] - g["low"] for g in got], [g["high"] - g["mean"] for g in got]]
        ax.errorbar(range(len(methods)), ys, yerr=err, fmt="o", capsize=3)
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xticks(range(len(methods)), methods, rotation=60, fontsize=7)
        ax.set_title(r, fontsize=9)
    axes[0][0].set_ylabel("change of E[reward], one step")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


# ------------------------------------------------------------------------------ main
def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m", help="policy: a built-in name or a directory")
    ap.add_argument("--task", default="text2sql")
    ap.add_argument("-o", dest="options", action="append", default=[], metavar="KEY=VALUE", help="task option")
    ap.add_argument("--data", default=None, help="the task's data file (default: its bundled sample)")
    ap.add_argument("--batches", type=int, default=30, help="R: batches (each a fresh draw of prompts and completions)")
    ap.add_argument("--pool", type=int, default=32, help="P: fresh completions per prompt that measure the effects")
    ap.add_argument("--methods", default=",".join(m for m in METHODS if m != BF16_SAMPLED),
                    help=f"comma-separated, of {', '.join(METHODS)} (default: all but {BF16_SAMPLED}, "
                         "which changes how the batches are drawn)")
    ap.add_argument("--seed", type=int, default=0, help="LoRA init, prompt order and each batch's sampling")
    ap.add_argument("--start", default=None, metavar="CHECKPOINT",
                    help="start every method from this `mrtpo train` checkpoint's adapter (a mid-training policy; "
                         "its run's LoRA rank and modules) instead of a fresh LoRA")
    ap.add_argument("--lr", type=float, default=None, help="step size (default: the model's train lr)")
    ap.add_argument("--batch-prompts", type=int, default=None)
    ap.add_argument("--num-generations", type=int, default=None)
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="auto", help="auto: cuda when available, else cpu")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                    help="the policy's weights; float32 by default, since the effects are ratios of "
                         "probabilities that move by a few percent")
    ap.add_argument("--out", default=None, help="per-batch records (JSONL); default benchmarks/out/one-step/<task>-<model>-seed<k>.jsonl")
    ap.add_argument("--json", default=None, help="the summary (settings, rows, paired)")
    ap.add_argument("--png", default=None, help="the plot (needs matplotlib)")
    ap.add_argument("--combine", nargs="+", default=None, metavar="JSONL",
                    help="run nothing: summarise the batches of these files (the same settings but the seed)")
    return ap


def config_for(args):
    """The trainer's settings for this test: `mrtpo train`'s for the model (a built-in brings
    its train defaults, and its task options only for its own task), then the flags."""
    from mrtpo.harness.config import TrainConfig
    from mrtpo.models.builtin import EXPERIMENT_DEFAULTS, with_train_defaults
    from mrtpo.tasks.options import read_options

    given = {"model": args.model, "task": args.task, "lr": args.lr, "batch_prompts": args.batch_prompts,
             "num_generations": args.num_generations, "max_new_tokens": args.max_new_tokens}
    values = with_train_defaults({k: v for k, v in given.items() if v is not None}, EXPERIMENT_DEFAULTS)
    task_args = {**values.get("task_args", {}), **read_options(args.options)}
    return TrainConfig(**{**values, "task": args.task, "task_args": task_args, "seed": args.seed,
                          "device": args.device, "dtype": args.dtype})


def main(argv: list[str] | None = None) -> dict:
    args = parser().parse_args(argv)
    if args.combine:
        records, settings = combine(args.combine)
        return report(records, settings["methods"], settings, args)
    import random

    if args.threads:
        torch.set_num_threads(args.threads)
    from mrtpo.harness.scoring import Scorer
    from mrtpo.models.builtin import builtin_name
    from mrtpo.tasks import get_task

    cfg = config_for(args)
    task_args = cfg.task_args
    methods = [m for m in args.methods.split(",") if m]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        parser().error(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(METHODS)}")
    task = get_task(args.task, **task_args)
    examples = task.load(args.data)
    if "oracle" in methods and task.reward_spans(examples[0], "") is None:
        methods.remove("oracle")  # the task cannot say which tokens each reward is about
    model_label = builtin_name(args.model) or Path(args.model).name
    out = Path(args.out or f"benchmarks/out/one-step/{args.task}-{model_label}-seed{args.seed}.jsonl")
    settings = {"model": model_label, "task": args.task, "task_args": task_args, "batches": args.batches,
                "pool": args.pool, "batch_prompts": cfg.batch_prompts, "num_generations": cfg.num_generations,
                "max_new_tokens": cfg.max_new_tokens, "temperature": cfg.temperature, "lr": cfg.lr,
                "step_sizes": [cfg.lr], "optimizer": "AdamW, first step (every weight with a gradient moves by lr)",
                "lora_r": cfg.lora_r, "lora_alpha": cfg.lora_alpha, "loss_type": cfg.loss_type,
                "seed": args.seed, "methods": methods, "dtype": args.dtype,
                **({"sampler": "row-seeded (the trainer's)"} if BF16_SAMPLED in methods else {}),
                **({"start": _checkpoint_label(args.start)} if args.start else {})}
    done = read_records(out, settings)

    scorer = Scorer(task, cfg.verify_workers, cfg.verify_timeout, cfg.reward_weights).start()
    try:
        torch.manual_seed(args.seed)  # the one fresh LoRA every method starts from
        policy = adapted_policy(args.model, cfg, None, lora_dropout=cfg.lora_dropout,
                                lora_target_modules=cfg.lora_target_modules, device=cfg.device, dtype=cfg.dtype)
        if args.start:  # the mid-training policy every method steps from
            from mrtpo.harness.run.checkpoints import load_adapter

            load_adapter(Path(args.start), policy)
        order: list[int] = []
        rng = random.Random(args.seed)
        while len(order) < args.batches * cfg.batch_prompts:  # every example once before any repeats
            perm = list(range(len(examples)))
            rng.shuffle(perm)
            order += perm
        print(f"one-step test: {args.task} on {model_label}, {len(methods)} methods, {args.batches} batches of "
              f"{cfg.batch_prompts} x {cfg.num_generations}, pool {args.pool} per prompt; {len(done)} batches "
              f"already in {out}", flush=True)
        for r in range(len(done), args.batches):
            picked = [examples[i] for i in order[r * cfg.batch_prompts:(r + 1) * cfg.batch_prompts]]
            rec = run_batch(policy, task, scorer, picked, cfg, args.pool, methods, seed=args.seed * 100_003 + r)
            rec["batch"] = r
            append_record(out, settings, rec)
            done.append(rec)
            e = rec["effects"]
            print(f"  batch {r + 1}/{args.batches}: {rec['seconds']['batch']:.0f} s; total effect "
                  + " ".join(f"{m} {e[m]['total']:+.4f}" for m in methods), flush=True)
    finally:
        scorer.close()
    return report(done, methods, settings, args)


def _checkpoint_label(path: str) -> str:
    """A checkpoint as the settings name it: its directory and its parent's (the run)."""
    p = Path(path).resolve()
    return f"{p.parent.name}/{p.name}"


def written_settings(head: dict) -> dict:
    """The settings a batch file's first line records (files from before --dtype were float32)."""
    return {"dtype": "float32", **head.get("settings", {})}


def read_records(out: Path, settings: dict) -> list[dict]:
    """The batches a previous call with the same settings finished (all but `batches`)."""
    if not out.is_file():
        return []
    lines = out.read_text().splitlines()
    head = json.loads(lines[0]) if lines else {}
    same = {k: v for k, v in settings.items() if k != "batches"}
    if written_settings(head) != same:
        raise SystemExit(f"{out} holds batches of other settings ({head.get('settings')}); "
                         "pass another --out or remove it")
    return [json.loads(line) for line in lines[1:]]


def combine(paths: list[str]) -> tuple[list[dict], dict]:
    """(every batch of the files at `paths`, in order; their common settings with `seed` the list
    of the files' seeds and `sources` naming each file's seed, batches and seconds a batch (the
    files may come from other machines)). Files of the same seed,
    or of other settings than the first's, are refused by name: their batches would not be
    independent draws of one test."""
    records, settings, sources = [], None, []
    for name in paths:
        path = Path(name)
        lines = path.read_text().splitlines() if path.is_file() else []
        if not lines:
            raise SystemExit(f"--combine: {path} is not a batch file of one_step.py (missing or empty)")
        head = written_settings(_line(path, lines, 0))
        if not {"task", "methods", "seed"} <= set(head):
            raise SystemExit(f"--combine: {path}'s first line holds no run settings (task, methods, seed): "
                             "pass the batch files one_step.py wrote with --out, not its --json summaries")
        rest = {k: v for k, v in head.items() if k != "seed"}
        if settings is None:
            settings = rest
        elif rest != settings:
            diff = sorted(k for k in set(rest) | set(settings) if rest.get(k) != settings.get(k))
            raise SystemExit(f"--combine: {path} was run with other settings than {paths[0]} "
                             f"({', '.join(diff)}); pool only files that differ in the seed")
        if any(s["seed"] == head.get("seed") for s in sources):
            raise SystemExit(f"--combine: {path} has seed {head.get('seed')}, as an earlier file has: "
                             "the same seed draws the same batches, which are not independent")
        batches = [_line(path, lines, i) for i in range(1, len(lines))]
        seconds = [rec["seconds"]["batch"] for rec in batches]
        sources.append({"file": path.name, "seed": head.get("seed"), "batches": len(batches),
                        "seconds_per_batch": statistics.mean(seconds) if seconds else None})
        records += batches
    return records, {**settings, "seed": [s["seed"] for s in sources], "sources": sources}


def _line(path: Path, lines: list[str], i: int) -> dict:
    """Line i of a batch file as the JSON object it must be; anything else is refused naming the
    file and line."""
    try:
        value = json.loads(lines[i])
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--combine: {path} line {i + 1} is not JSON ({exc.msg}): "
                         "not a batch file of one_step.py, or damaged") from None
    if not isinstance(value, dict) or (i > 0 and not {"effects", "seconds"} <= set(value)):
        raise SystemExit(f"--combine: {path} line {i + 1} is not a {'batch' if i else 'settings'} record "
                         "of one_step.py")
    return value


def append_record(out: Path, settings: dict, record: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.is_file():
        out.write_text(json.dumps({"settings": {k: v for k, v in settings.items() if k != "batches"}}) + "\n")
    fd = os.open(out, os.O_WRONLY | os.O_APPEND)
    try:  # one write: a run killed at its budget leaves whole lines
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def common_rewards(records: list[dict], method: str) -> list[str]:
    """The rewards every batch has, in the first batch's order, `total` last: a task whose rewards
    vary per prompt (instruct: one per constraint) is summarised by its total alone."""
    names = [[r for r in rec["effects"][method] if r not in ("kl", "total")] for rec in records]
    every = [r for r in names[0] if all(r in n for n in names[1:])] if names else []
    return every + ["total"] if records else []


def bf16_summary(records: list[dict]) -> dict:
    """mrtpo-bf16-sampled's batches against mrtpo's over the records: how many completions came
    out the same, and the extremes of TRL's sampling statistics (the bf16 copy's log-probs
    against the float32 weights', the correction's per-token ratios)."""
    arms = [rec["bf16_sampled"] for rec in records if "bf16_sampled" in rec]
    stat = [a for a in arms if "sampling/sampling_logp_difference/max" in a]  # batches that stepped
    return {"same_completions": sum(a["same_completions"] for a in arms),
            "completions": sum(a["completions"] for a in arms),
            "logp_difference_mean": statistics.mean(a["sampling/sampling_logp_difference/mean"] for a in stat)
            if stat else None,
            "logp_difference_max": max((a["sampling/sampling_logp_difference/max"] for a in stat), default=None),
            "ratio_min": min((a["sampling/importance_sampling_ratio/min"] for a in stat), default=None),
            "ratio_max": max((a["sampling/importance_sampling_ratio/max"] for a in stat), default=None)}


def report(records: list[dict], methods, settings: dict, args) -> dict:
    rewards = common_rewards(records, methods[0])
    rows, paired = summarise(records, methods, rewards)
    seconds = statistics.mean(rec["seconds"]["batch"] for rec in records) if records else math.nan
    doc = {"settings": {**settings, "batches": len(records)}, "rows": rows, "paired": paired,
           "flat_batches": sum(rec["flat"] for rec in records), "seconds_per_batch": seconds,
           **({"bf16_sampled": bf16_summary(records)} if any("bf16_sampled" in rec for rec in records) else {}),
           "command": command("benchmarks.experiments.one_step", sys.argv[1:]),
           "pool_means": {r: statistics.mean([rec["pool_means"][r] for rec in records if r in rec["pool_means"]] or [math.nan])
                          for r in rewards}}
    print(f"\n{len(records)} batches ({doc['flat_batches']} where every group scored every reward alike), "
          f"{seconds:.0f} s a batch")
    print("change of E[reward] after one step (mean over batches, 95% interval):")
    for r in rewards + ["kl", "param_norm"]:
        print(f"  {r}")
        for row in rows:
            if row["reward"] == r:
                print(f"    {row['method']:<15} {row['mean']:+.5f}  [{row['low']:+.5f}, {row['high']:+.5f}]")
    print("paired differences a - b:")
    for p in paired:
        print(f"  {p['a']} - {p['b']:<15} {p['reward']:<20} {p['mean']:+.5f}  [{p['low']:+.5f}, {p['high']:+.5f}]"
              f"  {verdict(p)}")
    doc = write_result(args.json, "one-step", doc)
    if args.png and records:
        plot(rows, methods, rewards, Path(args.png),
             f"{settings['task']} on {settings['model']}: one step, {len(records)} batches")
    return doc


if __name__ == "__main__":
    main()
