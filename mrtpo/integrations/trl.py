"""MRTPO inside TRL's GRPOTrainer: a registry task's rewards, GDPO/GRPO credit, token advantages.

`MRTPOGRPOTrainer` is a `trl.GRPOTrainer` that trains on a mrtpo task. Generation
(transformers or vLLM), the loss, DeepSpeed / FSDP, multi-node launches, logging and
checkpoints stay TRL's. Per generation batch it changes four things:

1. rewards: each reward of the task is a TRL reward function named after it (`TaskReward`),
   so TRL logs `rewards/<name>/mean|std`; on an example the reward does not apply to (K
   varies per prompt) it returns None, TRL's "not applicable" (NaN in the gathered scores);
2. credit: on the scores TRL gathers from every process ([N, K]), `mrtpo.advantages.estimate`
   computes per-reward credit with the estimator TRL's `multi_objective_aggregation` names
   ("normalize_then_sum" = GDPO, "sum_then_normalize" = GRPO with TRL's `scale_rewards`),
   optionally SAW-weighted; each process keeps its own rows;
3. and 4., MRTPO's step: each process hands its own completions, scores and credit to
   `mrtpo.harness.token_credit.mrtpo_step`, the step `mrtpo train` takes too (the replay under
   P_all and every P_without_k, or the `mrtpo_weights` control; zero-credit pairs skipped; the
   placement), -> token advantages [B, T], handed to TRL as the batch's `advantages` (TRL
   >= 0.26 takes [B, T] in `_compute_loss`).

With `mrtpo=False` every token carries its response's advantage, which is TRL's own
advantage for the same aggregation (the tests check this). The mean of a response's token
advantages is that advantage in both cases: MRTPO only moves credit between tokens.

Refused: TRL < 1.7, the lowest version tested (pyproject.toml says why; below 0.26 the loss
unsqueezes the advantages unconditionally and broadcasts a [B, T] tensor to [B, B, T] without
an error) and `use_liger_kernel` (Liger's fused GRPO loss,
where TRL has it, takes one advantage per sequence). The first loss computation runs under
a guard that checks every tensor TRL computes directly from the advantages (the per-token
surrogate terms, the clip masks) is [B, T].

    from peft import LoraConfig
    from trl import GRPOConfig
    from mrtpo.integrations.trl import MRTPOGRPOTrainer

    args = GRPOConfig(output_dir="runs/trl-toolcall", multi_objective_aggregation="normalize_then_sum",
                      num_generations=8, per_device_train_batch_size=8, max_completion_length=256)
    trainer = MRTPOGRPOTrainer("Qwen/Qwen2.5-0.5B-Instruct", task="toolcall", args=args,
                               peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    trainer.train()
"""
from __future__ import annotations

import contextlib
import inspect
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch.overrides import TorchFunctionMode

from mrtpo.advantages import Credit, estimate
from mrtpo.contexts import model_positions
from mrtpo.harness.distributed import local_credit
from mrtpo.harness.rollout import Rollout
from mrtpo.harness.scoring import Scored, reward_names
from mrtpo.harness.token_credit import WEIGHT_SOURCES, Replayer, TokenCredit, logs_completions, mrtpo_step
from mrtpo.tasks import TaskLoadError, TaskNotFound, get_task
from mrtpo.tasks.base import Example, Task, Verdict
from mrtpo.tasks.contract import checked_verify

MIN_TRL = "1.7"  # the floor pyproject.toml declares and .ci/run tests (why: its comment there)


def _require_trl():
    try:
        import trl
    except ImportError as exc:
        raise ImportError(f'mrtpo.integrations.trl needs TRL: pip install "mrtpo[trl]" (trl>={MIN_TRL})') from exc
    from packaging.version import Version

    if Version(trl.__version__) < Version(MIN_TRL):
        raise ImportError(
            f"mrtpo.integrations.trl needs trl>={MIN_TRL}, found {trl.__version__}: the lowest TRL tested "
            "with it (before 0.26, GRPOTrainer unsqueezes the advantages and broadcasts MRTPO's [B, T] "
            "token advantages to [B, B, T] without an error; before 1.7 it fails at import with "
            f"transformers 5 or lacks settings the launcher reads). Upgrade: pip install -U 'trl>={MIN_TRL}'")
    return trl


