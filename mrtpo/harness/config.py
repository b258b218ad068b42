"""`TrainConfig`: every setting of `mrtpo train`, one flat dataclass.

Each field carries its default and a one-line why (`help`), which is also the `--flag`'s help
text, so the two cannot drift. Values come from a YAML file (`--config`) overridden by the
flags a user actually typed; `resolve` merges them, and on `--resume` starts from the run's
saved `config.yaml` so a resumed run trains exactly as it began. Invalid values and
combinations raise `ConfigError` with a message that says what to do.

Every value is checked once, whichever way it came (flag, YAML, TRL alias, Python): `typed`
converts it to the field's declared type or names the setting (and the file and key), and
`validate` checks ranges, all before a model loads. Numbers must be finite and within float32
(the tensors they enter); numeric text such as YAML 1.1's `1e-5` is read as the number it is,
as YAML 1.2 and TRL's parser read it.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import time
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any, Literal

from mrtpo.harness.errors import ConfigError
from mrtpo.tasks.base import MAX_REWARD_WEIGHT, reward_weight_problem  # noqa: F401 (one range for every weight)
from mrtpo.textio import brief

RUNS_ROOT = Path("runs")  # where run directories go when --output-dir is not given
INT_MAX = 2**31 - 1  # no count needs more; larger ones overflow C ints in torch and the OS
SEED_MAX = 2**32 - 1  # numpy's seed range (python's and torch's are wider)
FLOAT32_MAX = 3.4028234663852886e38  # settings enter float32 tensor math: beyond this they are inf
MAX_VERIFY_TIMEOUT_S = 86400.0  # the verifier's interval timer (setitimer) overflows far above


def opt(default: Any, help: str, **kw) -> Any:
    """A config field: its default and the one line that says why (shown as `--flag` help)."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help, **kw})
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class TrainConfig:
    """Settings of one training run. Field order is the order `--help` shows them in."""

    # --- policy ------------------------------------------------------------------------------
    model: str | None = opt(None, "Policy: a local directory saved with save_pretrained, or a hub id; its tokenizer must have a chat template. Not given: the built-in smollm2-135m (SmolLM2-135M-Instruct, built on first use, see `mrtpo model build`) with its own default settings.")
    lora: bool = opt(True, "Train a LoRA adapter (peft); --no-lora trains all weights.")
    lora_r: int = opt(16, "LoRA rank.")
    lora_alpha: float = opt(32.0, "LoRA scaling alpha (the update is scaled by alpha / r).")
    lora_dropout: float = opt(0.0, "Dropout on the LoRA branch: 0 by default, as in peft's LoraConfig (no mask to draw at every forward; TRL's ModelConfig has 0.05).")
    lora_target_modules: list[str] = opt(["all-linear"], "Modules LoRA wraps; 'all-linear' = every linear projection except the output head.")
    device: str = opt("auto", "'auto' (cuda when available, else cpu), 'cpu', 'cuda', 'cuda:1'...")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = opt("auto", "Weights dtype; 'auto' = float32 on CPU, bfloat16 on a GPU that supports it.")
    gradient_checkpointing: bool = opt(False, "Recompute activations in the backward pass: less memory, ~30% slower.")

    # --- task and data -----------------------------------------------------------------------
    task: str | None = opt(None, "Registered task name (see `mrtpo tasks ls`).")
    task_args: dict[str, Any] = opt({}, "Keyword arguments for the task's constructor (-o/--task-option KEY=VALUE, repeatable).")
    data: str | None = opt(None, "Training data file for the task; default: the task's bundled sample.")
    eval_data: str | None = opt(None, "Held-out data: the held-out examples are its first --heldout rows, and --data stays whole; default: the last --heldout examples of --data, held out of training.")
    heldout: int = opt(8, "Held-out examples, never trained on: measured greedily before step 1, every --eval-every steps and after the last, with the task's official metric (the numbers of `mrtpo eval`: heldout.json, and the run's last line) and each reward's mean (eval/... in metrics.jsonl), from one generation; from --eval-data, else the last ones of --data (at most a quarter of it). 0 = off. --eval-size is its older name.")
    reward_weights: dict[str, float] = opt({}, "Override reward weights by name (--reward-weight NAME=W, repeatable); default: the task's weights.")

    # --- rollout -----------------------------------------------------------------------------
    batch_prompts: int = opt(4, "B: prompts per step.")
    num_generations: int = opt(8, "G: completions sampled per prompt; at least 2, so each group has a spread.")
    temperature: float = opt(1.0, "Sampling temperature; log-probabilities and replay use the same one.")
    top_p: float = opt(1.0, "Nucleus sampling threshold (1.0 = off).")
    max_new_tokens: int = opt(256, "Longest completion, in tokens; also dr_grpo's constant denominator.")
    compiled_decoding: Literal["auto", "on", "off"] = opt("auto", "Compile the rollout's decoding steps (CUDA graphs through torch.compile, the static cache's length bucketed so that a compiled shape serves later steps): auto = on for a CUDA policy, off on CPU. Each new shape's compile is timed as time/compile, apart from time/step.")
    low_precision_fold: Literal["auto", "on", "off"] = opt("auto", "LoRA on bfloat16/float16 weights: sample and replay with a copy of the model whose adapted weights hold W + BA (one product per projection instead of three), refreshed at every step (a second set of the base weights, held for the run); the adapter trains in float32 as before, and the copy's rounding is corrected by --importance-sampling-correction. auto = on for a CUDA policy, off on CPU. Float32 weights are folded in place, exactly, whatever this says.")
    rollout_dtype: Literal["same", "bfloat16"] = opt("same", "Sample with the weights ('same') or with a bfloat16 copy of float32 weights ('bfloat16': on SmolLM2 and 2-core CPUs with native bf16, 0.73-0.87x of the rollout's time and 0.90-0.96x of the step (docs/results.md); but the completions come from a slightly different distribution, corrected by --importance-sampling-correction; the replay and the update stay in the weights' dtype).")
    importance_sampling_correction: bool = opt(True, "With --rollout-dtype bfloat16 or --low-precision-fold: weight each token's loss by how much likelier the trained weights make what the copy sampled (TRL's vllm_importance_sampling_correction); --no-importance-sampling-correction only logs the gap.")
    importance_sampling_mode: Literal["sequence_mask", "sequence_truncate", "token_mask", "token_truncate"] = opt("sequence_mask", "How the correction's ratios act, as TRL's vllm_importance_sampling_mode: per completion (sequence_*) or per token (token_*); *_mask drops those above --importance-sampling-clip-max, *_truncate caps them there.")
    importance_sampling_clip_max: float = opt(3.0, "The correction's upper bound C_max (TRL's vllm_importance_sampling_clip_max).")

    # --- advantages --------------------------------------------------------------------------
    advantage: Literal["grpo", "gdpo"] = opt("gdpo", "Estimator: grpo (sum rewards, then group z-score) or gdpo (per-reward z-score, sum, batch z-score).")
    saw: Literal["off", "reward", "advantage"] = opt("off", "SAW weights: 'reward' (with grpo: GRPO-h), 'advantage' (with gdpo: GDPO-h), or off.")
    scale_rewards: Literal["group", "batch", "none"] = opt("group", "grpo only: divide by the group's std, the batch's, or nothing (TRL's scale_rewards).")
    mrtpo: bool = opt(True, "Place each reward's credit on its relevant tokens (replay + JS distance); --no-mrtpo gives every token the response's advantage.")
    mrtpo_weights: Literal["replay", "shuffled", "spans", "single"] = opt("replay", "Where MRTPO's token weights come from: replay (the JS distances, the method), shuffled (the same distances permuted within each response: a control with the weights' distribution and no placement), spans (the task's own reward spans, Task.reward_spans: an oracle control; toolcall has them), single (one contrast for every reward, JS(P_all || P_none) with every block left out: a control with placement and no per-reward split, one replay instead of K).")
    mrtpo_lambda: float = opt(1.0, "Blend of MRTPO weights with uniform ones: 1 = pure MRTPO, 0 = plain estimator.")
    replay_zero_credit: bool = opt(False, "Also replay the rewards whose credit on a completion is 0 (a group that scored the reward alike) on every step, not only on steps that log completions: the same advantages up to float rounding of the replay's batching; off by default, which skips those contexts.")

    # --- loss and optimiser ------------------------------------------------------------------
    loss_type: Literal["dapo", "grpo", "dr_grpo"] = opt("dapo", "Token aggregation, as TRL defines it: dapo (sum / batch tokens), grpo (mean of per-sequence means), dr_grpo (sum / (N * max_new_tokens)).")
    epsilon: float = opt(0.2, "Lower clip range of the importance ratio (1 - epsilon).")
    epsilon_high: float | None = opt(None, "Upper clip range (1 + epsilon_high); default: epsilon. DAPO uses 0.28.")
    beta: float = opt(0.0, "KL(policy || base) coefficient (k3 estimator); with LoRA the base is the adapter switched off. 0 skips the reference pass.")
    num_iterations: int = opt(1, "Optimizer steps per generation batch (GRPO's mu); >1 makes the clip matter.")
    mask_truncated_completions: bool = opt(False, "Leave completions cut at --max-new-tokens out of the loss.")
    lr: float = opt(1e-5, "AdamW learning rate.")
    weight_decay: float = opt(0.0, "AdamW weight decay.")
    warmup_steps: int = opt(0, "Linear learning-rate warm-up over this many steps, then constant.")
    grad_accum: int = opt(1, "Split each batch's B*G completions into this many micro-batches (same gradient, less memory).")
    max_grad_norm: float = opt(1.0, "Clip the gradient's global norm to this (0 = no clipping).")

    # --- run ---------------------------------------------------------------------------------
    steps: int = opt(100, "Total optimizer steps of the run (a resumed run continues up to this).")
    seed: int = opt(0, "Seed for torch, python and numpy; data order, sampling and LoRA init follow from it.")
    output_dir: str | None = opt(None, "Run directory; default runs/<run-name>/.")
    run_name: str | None = opt(None, "Name of the run directory under runs/; default <task>-<advantage>(-saw)(-mrtpo)-<time>.")
    save_every: int = opt(50, "Checkpoint every N steps (0 = only at the end).")
    save_total_limit: int = opt(0, "Keep only the newest N checkpoints (0 = keep all).")
    resume: bool = opt(False, "Continue the run in --output-dir from its latest checkpoint, with its saved config.")
    log_completions_every: int = opt(10, "Write every completion of step 1 and of every Nth step to completions.jsonl (0 = never).")
    eval_every: int = opt(0, "Also measure the --heldout examples after every N steps (0 = only before step 1 and after the last); each measurement is a point of heldout.json's `_curve` and puts eval/... into that step's metrics. --heldout-every is the same setting.")
    verify_workers: int = opt(2, "Processes that run the verifiers with deadlines (0 = in this process, no deadline).")
    verify_timeout: float = opt(30.0, "Seconds one reward may take on one completion before it scores its floor ('timed out').")
    report_to: list[str] = opt(["none"], "Experiment trackers, as TRL's report_to: none, tensorboard, wandb, trackio or all; each gets metrics.jsonl's records.")

    # --- older names (OLDER_NAMES), taken from Python as a config file takes them ---------------
    heldout_every: InitVar[int | None] = None  # --eval-every
    eval_size: InitVar[int | None] = None  # --heldout, where it held examples out (older_names)

    def __post_init__(self, heldout_every: int | None = None, eval_size: int | None = None) -> None:
        given = {k: v for k, v in (("heldout_every", heldout_every), ("eval_size", eval_size)) if v is not None}
        if given:
            merged = older_names({"eval_every": self.eval_every, "heldout": self.heldout,
                                  "eval_data": self.eval_data, **given}, "TrainConfig")
            self.eval_every, self.heldout = merged["eval_every"], merged["heldout"]
        self.check()

    def check(self) -> None:
        """Convert every value to its declared type (`typed`), then `validate()`: run on
        construction, and again by `train`, so a field set after construction is checked too."""
        for name in FIELDS:  # each value as its declared type first, so validate() compares numbers
            setattr(self, name, typed(name, getattr(self, name), _label(name)))
        self.validate()

    # ------------------------------------------------------------------------------------------
    def validate(self) -> None:
        """Reject values and combinations that cannot work, saying what to do instead."""
        def need(ok: bool, msg: str) -> None:
            if not ok:
                raise ConfigError(msg)

        for name, choices in _choices().items():
            need(getattr(self, name) in choices,
                 f"{_flag(name)} must be one of {', '.join(choices)}, got {brief(getattr(self, name))}")
        need(self.batch_prompts >= 1, f"--batch-prompts must be >= 1, got {self.batch_prompts}")
        need(self.num_generations >= 2,
             f"--num-generations must be >= 2 (advantages compare completions of the same prompt), got {self.num_generations}")
        need(self.max_new_tokens >= 1, f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        need(self.temperature > 0, f"--temperature must be > 0, got {self.temperature}")
        need(0 < self.top_p <= 1, f"--top-p must be in (0, 1], got {self.top_p}")
        need(self.steps >= 1, f"--steps must be >= 1, got {self.steps}")
        need(self.epsilon > 0, f"--epsilon must be > 0, got {self.epsilon}")
        need(self.epsilon_high is None or self.epsilon_high > 0, f"--epsilon-high must be > 0, got {self.epsilon_high}")
        need(self.beta >= 0, f"--beta must be >= 0, got {self.beta}")
        need(self.num_iterations >= 1, f"--num-iterations must be >= 1, got {self.num_iterations}")
        need(0 < self.lr <= 1, f"--lr must be > 0 and at most 1 (AdamW moves each weight by about "
             f"the learning rate per step), got {self.lr}")
        need(0 <= self.weight_decay <= 1, f"--weight-decay must be in [0, 1] (AdamW scales each weight "
             f"by 1 - lr * weight_decay per step), got {self.weight_decay}")
        need(self.lora_alpha > 0, f"--lora-alpha must be > 0, got {self.lora_alpha}")
        need(0 <= self.seed <= SEED_MAX, f"--seed must be a whole number from 0 to {SEED_MAX} "
             f"(what numpy, torch and python all take), got {self.seed}")
        for name, w in self.reward_weights.items():
            problem = reward_weight_problem(w)
            need(problem is None, f"--reward-weight {name}={w:g}: {problem}")
        for name in _INT_FIELDS:
            need(getattr(self, name) <= INT_MAX,
                 f"{_flag(name)} must be at most {INT_MAX}, got {getattr(self, name)}")
        need(self.grad_accum >= 1, f"--grad-accum must be >= 1, got {self.grad_accum}")
        n = self.batch_prompts * self.num_generations
        need(self.grad_accum <= n,
             f"--grad-accum {self.grad_accum} is more micro-batches than completions per step "
             f"({self.batch_prompts} x {self.num_generations} = {n}); lower it")
        need(self.importance_sampling_clip_max > 0,
             f"--importance-sampling-clip-max must be > 0, got {self.importance_sampling_clip_max}")
        need(self.max_grad_norm >= 0, f"--max-grad-norm must be >= 0, got {self.max_grad_norm}")
        need(0.0 <= self.mrtpo_lambda <= 1.0, f"--mrtpo-lambda must be in [0, 1], got {self.mrtpo_lambda}")
        need(self.lora_r >= 1, f"--lora-r must be >= 1, got {self.lora_r}")
        need(0.0 <= self.lora_dropout < 1.0, f"--lora-dropout must be in [0, 1), got {self.lora_dropout}")
        need(bool(self.lora_target_modules), "--lora-target-modules needs at least one module name (or 'all-linear')")
        for name in ("save_every", "save_total_limit", "log_completions_every", "eval_every",
                     "warmup_steps", "verify_workers", "heldout"):
            need(getattr(self, name) >= 0, f"{_flag(name)} must be >= 0, got {getattr(self, name)}")
        need(0 < self.verify_timeout <= MAX_VERIFY_TIMEOUT_S,
             f"--verify-timeout must be > 0 and at most {MAX_VERIFY_TIMEOUT_S:g} seconds (a day), "
             f"got {self.verify_timeout}")
        from mrtpo.harness.run.trackers import check_installed, parse_report_to

        check_installed(parse_report_to(self.report_to))  # unknown or absent: ConfigError now
        # combinations
        need(not (self.saw == "reward" and self.advantage == "gdpo"),
             "--saw reward weights rewards before GRPO's sum; GDPO's per-reward z-score would undo "
             "it. With --advantage gdpo use --saw advantage (GDPO-h), or use --advantage grpo.")
        need(not (self.saw == "advantage" and self.advantage == "grpo"),
             "--saw advantage weights GDPO's per-reward advantages; with --advantage grpo use "
             "--saw reward (GRPO-h), or use --advantage gdpo.")
        need(self.scale_rewards == "group" or self.advantage == "grpo",
             f"--scale-rewards {self.scale_rewards} applies to --advantage grpo only (GDPO always "
             "normalises per reward, then over the batch); drop it or use --advantage grpo.")
        need(self.eval_every == 0 or self.heldout >= 1,
             "--eval-every measures the examples --heldout holds out; pass --heldout N >= 1 too")
        need(not self.resume or self.output_dir is not None,
             "--resume continues an existing run: pass its directory with --output-dir")

    # ------------------------------------------------------------------------------------------
    @property
    def run_dir(self) -> Path:
        if self.output_dir is None:
            raise ConfigError("the run directory is not set; resolve the config first")
        return Path(self.output_dir)

    @property
    def clip_high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: Path) -> None:
        """Write the config as YAML, atomically and never through a link (runfiles)."""
        import yaml

        from mrtpo.textio import write_atomic

        write_atomic(Path(path), yaml.safe_dump(self.to_dict(), sort_keys=False))


