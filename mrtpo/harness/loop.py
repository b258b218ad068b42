"""The training loop of `mrtpo train`: setup, loop, save. Read it top to bottom.

Each step: take B prompts, sample G completions of each from P0, score every completion
with every reward of its task (scores [N, K], N = B*G), replay the completions under the
block contexts to get per-reward token distances (MRTPO), turn scores into per-reward
credit (GRPO or GDPO, optionally SAW-weighted), place the credit on tokens, and take one
clipped policy-gradient step (TRL's loss definitions). Then measure the held-out examples
(every --eval-every steps and after the last: the official metric and the rewards' eval/...
metrics from one greedy generation), log, checkpoint.

What it deliberately does not do: no transformers.Trainer, no reward model, no value head,
no vLLM. Under `accelerate launch` it runs data-parallel: each process takes a share of the
prompts, scores are gathered so credit is the whole batch's, gradients are averaged
(distributed.py); for large models use the TRL integration (mrtpo.integrations.trl).

    mrtpo train --model PATH --task toolcall --steps 3
    python -c "from mrtpo.harness import TrainConfig, train; train(TrainConfig(model=..., task=...))"
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

import mrtpo.harness.run.checkpoints as checkpoints
import mrtpo.harness.run.heldout as heldout
from mrtpo.advantages import estimate
from mrtpo.harness.config import ConfigError, TrainConfig
from mrtpo.harness.data import load_splits, prompts_for_step
from mrtpo.harness.distributed import Distributed, is_main_process, local_credit
from mrtpo.harness.metrics import (PhaseTimer, completion_metrics, mrtpo_metrics, reward_metrics,
                                   timeout_metrics, timeout_warnings, tokens_seen)
from mrtpo.harness.policy import (check_model_arg, load_policy, low_precision_fold, resolve_device, resolve_dtype,
                                  resolve_rollout_dtype)
from mrtpo.harness.rollout import compiled_decoding, sample
from mrtpo.harness.run.completions import records as completion_records
from mrtpo.harness.run.files import JsonlLog, check_run_dir, clean
from mrtpo.harness.run.lock import RunLock
from mrtpo.harness.run.trackers import Trackers, parse_report_to
from mrtpo.harness.scoring import Scorer
from mrtpo.harness.token_credit import logs_completions, mrtpo_step, policy_replayer, spans_problem
from mrtpo.harness.update import NonFiniteError, update
from mrtpo.models.builtin import portable_name
from mrtpo.tasks import get_task

logger = logging.getLogger(__name__)  # (`log` names a JsonlLog in _train)


@dataclass
class RunResult:
    run_dir: Path
    history: list[dict[str, Any]]  # one metrics record per step, as in metrics.jsonl
    config: TrainConfig
    policy: Any = None  # the trained Policy (model, tokenizer), for use in the same process
    heldout: dict[str, Any] | None = None  # heldout.json's content (--heldout with a `measure`), else None


def as_given(model: str) -> str:
    """The `model_path` of a caller whose `--model` is already a directory or a hub id."""
    return model


def train(cfg: TrainConfig, on_step: Callable[[dict[str, Any]], None] | None = None,
          on_start: Callable[[int], None] | None = None,
          model_path: Callable[[str], str] = as_given, measure: heldout.Measure | None = None,
          on_phase: Callable[[str], None] | None = None) -> RunResult:
    """Train as `cfg` says; `on_start(first_step)`, `on_step(record)` and `on_phase(text)` (a
    phase begins or ends: the held-out measurements) feed a progress display.

    `measure` is the held-out measurements' metric and generation (mrtpo.harness.run.heldout;
    `mrtpo train` passes `mrtpo.evaluation.heldout.measure`, the official one): with
    `cfg.heldout` > 0 the policy is measured on the held-out examples before step 1, after every
    `cfg.eval_every` steps and after the last step, into heldout.json, and the same responses'
    rewards go into that step's metrics as eval/... Without it the examples are still held out
    (the run trains on the same data either way) and not measured.

    `model_path(cfg.model)` is asked once, on the main process, for what `from_pretrained`
    loads: the trainer knows built-in policies only by name (mrtpo.models.builtin) and never
    builds one. `mrtpo.harness.train` and `mrtpo train` pass the one that does
    (`mrtpo.models.builds.resolve_model`). The run directory is locked for the whole run
    (mrtpo.harness.run.lock): a second run started in it is refused, naming this one."""
    cfg.check()  # a field changed since construction (cfg.lr = ...) is checked before anything loads
    check_model_arg(cfg.model)
    with RunLock(cfg.run_dir) if is_main_process() else contextlib.nullcontext():
        return _train(cfg, on_step, on_start, model_path, measure, on_phase or (lambda text: None))


def _train(cfg: TrainConfig, on_step, on_start, path_of: Callable[[str], str], measure,
           on_phase: Callable[[str], None]) -> RunResult:
    # ------------------------------------------------------------------------------- setup
    if not cfg.task:
        from mrtpo.tasks import available_tasks

        raise ConfigError(f"--task is required; available tasks: {', '.join(available_tasks())}")
    dist = Distributed.from_env(cfg.batch_prompts)  # data-parallel under `accelerate launch`; else one process
    run_dir = dist.run_on_main(lambda: prepare_run_dir(cfg))
    # the one question about the model: what to load (a built-in name becomes its cached build)
    model_path = dist.run_on_main(lambda: path_of(cfg.model))
    checkpoints.seed_everything(cfg.seed)
    task = get_task(cfg.task, **cfg.task_args)
    splits = load_splits(task, cfg.data, cfg.eval_data, cfg.heldout)
    train_set = splits.train
    check_reward_weights(task, train_set, cfg.reward_weights)
    problem = spans_problem(task) if cfg.mrtpo and cfg.mrtpo_weights == "spans" else None
    if problem:  # before the model loads
        raise ConfigError(problem)
    # the verifier pool forks now, before the model is loaded (a small process to copy)
    scorer = Scorer(task, cfg.verify_workers, cfg.verify_timeout, cfg.reward_weights).start()
    resume_from = dist.run_on_main(lambda: checkpoints.resume_point(run_dir)) if cfg.resume else None
    device = resolve_device(dist.policy_device(cfg.device))  # --rollout-dtype refused here, before loading
    rollout_dtype = resolve_rollout_dtype(cfg.rollout_dtype, device, resolve_dtype(cfg.dtype, device))
    policy = load_policy(
        model_path, lora=cfg.lora, lora_r=cfg.lora_r, lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout, lora_target_modules=cfg.lora_target_modules,
        device=dist.policy_device(cfg.device), dtype=cfg.dtype, gradient_checkpointing=cfg.gradient_checkpointing,
        keep_reference=cfg.beta > 0, base_name=portable_name(cfg.model, model_path),
        weights_from=resume_from / "model" if resume_from is not None and not cfg.lora else None,
        fold_copy=low_precision_fold(cfg.low_precision_fold, device))
    replayer = policy_replayer(policy)
    compiled = compiled_decoding(cfg.compiled_decoding, policy.device)  # CUDA graphs for decoding
    # the rollout samples from other weights than the update's (a bf16 copy, a folded copy):
    # it records each drawn token's log-prob, and the update corrects for the gap
    sampled_apart = rollout_dtype is not None or policy.folds_a_copy
    compiled_shapes: set[tuple[int, int]] = set()  # the shapes compiled so far (each compiles once)
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    start = checkpoints.load(resume_from, policy, optimizer) if resume_from is not None else 0
    dist.broadcast_parameters(policy.trainable_parameters())  # every process starts from rank 0's weights
    metrics_log = JsonlLog(run_dir / "metrics.jsonl")
    completions_log = JsonlLog(run_dir / "completions.jsonl")
    if dist.is_main:  # one process writes the logs and checkpoints
        for log in (metrics_log, completions_log):
            log.truncate_after(start)  # what a crashed run wrote after its last checkpoint
    dist.barrier()
    history = metrics_log.read()
    trackers = Trackers(parse_report_to(cfg.report_to) if dist.is_main else [], run_dir, cfg.to_dict())
    G = cfg.num_generations
    warned: set[str] = set()  # rewards whose timeouts were already said on the console
    held = splits.heldout if measure is not None and dist.is_main else []
    if cfg.heldout and measure is None and dist.is_main:
        logger.info("--heldout %d: no `measure` was given (mrtpo.harness.train(cfg, measure=...)), so the "
                    "held-out examples are left out of training and not measured (nor is --eval-every)", cfg.heldout)
    held_doc = heldout.read(run_dir) if held and cfg.resume else {}  # a new run measures afresh
    if held and start > 0 and not heldout.has(held_doc, "before"):  # it cannot go back to step 0
        on_phase(f"held-out before training: not measured (the run resumes at step {start} and "
                 f"{heldout.FILE} holds no measurement from its start)")
    if held and heldout_due(cfg, start) and not heldout.measured(held_doc, start):
        # step 0: before step 1; a resumed run: the policy it resumes from, where its point is
        # missing (the after too, when it resumes at the last step)
        held_doc, _ = _measure_heldout(measure, policy, task, held, scorer, cfg, run_dir, held_doc, start,
                                       splits.heldout_source, on_phase)
    dist.barrier()
    if on_start is not None and dist.is_main:
        on_start(start)

    # -------------------------------------------------------------------------------- loop
    try:
        for step in range(start + 1, cfg.steps + 1):
            timer = PhaseTimer()
            picks = prompts_for_step(len(train_set), step - 1, cfg.batch_prompts, cfg.seed)
            examples = [train_set[i] for i in dist.shard(picks)]  # this process's share of the B prompts
            rows = dist.rows(len(examples) * G)  # its completions' rows in the global batch

            # the adapter folded into the weights once for the rollout and the replay (Policy.merged);
            # unfolded before the update, which trains it
            with contextlib.ExitStack() as folded:
                with timer("generate"):  # each row samples from its own seeded generator
                    with torch.no_grad():
                        folded.enter_context(policy.merged())
                    rollout = sample(policy, task, examples, G, temperature=cfg.temperature,
                                     top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens,
                                     logits_processor=dist.sampler(cfg.seed, step, rows.start, cfg.temperature,
                                                                   cfg.top_p, record_logps=sampled_apart),
                                     dtype=rollout_dtype, compiled=compiled)
                if rollout.compiled_shape is not None and rollout.compiled_shape not in compiled_shapes:
                    compiled_shapes.add(rollout.compiled_shape)  # a new shape compiled: that is its time
                    timer.move("generate", "compile")
                with timer("verify"):  # own rows on the global reward columns; the whole batch's scores
                    scored, batch_scored = dist.gather_scores(
                        scorer.score(rollout.examples, rollout.responses))  # scores [n, K], [N, K]
                mask = rollout.response_mask()  # [N, T]
                # credit per reward (computed on the whole batch's scores, so GDPO's and SAW's batch
                # statistics are the ones a single process would see; each process keeps its own rows)
                credit = local_credit(estimate(batch_scored.scores, G, cfg.advantage, weights=batch_scored.weights,
                                               saw=cfg.saw, floors=batch_scored.floors, scale=cfg.scale_rewards), rows)
                logs = logs_completions(step, cfg.log_completions_every)
                with timer("replay"):  # then on tokens (MRTPO): the mean over a response's tokens
                    # stays the estimator's advantage; only where it lands changes
                    placed = mrtpo_step(cfg.mrtpo_weights if cfg.mrtpo else None, replayer, task, rollout, scored,
                                        credit, mask, lam=cfg.mrtpo_lambda, temperature=cfg.temperature, logs=logs,
                                        replay_zero_credit=cfg.replay_zero_credit, seed=cfg.seed, step=step)
            advantages, q = placed.advantages, placed.distances  # [N, T], [N, K, T]

            lr = cfg.lr * min(1.0, step / cfg.warmup_steps) if cfg.warmup_steps else cfg.lr
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss_mask = mask * (1.0 - torch.tensor(rollout.truncated, dtype=mask.dtype)).unsqueeze(-1) \
                if cfg.mask_truncated_completions else None  # [N, T]
            with timer("update"), _stop_if_not_finite(cfg, step):
                stats = update(policy, optimizer, rollout.batch(policy.pad_id, policy.device), advantages,
                               temperature=cfg.temperature, loss_type=cfg.loss_type,
                               epsilon=cfg.epsilon, epsilon_high=cfg.epsilon_high, beta=cfg.beta,
                               num_iterations=cfg.num_iterations, grad_accum=cfg.grad_accum,
                               max_grad_norm=cfg.max_grad_norm,
                               max_completion_length=cfg.max_new_tokens, loss_mask=loss_mask,
                               sampling_logps=rollout.sampling_logp_matrix(),
                               is_mode=cfg.importance_sampling_mode if cfg.importance_sampling_correction else None,
                               is_clip_max=cfg.importance_sampling_clip_max, dist=dist)

            record: dict[str, Any] = {"step": step, "epoch": step * cfg.batch_prompts / len(train_set)}
            record.update(reward_metrics(batch_scored.scores, batch_scored.names, batch_scored.weights, G))
            record.update(timeout_metrics(batch_scored))
            record.update(completion_metrics(dist.gather_objects([len(r) for r in rollout.response_ids]),
                                             dist.gather_objects(rollout.truncated)))
            record["num_tokens"] = tokens_seen(_tokens_so_far(history, metrics_log.path),
                                               dist.gather_objects([len(p) for p in rollout.prompt_ids]),
                                               dist.gather_objects([len(r) for r in rollout.response_ids]))
            record.update(stats)
            record["learning_rate"] = lr
            if q is not None:
                record.update(mrtpo_metrics(dist.gather_rows(q), dist.gather_rows(mask), scored.names,
                                            dist.gather_rows(credit.per_reward)))

            if logs:
                records = dist.gather_objects(completion_records(step, rollout, scored, placed, policy.tokenizer))
                if dist.is_main:
                    completions_log.write(records)
            if held and heldout_due(cfg, step):  # before this step's line and checkpoint
                if heldout.measured(held_doc, step):  # a step trained again on --resume: its point stands
                    rewards = heldout.rewards_at(held_doc, step)
                else:
                    with timer("eval"):
                        held_doc, rewards = _measure_heldout(measure, policy, task, held, scorer, cfg, run_dir,
                                                             held_doc, step, splits.heldout_source, on_phase)
                record.update(rewards)  # eval/...: the task's rewards on the measured responses

            record.update(timer.totals())
            record = clean(record)
            history.append(record)
            if dist.is_main:
                for line in timeout_warnings(record, warned):  # a reward that keeps timing out
                    logger.warning(line)
                metrics_log.write([record])
                trackers.log(record)  # --report-to: the same record
                if (cfg.save_every and step % cfg.save_every == 0) or step == cfg.steps:
                    checkpoints.save(run_dir, step, policy, optimizer, keep_last=cfg.save_total_limit)
            if on_step is not None and dist.is_main:
                on_step(record)
        # the last step was measured and checkpointed inside the loop (adapter, optimizer, RNG, step)
    finally:
        scorer.close()
        trackers.close()
    return RunResult(run_dir, history, cfg, policy, held_doc or None)


# ------------------------------------------------------------------------------ helpers
@contextlib.contextmanager
def _stop_if_not_finite(cfg: TrainConfig, step: int):
    """A NonFiniteError from the update, re-raised with the step and what to change. It leaves
    the loop before this step logs or checkpoints anything: the run directory keeps only the
    steps before it, which trained on finite numbers."""
    try:
        yield
    except NonFiniteError as exc:
        raise NonFiniteError(
            f"step {step}: {exc}, so the run stopped; nothing of this step was saved (checkpoints "
            f"of earlier steps are kept). Training diverged: lower --lr (now {cfg.lr:g}), "
            f"--lora-alpha (now {cfg.lora_alpha:g}) or --beta (now {cfg.beta:g}), keep "
            f"--max-grad-norm on (now {cfg.max_grad_norm:g}), and check that --reward-weight and "
            "the rewards' scores are moderate numbers; then start a new run.") from exc


def prepare_run_dir(cfg: TrainConfig) -> Path:
    """Create (or, with --resume, reopen) the run directory and save the resolved config.

    Refuses a run directory whose run files are links or of the wrong kind (runfiles); on
    --resume, first restores a deleted `checkpoints/run-id`, counts only this run's own
    checkpoints toward the step reached, and reads both logs, so a damaged line is named
    before the model loads."""
    run_dir = cfg.run_dir
    check_run_dir(run_dir)
    if cfg.resume:
        if not (run_dir / "config.yaml").is_file():
            raise ConfigError(f"--resume: {run_dir} is not a run directory (no config.yaml)")
        checkpoints.restore_run_id(run_dir)
        done = checkpoints.reached_step(run_dir)
        if done > cfg.steps:
            raise ConfigError(f"--resume --steps {cfg.steps}: the run in {run_dir} has already "
                              f"reached step {done}; pass --steps {done + 1} or more to train on")
        metrics = JsonlLog(run_dir / "metrics.jsonl")
        _tokens_so_far(metrics.read(), metrics.path)
        JsonlLog(run_dir / "completions.jsonl").read()
        checkpoints.clean_leftovers(run_dir)  # safe: this process holds the run's lock
    elif checkpoints.complete_checkpoints(run_dir) or (run_dir / "metrics.jsonl").exists():
        raise ConfigError(f"{run_dir} already holds a run; pass --resume to continue it, or "
                          "choose another --output-dir / --run-name")
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg.save(run_dir / "config.yaml")
    return run_dir


def _tokens_so_far(history: list[dict[str, Any]], path: Path) -> int:
    """`num_tokens` of the last logged step (0 before the first); a ConfigError naming the
    step when a hand edit made it something other than a count."""
    previous = history[-1].get("num_tokens", 0) if history else 0
    if not isinstance(previous, int) or isinstance(previous, bool) or previous < 0:
        raise ConfigError(f"{path}, step {history[-1]['step']}: num_tokens is {previous!r}, "
                          "not a token count; fix or remove that line to resume")
    return previous


def check_reward_weights(task, examples, overrides: dict[str, float]) -> None:
    if not overrides:
        return
    known = {r.name for ex in examples for r in task.rewards(ex)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"--reward-weight names {', '.join(unknown)}, which task {task.name!r} "
                          f"does not have; its rewards: {', '.join(sorted(known))}")


def heldout_due(cfg: TrainConfig, step: int) -> bool:
    """Whether the held-out examples are measured at `step`: 0 (before step 1), every
    --eval-every steps, and the last step."""
    return step in (0, cfg.steps) or bool(cfg.eval_every and step % cfg.eval_every == 0)


def _measure_heldout(measure, policy, task, examples, scorer: Scorer, cfg: TrainConfig, run_dir: Path,
                     doc: dict, step: int, source: str, on_phase: Callable[[str], None]) -> tuple[dict, dict]:
    """One held-out measurement of the policy after `step` steps, said as a phase: the official
    metric and the task's rewards on the same greedy responses (`held_out_rewards`), entered
    into heldout.json (a point of its curve, and at step 0 and the last step the metrics'
    before and after, with the responses' texts). Returns the new document and the rewards' eval/... metrics."""
    when = "before" if step == 0 else "after" if step == cfg.steps else None
    label = f"held-out {when} training" if when else f"held-out at step {step}"
    on_phase(f"{label}: {len(examples)} examples, greedy, the task's official metric")
    result = heldout.run(measure, policy, task, examples, cfg.max_new_tokens, label)
    rewards = held_out_rewards(scorer, examples, result.responses) if result.responses is not None else {}
    on_phase(f"{label}: {heldout.summary(result.values)} ({result.seconds:.1f} s)")
    meta = {"examples": len(examples), "example_ids": [ex.id for ex in examples], "source": source,
            "max_new_tokens": cfg.max_new_tokens, "greedy": True, "every": cfg.eval_every,
            **({f"{when}_step": step} if when else {})}
    texts = [r["text"] for r in result.responses] if when and result.responses is not None else None
    doc = heldout.add_point(heldout.record(doc, when, result.values, meta), step, result.values,
                            result.per_example, rewards, texts)  # the texts at the before and after only
    heldout.write(run_dir, doc)
    return doc, rewards


def held_out_rewards(scorer: Scorer, examples, responses: list[dict]) -> dict[str, float]:
    """The task's rewards on the held-out responses (`{"text", "tokens", "truncated"}` each, as
    the measure generated them) -> TRL's metric names under eval/: `eval/reward`,
    `eval/rewards/<name>/mean|std`, `eval/completions/...` (with --reward-weight's weights, and
    the scorer's verifier deadline)."""
    scored = scorer.score(list(examples), [r["text"] for r in responses])
    out = reward_metrics(scored.scores, scored.names, scored.weights, group_size=1, prefix="eval/")
    out.update(completion_metrics([int(r["tokens"]) for r in responses], [bool(r["truncated"]) for r in responses],
                                  prefix="eval/"))
    return out