_require_trl()
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.extras.profiling import profiling_context  # noqa: E402
from trl.models import unwrap_model_for_generation  # noqa: E402

INDEX_COLUMN = "mrtpo_index"  # the dataset column that points each row at its Example


# ------------------------------------------------------------------------------------ rewards
class _BatchState:
    """What the reward functions learn about the batch TRL is scoring, for the replay's blocks."""

    def __init__(self) -> None:
        self.tokenizer = None  # set by the trainer once TRL has loaded it
        self.verdicts: dict[str, list[Verdict | None]] = {}  # reward name -> one per row
        self._texts: tuple[int, list[str]] | None = None

    def start(self) -> None:
        self.verdicts = {}
        self._texts = None

    def texts(self, completions: list, completion_ids: list | None) -> list[str]:
        """The completions as the verifiers read them: the sampled ids decoded, special tokens
        dropped (as `mrtpo train` does); TRL's text when no tokenizer or ids are at hand."""
        if self.tokenizer is None or completion_ids is None:
            return [c if isinstance(c, str) else (c[-1]["content"] if c else "") for c in completions]
        if self._texts is None or self._texts[0] != id(completion_ids):
            self._texts = (id(completion_ids), [self.tokenizer.decode(ids, skip_special_tokens=True)
                                                for ids in completion_ids])
        return self._texts[1]


class TaskReward:
    """One reward of a task as a TRL reward function -> one score per completion, or None.

    Called by TRL as `f(prompts=..., completions=..., completion_ids=..., mrtpo_index=..., ...)`;
    `mrtpo_index` (a dataset column) names each row's example. None where the reward does not
    apply to the example. A reward that raises or breaks the Verdict contract is a
    programming error and stops training with a `RewardError` naming it (bad model output
    scores the reward's floor instead, by the verifier's own contract).
    """

    def __init__(self, name: str, task: Task, examples: Sequence[Example], state: _BatchState):
        self.__name__ = name  # TRL logs rewards/<__name__>/mean
        self.task, self.examples, self.state = task, examples, state

    def __call__(self, prompts, completions, completion_ids=None, **kwargs) -> list[float | None]:
        index = kwargs.get(INDEX_COLUMN)
        if index is None:
            raise ValueError(f"reward {self.__name__!r} needs the dataset column {INDEX_COLUMN!r}; build the "
                             "dataset with mrtpo.integrations.trl.task_dataset(task, examples)")
        scores: list[float | None] = []
        verdicts: list[Verdict | None] = []
        for i, text in zip(index, self.state.texts(completions, completion_ids)):
            example = self.examples[i]
            rewards = self.task.rewards(example)
            names = reward_names(rewards)
            if self.__name__ not in names:
                scores.append(None)
                verdicts.append(None)
                continue
            reward = rewards[names.index(self.__name__)]
            verdict = checked_verify(self.task, reward, example, text)
            scores.append(float(verdict.score))
            verdicts.append(verdict)
        self.state.verdicts[self.__name__] = verdicts
        return scores


def task_rewards(task: Task, examples: Sequence[Example], state: _BatchState | None = None
                 ) -> tuple[list[TaskReward], list[float], list[float]]:
    """(reward functions, weights, floors): one per reward name of the examples, first seen first."""
    state = state or _BatchState()
    order: dict[str, tuple[float, float]] = {}
    for ex in examples:
        for reward, name in zip(task.rewards(ex), reward_names(task.rewards(ex))):
            order.setdefault(name, (float(reward.weight), float(reward.floor)))
    funcs = [TaskReward(name, task, examples, state) for name in order]
    return funcs, [w for w, _ in order.values()], [f for _, f in order.values()]