# the older names read back as what they became (a class attribute None would say "not set")
TrainConfig.heldout_every = property(lambda self: self.eval_every, doc="--eval-every's older name")  # type: ignore[assignment]
TrainConfig.eval_size = property(lambda self: self.heldout, doc="--heldout's older name")  # type: ignore[assignment]

# ----------------------------------------------------------------------------------------------
FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}
#: settings that change what a run trains on, added after runs were written without them: a
#: saved config.yaml that lacks one ran without it, and its resumption keeps it that way
ADDED_LATER = {"heldout": 0}


def field_default(name: str) -> Any:
    """The default of the setting `name`: a list or dict field's is made by its factory (its
    `default` is dataclasses' MISSING marker, which a settings line would print as an object)."""
    f = FIELDS[name]
    return f.default_factory() if f.default is dataclasses.MISSING else f.default
#: settings a resumed run may change: they do not alter what the next step computes
RESUMABLE = {"steps", "save_every", "save_total_limit", "log_completions_every", "eval_every",
             "resume", "verify_workers", "verify_timeout", "output_dir", "run_name", "device", "report_to",
             "compiled_decoding"}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


#: older names of settings -> today's. The held-out measurement was two until issue 60:
#: --eval-every scored --eval-size examples with the task's rewards (eval/... in metrics.jsonl)
#: and --heldout-every measured the --heldout examples with the official metric (heldout.json);
#: now one measurement of the --heldout examples every --eval-every steps gives both. On the
#: command line the older flags are aliases (mrtpo.harness.trl_names); a config file or a
#: TrainConfig call reads them with `older_names`, so a config.yaml written before still resumes.
OLDER_NAMES = {"heldout_every": "eval_every", "eval_size": "heldout"}


def older_names(values: dict[str, Any], where: str) -> dict[str, Any]:
    """`values` with the settings' older names (OLDER_NAMES) read as today's.

    A config.yaml written before the merge holds both names of each pair, so giving both is
    read, not refused: `heldout_every` and `eval_every` are one cadence (where both are set,
    to different numbers, the smaller: measured at least as often as either asked).
    `eval_size` counted the examples --eval-every scored; it held them out of --data only
    with --eval-every on and no --eval-data, and then the held-out examples are the larger of
    it and `heldout` (an absent `heldout` counting 0, so a resumed run trains on the examples
    it trained on), else it is dropped (those runs trained on what `heldout` alone holds out).
    A TrainConfig call always has a `heldout` (8 unless given)."""
    out = dict(values)
    if not set(OLDER_NAMES) & set(out):
        return out
    every = typed("eval_every", out.get("eval_every", 0), f"{where}: eval_every")  # as --eval-every was
    if "eval_size" in out:
        size = typed("heldout", out.pop("eval_size"), f"{where}: eval_size")
        if every and out.get("eval_data") is None:
            out["heldout"] = max(size, typed("heldout", out.get("heldout", 0), f"{where}: heldout"))
    if "heldout_every" in out:
        old = typed("eval_every", out.pop("heldout_every"), f"{where}: heldout_every")
        out["eval_every"] = min(old, every) if old and every else old or every
    return out