def task_dataset(task: Task, examples: Sequence[Example]):
    """A conversational TRL dataset: `prompt` = P0 as chat messages, `mrtpo_index` = the row's example."""
    from datasets import Dataset

    return Dataset.from_list([{"prompt": task.messages(ex), INDEX_COLUMN: i} for i, ex in enumerate(examples)])


# ------------------------------------------------------------------------------------ trainer
@dataclass
class MRTPOBatch:
    """The last training generation batch, for inspection (this process's rows unless noted)."""

    scores: torch.Tensor  # [N, K] every process's scores, as TRL gathered them
    credit: Credit  # per-reward credit of the whole batch ([N, K], [N])
    rows: slice  # this process's rows of the whole batch
    trl_advantages: torch.Tensor  # [B] TRL's own response-level advantages for these rows
    advantages: torch.Tensor  # [B, T] the token advantages handed to TRL
    mask: torch.Tensor  # [B, T] the loss mask
    distances: torch.Tensor | None  # [B, K, T] JS distances (None with mrtpo=False)


class _AdvantageShapeGuard(TorchFunctionMode):
    """Raises if a tensor computed directly from the advantages is not [B, T].

    TRL multiplies the advantages into the per-token surrogate (`coef * advantages`) and
    compares them for the clip masks; a TRL that unsqueezed a [B, T] advantage would make
    these [B, B, T] (or [B, 1, T]) and train on a silently wrong loss.
    """

    def __init__(self, advantages: torch.Tensor):
        super().__init__()
        self.advantages = advantages

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        uses = any(a is self.advantages for a in args) or any(v is self.advantages for v in (kwargs or {}).values())
        if uses and isinstance(out, torch.Tensor) and out.dim() > 0 and out.shape != self.advantages.shape:
            raise AssertionError(
                f"TRL computed a {tuple(out.shape)} tensor from the {tuple(self.advantages.shape)} token "
                f"advantages ({getattr(func, '__name__', func)}); the per-token loss must stay [B, T]. "
                f"This TRL does not take [B, T] advantages: use trl>={MIN_TRL}.")
        return out


class MRTPOGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer on a mrtpo task, with MRTPO token credit (see the module docstring).

    task: a registered task name (`mrtpo tasks ls`) or a Task; task_args: its constructor's
    keyword arguments. data: the task's data file (default: its bundled sample); examples:
    Examples to train on instead. mrtpo: place credit on tokens by replay (False: every token
    gets the response's advantage). mrtpo_lambda: blend with uniform weights (1 = pure MRTPO).
    mrtpo_weights: where the token weights come from, as `mrtpo train --mrtpo-weights`: "replay",
    "shuffled", "spans" or "single" (mrtpo.harness.token_credit.WEIGHT_SOURCES).
    saw: "off", "reward" (with GRPO) or "advantage" (with GDPO). The estimator follows
    `args.multi_objective_aggregation`; `args.reward_weights` defaults to the task's weights.
    log_completions_every: every completion of step 1 and of every Nth step goes to
    `<output_dir>/completions.jsonl` in `mrtpo train`'s format (`mrtpo credit OUTPUT_DIR`); 0 = never.
    replay_zero_credit: also replay the rewards whose credit on a completion is 0 on every step
    (default: skipped, except on steps that log completions; the advantages are the same up
    to float rounding of the replay's batching).
    Other keyword arguments go to GRPOTrainer (peft_config, callbacks, eval_dataset...).
    """

    def __init__(self, model, task: str | Task, args: GRPOConfig | None = None, *,
                 task_args: dict[str, Any] | None = None, data: str | None = None,
                 examples: Sequence[Example] | None = None, mrtpo: bool = True, mrtpo_lambda: float = 1.0,
                 mrtpo_weights: str = "replay", saw: str = "off", log_completions_every: int = 10, replay_zero_credit: bool = False,
                 train_dataset=None, **kwargs):
        if "reward_funcs" in kwargs:
            raise TypeError("MRTPOGRPOTrainer takes its rewards from the task; drop reward_funcs (or use "
                            "trl.GRPOTrainer directly)")
        args = args if args is not None else GRPOConfig(output_dir=f"{task if isinstance(task, str) else task.name}-mrtpo")
        if args.use_liger_kernel:
            raise ValueError(
                "use_liger_kernel=True is not supported with MRTPO: Liger's fused GRPO loss takes one "
                "advantage per sequence, while MRTPO hands TRL one per token ([B, T]). Set "
                "use_liger_kernel=False; for fused layer kernels use model_init_kwargs={'use_kernels': True}.")
        estimators = {"normalize_then_sum": "gdpo", "sum_then_normalize": "grpo"}
        if args.multi_objective_aggregation not in estimators:
            raise ValueError(f"multi_objective_aggregation {args.multi_objective_aggregation!r}: MRTPO knows "
                             f"{', '.join(estimators)}")
        estimator = estimators[args.multi_objective_aggregation]
        if saw not in ("off", "reward", "advantage") or (saw, estimator) in (("reward", "gdpo"), ("advantage", "grpo")):
            raise ValueError(f"saw={saw!r} with multi_objective_aggregation={args.multi_objective_aggregation!r}: "
                             "use saw='reward' with sum_then_normalize (GRPO-h), saw='advantage' with "
                             "normalize_then_sum (GDPO-h), or saw='off'")
        if not 0.0 <= mrtpo_lambda <= 1.0:
            raise ValueError(f"mrtpo_lambda must be in [0, 1], got {mrtpo_lambda}")
        if mrtpo_weights not in WEIGHT_SOURCES:
            raise ValueError(f"mrtpo_weights must be one of {', '.join(WEIGHT_SOURCES)}, got {mrtpo_weights!r}")

        if isinstance(task, str):
            task = get_task(task, **(task_args or {}))
        if examples is None:
            from mrtpo.harness.data import load_examples

            examples = load_examples(task, data)
        examples = list(examples)
        state = _BatchState()
        funcs, weights, floors = task_rewards(task, examples, state)
        if args.reward_weights is None:
            args.reward_weights = weights
        super().__init__(model=model, reward_funcs=funcs, args=args,
                         train_dataset=train_dataset if train_dataset is not None else task_dataset(task, examples),
                         **kwargs)
        launched = int(os.environ.get("WORLD_SIZE", "1"))
        if launched > 1 and self.accelerator.num_processes != launched:  # each would train alone
            raise ValueError(f"launched as {launched} processes but accelerate runs {self.accelerator.num_processes}; "
                             "on a machine without GPUs pass use_cpu=True (--use_cpu) so they join one gloo group")
        state.tokenizer = getattr(self.processing_class, "tokenizer", self.processing_class)
        self.mrtpo_task, self.mrtpo_examples, self._mrtpo_state = task, examples, state
        self._mrtpo_model_name = model if isinstance(model, str) else getattr(getattr(model, "config", None),
                                                                               "_name_or_path", None)
        self.mrtpo_enabled, self.mrtpo_lambda, self.mrtpo_saw = mrtpo, mrtpo_lambda, saw
        self.mrtpo_weights = mrtpo_weights
        self.mrtpo_estimator = estimator
        self.mrtpo_replay_zero_credit = replay_zero_credit
        if log_completions_every < 0:
            raise ValueError(f"log_completions_every must be >= 0, got {log_completions_every}")
        self.mrtpo_log_completions_every = log_completions_every
        self.mrtpo_floors = torch.tensor(floors)  # [K]
        self.last_batch: MRTPOBatch | None = None
        self._gathered_scores: torch.Tensor | None = None
        self._completions_logged: int | None = None  # the last step whose completions were logged
        self._shape_checked = False

    # -------------------------------------------------------------------- TRL's hook points
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._mrtpo_state.start()
        scores = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)  # [N, K] gathered
        self._gathered_scores = scores
        return scores

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        if not self.model.training:  # evaluation keeps TRL's response-level advantages
            return out
        scores = self._gathered_scores.detach().float().cpu()  # [N, K]
        credit = self._credit(scores)  # whole batch
        b = out["completion_ids"].shape[0]
        rows = slice(self.accelerator.process_index * b, (self.accelerator.process_index + 1) * b)
        mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
        mask = mask.detach().float().cpu()  # [B, T]
        mine = local_credit(credit, rows)
        step = self.state.global_step + 1  # the optimizer step this generation batch feeds
        # once per step: a step may take several generation batches
        logs = logs_completions(step, self.mrtpo_log_completions_every) and step != self._completions_logged
        rollout, scored = self._batch(inputs, out, scores[rows])
        placed = mrtpo_step(self.mrtpo_weights if self.mrtpo_enabled else None, self._replayer(), self.mrtpo_task,
                            rollout, scored, mine, mask, lam=self.mrtpo_lambda, temperature=self.temperature,
                            logs=logs, replay_zero_credit=self.mrtpo_replay_zero_credit, seed=self.args.seed,
                            step=step)
        advantages, q = placed.advantages, placed.distances  # [B, T], [B, K, T]
        trl_advantages = out["advantages"]  # [B]
        out["advantages"] = advantages.to(trl_advantages.device)
        self._log_mrtpo(credit, q, mask, mine.per_reward)
        self.last_batch = MRTPOBatch(scores, credit, rows, trl_advantages.detach().cpu(), advantages, mask, q)
        if logs:
            self._completions_logged = step
            self._log_completions(step, rollout, scored, placed, rows)
        return out

    def _compute_loss(self, model, inputs):
        advantages = inputs["advantages"]
        if self.model.training and tuple(advantages.shape) != tuple(inputs["completion_mask"].shape):
            raise AssertionError(f"MRTPO hands TRL token advantages [B, T]; got {tuple(advantages.shape)} for "
                                 f"completions {tuple(inputs['completion_mask'].shape)}")
        if self._shape_checked or not self.model.training:
            return super()._compute_loss(model, inputs)
        with _AdvantageShapeGuard(advantages):  # once: TRL keeps the per-token loss [B, T]
            loss = super()._compute_loss(model, inputs)
        self._shape_checked = True
        return loss

    # ----------------------------------------------------------------------------- helpers
    def _credit(self, scores: torch.Tensor) -> Credit:
        """Per-reward credit of the whole gathered batch; all-None rows get 0, as in TRL."""
        w = self.reward_weights.detach().float().cpu()  # [K]
        credit = estimate(scores, self.num_generations, self.mrtpo_estimator, weights=w, saw=self.mrtpo_saw,
                          floors=self.mrtpo_floors, scale=self.scale_rewards if self.mrtpo_estimator == "grpo" else "group")
        unscorable = torch.isnan(scores).all(-1)  # [N]
        if unscorable.any():
            credit = Credit(credit.per_reward.masked_fill(unscorable.unsqueeze(-1), 0.0),
                            credit.offset.masked_fill(unscorable, 0.0), credit.weights)
        return credit

    def _replayer(self) -> Replayer:
        """The policy for the replay: TRL's model unwrapped as for generation (DeepSpeed ZeRO-3
        gathers its parameters), profiled as `mrtpo.replay`."""

        unwrap = {"gather_deepspeed3_params": self.args.ds3_gather_for_generation}
        if "gradient_checkpointing_kwargs" in inspect.signature(unwrap_model_for_generation).parameters:  # newer TRLs
            unwrap["gradient_checkpointing_kwargs"] = self.args.gradient_checkpointing_kwargs

        @contextlib.contextmanager
        def open_model():
            with profiling_context(self, "mrtpo.replay"), unwrap_model_for_generation(
                    self.model_wrapped, self.accelerator, **unwrap) as model:
                yield model

        return Replayer(self._mrtpo_state.tokenizer, model_positions(self.model), open_model)

    def _batch(self, inputs: list[dict], out: dict, scores: torch.Tensor) -> tuple[Rollout, Scored]:
        """This process's completions as `mrtpo train` holds them: their sampled ids up to the
        end (a row TRL masked out is empty), examples, verdicts and `scores` [B, K]."""
        tok = self._mrtpo_state.tokenizer
        ids, valid = out["completion_ids"].cpu(), out["completion_mask"].cpu().bool()  # [B, T]
        p_ids, p_mask = out["prompt_ids"].cpu(), out["prompt_mask"].cpu().bool()  # [B, P]
        response_ids = [ids[i][valid[i]].tolist() for i in range(ids.shape[0])]
        prompt_ids = [p_ids[i][p_mask[i]].tolist() for i in range(p_ids.shape[0])]
        examples = [self.mrtpo_examples[row[INDEX_COLUMN]] for row in inputs]
        row_names = [reward_names(self.mrtpo_task.rewards(ex)) for ex in examples]
        verdicts = [[self._mrtpo_state.verdicts[n][i] for n in row] for i, row in enumerate(row_names)]
        eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)  # int or list
        stops = set(eos if isinstance(eos, (list, tuple)) else [eos]) | {tok.eos_token_id, tok.pad_token_id}
        rollout = Rollout(examples, [tok.decode(p) for p in prompt_ids], prompt_ids, response_ids,
                          [tok.decode(r, skip_special_tokens=True) for r in response_ids],
                          [not r or r[-1] not in stops for r in response_ids], self.num_generations)
        scored = Scored(list(self.reward_func_names), scores, self.reward_weights.detach().float().cpu(),
                        self.mrtpo_floors, row_names, verdicts, {})
        return rollout, scored

    def _log_completions(self, step: int, rollout: Rollout, scored: Scored, placed: TokenCredit, rows: slice) -> None:
        """Append this batch's completions to `<output_dir>/completions.jsonl` in `mrtpo train`'s
        format (mrtpo.harness.run.completions: the step's record, as the loop writes it), so
        `mrtpo credit OUTPUT_DIR` shows TRL runs too."""
        import json
        from pathlib import Path

        from mrtpo.harness.run.completions import records

        lines = records(step, rollout, scored, placed, self._mrtpo_state.tokenizer)
        for i, line in enumerate(lines):  # group and sample in the whole batch, not this process's share
            line["group"], line["sample"] = divmod(rows.start + i, self.num_generations)
        if self.accelerator.num_processes > 1:  # every process's rows, in rank order
            from accelerate.utils import gather_object

            lines = gather_object(lines)
        if self.accelerator.is_main_process:
            root = Path(self.args.output_dir)
            root.mkdir(parents=True, exist_ok=True)
            info = root / "mrtpo_task.yaml"  # what `mrtpo credit` labels the view with
            if not info.exists():
                import yaml

                info.write_text(yaml.safe_dump({"task": self.mrtpo_task.name, "model": self._mrtpo_model_name,
                                                "mrtpo": self.mrtpo_enabled, "trainer": "trl"}))
            with (root / "completions.jsonl").open("a") as f:
                for line in lines:
                    f.write(json.dumps(line, allow_nan=False) + "\n")

    def _log_mrtpo(self, credit: Credit, q: torch.Tensor | None, mask: torch.Tensor,
                   mine: torch.Tensor | None = None) -> None:
        """TRL's completions table shows MRTPO's response advantages; distances give concentration
        (over the pairs whose credit `mine` [B, K] is not 0, as in `mrtpo train`)."""
        logged = self._logs["advantages"]
        for _ in range(min(credit.offset.shape[0], len(logged))):
            logged.pop()
        logged.extend(credit.total.tolist())
        if q is None:
            return
        from mrtpo.statistics import credited_top_share

        shares = credited_top_share(q, mask, mine).float()  # [B, K]
        shares = self.accelerator.gather(shares.to(self.accelerator.device)).cpu()  # [N, K]
        for k, name in enumerate(self.reward_func_names):
            col = shares[:, k][~torch.isnan(shares[:, k])]
            if col.numel():
                self._metrics["train"][f"mrtpo/{name}/top80_token_share"].append(float(col.mean()))


# ------------------------------------------------------------------------------- launcher
@dataclass
class MRTPOScriptArguments:
    """The task side of `python -m mrtpo.integrations.trl` (TRL's GRPOConfig and ModelConfig flags too)."""

    task: str = field(default="", metadata={"help": "Registered task name (`mrtpo tasks ls`)."})
    task_args: list[str] = field(default_factory=list, metadata={
        "help": "Task constructor arguments as KEY=VALUE pairs after one flag (values read as YAML): "
                "--task_args mode=bag think=true"})
    data: str | None = field(default=None, metadata={
        "help": "The task's training data file; default: its bundled sample."})
    mrtpo: bool = field(default=True, metadata={
        "help": "Place each reward's credit on its tokens by replay; --no_mrtpo: every token gets the response's advantage."})
    mrtpo_lambda: float = field(default=1.0, metadata={"help": "Blend with uniform weights: 1 = pure MRTPO, 0 = plain estimator."})
    mrtpo_weights: str = field(default="replay", metadata={
        "help": "Where the token weights come from: replay (the method), shuffled (the replay's distances "
                "permuted within each completion: a control), spans (the task's reward spans: an oracle control) or "
                "single (one contrast, P_all against P_none with every block left out, for every reward: a control)."})
    saw: str = field(default="off", metadata={
        "help": "SAW weights: off, reward (with sum_then_normalize) or advantage (with normalize_then_sum)."})
    log_completions_every: int = field(default=10, metadata={
        "help": "Write every completion of step 1 and of every Nth step to <output_dir>/completions.jsonl, "
                "in `mrtpo train`'s format (`mrtpo credit OUTPUT_DIR` reads it); 0 = never."})
    replay_zero_credit: bool = field(default=False, metadata={
        "help": "Also replay the rewards whose credit on a completion is 0 on every step (default: only on steps "
                "that log completions; the same advantages up to float rounding)."})


def _task_args(pairs: Sequence[str]) -> dict[str, Any]:
    """KEY=VALUE pairs, each value read as `mrtpo train -o` reads it (a YAML scalar)."""
    from mrtpo.tasks.options import OptionSyntaxError, read_options

    try:
        return read_options(pairs)
    except OptionSyntaxError as exc:
        raise ValueError(f"--task_args {exc.item!r}: expected KEY=VALUE") from None


def startup_line(trainer: MRTPOGRPOTrainer) -> str:
    """What the launcher trains with, in one line: the estimator above all, since TRL's default
    aggregation (sum_then_normalize = GRPO) is not `mrtpo train`'s (GDPO)."""
    args = trainer.args
    aggregation = args.multi_objective_aggregation
    if trainer.mrtpo_estimator == "gdpo":
        estimator = f"GDPO (multi_objective_aggregation={aggregation})"
    else:
        estimator = (f"GRPO (multi_objective_aggregation={aggregation}, scale_rewards={args.scale_rewards}; "
                     "TRL's default, while `mrtpo train` defaults to GDPO: pass "
                     "--multi_objective_aggregation normalize_then_sum for GDPO)")
    weights = ", ".join(f"{n}={float(w):g}" for n, w in zip(trainer.reward_func_names, trainer.reward_weights.tolist()))
    source = "" if trainer.mrtpo_weights == "replay" else f", weights {trainer.mrtpo_weights}"
    credit = (f"MRTPO token credit (lambda {trainer.mrtpo_lambda:g}{source})" if trainer.mrtpo_enabled
              else "no MRTPO (every token gets its response's advantage)")
    saw = f", SAW {trainer.mrtpo_saw}" if trainer.mrtpo_saw != "off" else ""
    return (f"mrtpo: task {trainer.mrtpo_task.name}, estimator {estimator}{saw}, {credit}, "
            f"reward weights {weights}")


def model_config_class():
    """TRL's ModelConfig with `mrtpo train`'s LoRA dropout default, 0 (peft's LoraConfig
    default) instead of TRL's 0.05; `--lora_dropout 0.05` gives TRL's."""
    from trl import ModelConfig

    @dataclass
    class MRTPOModelConfig(ModelConfig):
        lora_dropout: float = field(default=0.0, metadata={
            "help": "LoRA dropout; 0 by default as in `mrtpo train` and peft's LoraConfig (TRL's ModelConfig: 0.05)."})

    return MRTPOModelConfig


def main(argv: Sequence[str] | None = None, callbacks: Sequence | None = None) -> MRTPOGRPOTrainer:
    """Train as the flags say, save the model to --output_dir and leave the process group of a
    launched run (`accelerate launch`); returns the trainer, whose processes can no longer
    talk to each other (no gather or wait_for_everyone after it returns).

    `callbacks`: extra transformers `TrainerCallback`s (benchmarks/speed/peer.py times steps with one).

        accelerate launch --multi_gpu --num_processes 8 -m mrtpo.integrations.trl \\
            --model_name_or_path Qwen/Qwen2.5-1.5B-Instruct --task toolcall --output_dir runs/trl \\
            --multi_objective_aggregation normalize_then_sum --use_peft --lora_target_modules all-linear
    """
    from trl import TrlParser, get_peft_config

    from mrtpo.harness.distributed import leave_process_group

    parser = TrlParser((MRTPOScriptArguments, GRPOConfig, model_config_class()))
    script, args, model_args = parser.parse_args_and_config(args=list(argv) if argv is not None else None)
    if not script.task:
        from mrtpo.tasks import available_tasks

        parser.error(f"--task is required; available tasks: {', '.join(available_tasks())}")
    if not model_args.model_name_or_path:
        parser.error("--model_name_or_path is required: a hub id or a directory saved with save_pretrained")
    if not args.trust_remote_code:  # custom code is TRL's explicit flag, off by default: never asked on stdin
        from mrtpo.loading import custom_code_problem

        problem = custom_code_problem(model_args.model_name_or_path)
        if problem:
            parser.error(problem + " (or pass --trust_remote_code to run it)")
    init = dict(revision=model_args.model_revision, trust_remote_code=bool(args.trust_remote_code),
                attn_implementation=model_args.attn_implementation, dtype=model_args.dtype)
    args.model_init_kwargs = {**init, **(args.model_init_kwargs or {})}
    try:  # the options' names and types, checked as every command checks them
        task = get_task(script.task, **_task_args(script.task_args))
    except (ValueError, TypeError, TaskNotFound, TaskLoadError) as exc:
        parser.error(str(exc))
    trainer = MRTPOGRPOTrainer(model_args.model_name_or_path, task=task, args=args, data=script.data, mrtpo=script.mrtpo,
                               mrtpo_lambda=script.mrtpo_lambda, mrtpo_weights=script.mrtpo_weights, saw=script.saw,
                               log_completions_every=script.log_completions_every,
                               replay_zero_credit=script.replay_zero_credit,
                               peft_config=get_peft_config(model_args), callbacks=list(callbacks or []) or None)
    trainer.accelerator.print(startup_line(trainer))
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)
    trainer.save_model(args.output_dir)
    trainer.accelerator.print(f"model saved to {args.output_dir}")
    leave_process_group()  # a launched run ended well: leave the group before the script exits
    return trainer


if __name__ == "__main__":
    main()