#: how a setting is named in messages about its value when it did not come from a file
_LABELS = {"task_args": "-o/--task-option", "reward_weights": "--reward-weight"}
_INT_FIELDS = [f.name for f in dataclasses.fields(TrainConfig) if f.type in (int, "int") and f.name != "seed"]


def _label(name: str) -> str:
    return _LABELS.get(name, _flag(name))


@functools.lru_cache(maxsize=1)
def _hints() -> dict[str, Any]:
    import typing

    return typing.get_type_hints(TrainConfig)


def typed(name: str, value: Any, label: str) -> Any:
    """`value` converted to setting `name`'s declared type, or ConfigError naming `label` (the
    flag, or the file and key it came from). The one check of every value, whether it comes
    from a flag, a YAML file, a TRL alias or the Python API.

    Conversions are the ones task options get (mrtpo.tasks.options.fit_value), so nothing is
    lost: numeric text for a number (YAML 1.1 reads `1e-5` as text; YAML 1.2 and TRL's parser
    read it as the float it is), a whole float for a whole number (2.0, never 2.7), a number
    for text. Floats must be finite. A name list (`lora_target_modules`, `report_to`) given as
    one text is that name, or the comma-separated names, as the flag reads it. Ranges are
    validate()'s."""
    import typing

    from mrtpo.tasks.options import describe_type, fit_value, not_finite

    hint = _hints()[name]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return value  # validate() names the choices
    if origin is list:
        return _names(value, label)
    if origin is dict:
        return _mapping(name, value, args[1], label)
    if isinstance(value, str) and (hint is str or str in args):
        return value  # text as given: `--run-name none` names a run "none"
    ok, out = fit_value(value, hint)
    if not ok:
        what = "a finite number" if not_finite(value) else describe_type(hint)
        raise ConfigError(f"{label}: expected {what}, got {brief(value)}")
    if isinstance(out, float) and abs(out) > FLOAT32_MAX:
        raise ConfigError(f"{label}: {out:g} is beyond what float32 holds (+-{FLOAT32_MAX:.1e}), so "
                          "the tensors it enters would hold inf; give a moderate number")
    return out


def _names(value: Any, label: str) -> list[str]:
    """A list of names: 'q_proj' -> ['q_proj'], 'q_proj,v_proj' -> both, a list of texts as it
    is, nothing (an empty YAML key) none; validate() says which lists may not be empty."""
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ConfigError(f"{label}: expected a name or a list of names, e.g. [q_proj, v_proj], got {brief(value)}")


def _mapping(name: str, value: Any, value_hint: Any, label: str) -> dict[str, Any]:
    """A {name: value} setting (task_args, reward_weights): names are texts, values of `value_hint`."""
    from mrtpo.tasks.options import fit_value, not_finite

    example = "{format: 1.0, correct: 2.0}" if name == "reward_weights" else "{think: true}"
    if value is None:  # an empty YAML key (`task_args:` with every entry commented out)
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{label}: expected a mapping of name: value, e.g. {example}, got {brief(value)}")
    out = {}
    for key, v in value.items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{label}: {brief(key)} is not a name; write {example}")
        ok, out[key] = fit_value(v, value_hint)
        if not ok:
            what = "a finite number" if not_finite(v) else "a number"
            raise ConfigError(f"{label} {key[:200]}={brief(v)}: expected {what} as the weight")
    return out


def _choices() -> dict[str, tuple]:
    import typing

    hints = typing.get_type_hints(TrainConfig)
    return {name: typing.get_args(tp) for name, tp in hints.items()
            if typing.get_origin(tp) is Literal}


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML config file as {field: value}; keys may use '-' or '_'; unknown keys are errors.
    Read by mrtpo's one YAML reader (mrtpo.yamlio): an alias bomb or a repeated key is refused."""
    import yaml

    from mrtpo.textio import not_a_file
    from mrtpo.yamlio import MAX_CHARS, YAMLRefused, load_yaml

    p = Path(path)
    problem = not_a_file(p)
    if problem:
        raise ConfigError(f"--config {p}: {problem}; give a YAML file of settings")
    try:
        if p.stat().st_size > MAX_CHARS:
            raise ConfigError(f"--config {p}: {p.stat().st_size} bytes; a config is a few KB, at most {MAX_CHARS} "
                              "bytes are read")
        raw = load_yaml(p.read_bytes().decode("utf-8"), f"--config {p}") or {}
    except YAMLRefused as exc:
        raise ConfigError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--config {p}: not UTF-8 text ({exc}); save it as UTF-8") from exc
    except OSError as exc:
        raise ConfigError(f"--config {p}: cannot read it: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config {p}: not valid YAML: {' '.join(str(exc).split())}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"--config {p}: expected a mapping of setting: value, got {type(raw).__name__}")
    from mrtpo.harness.trl_names import TRL_ALIASES, apply_aliases  # TRL's names: learning_rate...

    keys: dict[str, Any] = {}
    written: dict[str, str] = {}  # key with '_' -> as the file spells it
    for k, v in raw.items():
        key = str(k).replace("-", "_")
        if key in keys:  # num-generations and num_generations: one setting twice
            raise ConfigError(f"--config {p}: {brief(written[key])} and {brief(str(k))} name the same setting; keep one")
        keys[key], written[key] = v, str(k)
    spelt = {TRL_ALIASES.get(k, k): written[k] for k in keys}  # field -> the key as written
    values = check_keys(older_names(apply_aliases(keys, where=f"--config {p}"), f"--config {p}"),
                        where=f"--config {p}")
    return {k: typed(k, v, f"--config {p}: {spelt.get(k, k)}") for k, v in values.items()}


def check_keys(values: dict[str, Any], where: str) -> dict[str, Any]:
    for key in values:
        if key not in FIELDS:
            close = difflib.get_close_matches(key, list(FIELDS), n=3, cutoff=0.6)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise ConfigError(f"{where}: unknown setting {brief(key)}.{hint} "
                              "See `mrtpo train --help` for the settings.")
    return values


def build(values: dict[str, Any], where: str = "config") -> TrainConfig:
    """A validated TrainConfig from {field: value}; type errors name the field."""
    try:
        return TrainConfig(**check_keys(values, where))
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def default_run_name(values: dict[str, Any]) -> str:
    parts = [str(values.get("task") or "run"), str(values.get("advantage", "gdpo"))]
    if values.get("saw", "off") != "off":
        parts.append("saw")
    if values.get("mrtpo", True):
        parts.append("mrtpo")
    parts.append(time.strftime("%Y%m%d-%H%M%S"))
    return "-".join(parts)


def resolve(config_file: str | Path | None = None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """The run's config: YAML file, then the flags given (`overrides`), then the run directory.

    A fresh run gets `output_dir` = runs/<run_name> when none is given. With `resume`, the
    run directory's saved config.yaml is the base; the given settings may change only what
    does not alter training (steps, save/log/eval cadence, verifier workers), and any other
    difference is refused so a resumed run cannot silently train differently.
    """
    values: dict[str, Any] = read_yaml(config_file) if config_file else {}
    from_file = set(values) - set(overrides or {})  # what the file sets and no flag overrides
    values.update(check_keys(older_names(dict(overrides or {}), "flags"), where="flags"))
    if not values.get("resume"):  # no --model: the built-in policy, with the settings it trains with
        from mrtpo.models.builtin import with_train_defaults

        values = with_train_defaults(values)
    if values.get("resume"):
        if not values.get("output_dir"):
            raise ConfigError("--resume continues an existing run: pass its directory with --output-dir")
        saved_path = Path(values["output_dir"]) / "config.yaml"
        if not saved_path.is_file():
            raise ConfigError(f"--resume: {saved_path} does not exist; is {values['output_dir']} a run "
                              "directory written by `mrtpo train`?")
        saved = {**ADDED_LATER, **read_yaml(saved_path)}
        merged = build({**saved, **values}, where="flags")
        changed = sorted(k for k, v in merged.to_dict().items()
                         if k not in RESUMABLE and k in saved and v != saved[k])
        if changed:
            diffs = "; ".join(f"{_flag(k)}: saved {brief(saved[k])}, given {brief(getattr(merged, k))}" for k in changed)
            raise ConfigError(f"--resume would change settings that alter training ({diffs}). "
                              "Drop those flags to continue the run as it began, or start a new "
                              "run in another --output-dir.")
        return merged
    if not values.get("output_dir"):
        values["output_dir"] = str(RUNS_ROOT / (values.get("run_name") or default_run_name(values)))
    try:
        return build(values, where="flags")
    except ConfigError as exc:
        raise _naming_the_file(exc, from_file, config_file) from exc


def defaults_line(given: dict, model: str | None) -> str:
    """One line for the start of `mrtpo train`: whose defaults fill the settings not `given`
    (a built-in policy's, `mrtpo.models.builtin.TRAIN_DEFAULTS`, or the trainer's)."""
    from mrtpo.models.builtin import DEFAULT_MODEL, TRAIN_DEFAULTS, builtin_name, with_train_defaults

    name = builtin_name(model or DEFAULT_MODEL)
    if name is not None:
        filled = with_train_defaults({**given, "model": model or DEFAULT_MODEL})
        used = {k: filled[k] for k in TRAIN_DEFAULTS.get(name, {}) if k not in given and k in filled}
        if not used:
            return f"settings: every setting that {name} brings was given; the rest are the trainer's defaults"
        listed = ", ".join(f"{k}={v}" for k, v in used.items())
        return (f"settings: the built-in policy {name}'s defaults for {listed} (given settings win); "
                "the rest are the trainer's defaults")
    keys = sorted({k for d in TRAIN_DEFAULTS.values() for k in d} - set(given) - {"task"})
    listed = ", ".join(f"{k}={field_default(k)}" for k in keys)
    return (f"settings: the trainer's defaults, meant for pretrained models ({listed}); a built-in policy's "
            "own defaults apply only to it (`mrtpo model ls`)")


def _naming_the_file(exc: ConfigError, from_file: set[str], config_file) -> ConfigError:
    """A range error (validate's, which names the flag) about a setting the --config file
    gave, with the file and the key named too; other errors as they are."""
    msg = str(exc)
    for name in sorted(from_file):
        if msg.startswith((_flag(name) + " ", _label(name) + " ")):
            return ConfigError(f"--config {config_file}: {name}: {msg}")
    return exc
