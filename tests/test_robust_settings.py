"""Issue 30, items 1, 2, 7, 18, 21, 22 and 25a: every setting of `mrtpo train` is checked once,
by its declared type and range, whichever way it comes (flag, YAML, TRL alias, Python API),
before any model loads; a step whose loss, gradient or weights are not finite stops the run
before anything of it is saved; a reward that times out is counted and said; messages printed
through rich keep their brackets; alias conflicts on the command line are refused; task options
refuse non-finite numbers."""
from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import harness_task
from small_runs import small_config as _cfg
from mrtpo.cli import app
from mrtpo.harness import ConfigError, TrainConfig, resolve, train
from mrtpo.harness.config import FIELDS
from mrtpo.harness.update import NonFiniteError

harness_task.register()
pytestmark = pytest.mark.timeout(300)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
NOWHERE = "/nonexistent/model"  # a model that cannot load: a setting refused later would say so


def _invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args], env=ENV, prog_name="mrtpo")
    return result, " ".join(ANSI.sub("", result.output).split())


def _refused(result, out, *words):
    assert result.exit_code == 2, out
    for w in words:
        assert w in out, out
    assert "Traceback" not in out
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "nonexistent" not in out  # refused before the model was looked at


def _yaml(tmp_path, text: str | bytes) -> Path:
    p = tmp_path / "c.yaml"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


# ---------------------------------------------------------------------------- item 1: floats
FLOAT_FIELDS = [n for n, f in FIELDS.items() if f.type in ("float", "float | None")]


def test_every_float_setting_is_checked():
    assert {"lr", "lora_alpha", "weight_decay", "temperature", "verify_timeout", "epsilon_high"} <= set(FLOAT_FIELDS)


@pytest.mark.parametrize("name", FLOAT_FIELDS)
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_non_finite_float_settings_are_refused(name, bad):
    with pytest.raises(ConfigError, match=f"--{name.replace('_', '-')}: expected a finite number"):
        TrainConfig(**{name: bad})


@pytest.mark.parametrize("flag, value, words", [
    ("--lr", "inf", "--lr: expected a finite number, got inf"),
    ("--learning_rate", "nan", "--lr: expected a finite number, got nan"),
    ("--lora-alpha", "nan", "--lora-alpha: expected a finite number, got nan"),
    ("--lora-alpha", "-1", "--lora-alpha must be > 0, got -1.0"),
    ("--weight-decay", "nan", "--weight-decay: expected a finite number"),
    ("--weight-decay", "-5", "--weight-decay must be in [0, 1]"),
    ("--weight-decay", "1e30", "--weight-decay must be in [0, 1]"),
    ("--lr", "1e30", "--lr must be > 0 and at most 1"),
    ("--lr", "0", "--lr must be > 0"),
    ("--temperature", "inf", "--temperature: expected a finite number"),
    ("--max-grad-norm", "inf", "--max-grad-norm: expected a finite number"),
    ("--verify-timeout", "1e12", "--verify-timeout must be > 0 and at most 86400 seconds"),
    ("--seed", str(2**40), "--seed must be a whole number from 0 to 4294967295"),
    ("--seed", "-1", "--seed must be a whole number from 0"),
    ("--steps", str(2**40), "--steps must be at most 2147483647"),
    ("--beta", "1e300", "--beta: 1e+300 is beyond what float32 holds"),
    ("--lora-alpha", "1e39", "--lora-alpha: 1e+39 is beyond what float32 holds"),
    ("--epsilon", "1e300", "--epsilon: 1e+300 is beyond what float32 holds"),
])
def test_bad_flags_are_refused_before_the_model_loads(tmp_path, flag, value, words):
    result, out = _invoke("train", "--model", NOWHERE, "--task", "harness-words",
                          "--output-dir", tmp_path / "run", flag, value)
    _refused(result, out, words)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text, words", [
    ("lr: .inf\n", "lr: expected a finite number, got inf"),
    ("learning_rate: .nan\n", "learning_rate: expected a finite number, got nan"),
    ("lora_alpha: .nan\n", "lora_alpha: expected a finite number"),
    ("weight_decay: -5\n", "weight_decay: --weight-decay must be in [0, 1]"),
    ("learning_rate: 5\n", "lr: --lr must be > 0 and at most 1"),
])
def test_bad_yaml_floats_are_refused_before_the_model_loads(tmp_path, text, words):
    result, out = _invoke("train", "--model", NOWHERE, "--task", "harness-words",
                          "--output-dir", tmp_path / "run", "--config", _yaml(tmp_path, text))
    _refused(result, out, words)


# ------------------------------------------------------------- item 18: YAML, typed by field
@pytest.mark.parametrize("text, field, value", [
    ("learning_rate: 1e-5\n", "lr", 1e-5),  # YAML 1.1 reads this as text; TRL reads a float
    ("lr: '3e-4'\n", "lr", 3e-4),
    ("lora_alpha: 16\n", "lora_alpha", 16.0),
    ("steps: 3.0\n", "steps", 3),
    ("lora_target_modules: q_proj\n", "lora_target_modules", ["q_proj"]),
    ("lora_target_modules: q_proj, v_proj\n", "lora_target_modules", ["q_proj", "v_proj"]),
    ("report_to: none\n", "report_to", ["none"]),
    ("run_name: 2024\n", "run_name", "2024"),
    ("reward_weights: {format: 2}\n", "reward_weights", {"format": 2.0}),
    ("epsilon_high: null\n", "epsilon_high", None),
    ("task_args:\n", "task_args", {}),  # every entry commented out
    ("reward_weights:\n", "reward_weights", {}),
    ("report_to:\n", "report_to", []),
])
def test_yaml_values_are_read_as_their_declared_type(tmp_path, text, field, value):
    cfg = resolve(_yaml(tmp_path, "model: m\ntask: harness-words\n" + text), {"output_dir": str(tmp_path / "r")})
    got = getattr(cfg, field)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("text, words", [
    ("learning_rate: abc\n", "learning_rate: expected a number, got 'abc'"),
    ("steps: 2.7\n", "steps: expected a whole number, got 2.7"),
    ("max_steps: 2.7\n", "max_steps: expected a whole number, got 2.7"),
    ("max-steps: 2.7\n", "max-steps: expected a whole number, got 2.7"),
    ("batch_prompts: 2.5\n", "batch_prompts: expected a whole number, got 2.5"),
    ("steps: true\n", "steps: expected a whole number, got True"),
    ("task_args: think\n", "task_args: expected a mapping of name: value"),
    ("task_args: [1, 2]\n", "task_args: expected a mapping of name: value"),
    ("reward_weights: {format: abc}\n", "reward_weights format='abc': expected a number"),
    ("reward_weights: {format: .inf}\n", "reward_weights format=inf: expected a finite number"),
    ("reward_weights: {1: 2.0}\n", "reward_weights: 1 is not a name"),
    ("seed: 100000000000000000000000\n", "--seed must be a whole number from 0 to 4294967295"),
    ("lora: 'yes'\n", "lora: expected true or false"),
    ("lora_target_modules: [1, 2]\n", "lora_target_modules: expected a name or a list of names"),
    ("lora_target_modules: {a: 1}\n", "lora_target_modules: expected a name or a list of names"),
    ("model: [a, b]\n", "model: expected text or none"),
    ("lora_target_modules:\n", "--lora-target-modules needs at least one module name"),
    ("temperature: 1e39\n", "temperature: 1e+39 is beyond what float32 holds"),
    ("weight_decay: .nan\n", "weight_decay: expected a finite number"),
])
def test_bad_yaml_values_name_the_key_and_the_file(tmp_path, text, words):
    path = _yaml(tmp_path, "task: harness-words\n" + text)
    with pytest.raises(ConfigError) as exc:
        resolve(path, {"output_dir": str(tmp_path / "r")})
    message = str(exc.value)
    assert words in message and f"--config {path}" in message
    result, out = _invoke("train", "--model", NOWHERE, "--config", path, "--output-dir", tmp_path / "run")
    _refused(result, out, words)


def test_a_yaml_file_that_is_not_utf8_is_named(tmp_path):
    path = _yaml(tmp_path, b"run_name: caf\xe9\n")
    result, out = _invoke("train", "--model", NOWHERE, "--config", path, "--task", "harness-words")
    _refused(result, out, f"--config {path}: not UTF-8 text", "save it as UTF-8")


def test_the_python_api_gets_the_same_checks():
    assert TrainConfig(lr="2e-5").lr == 2e-5
    assert TrainConfig(lora_target_modules="q_proj").lora_target_modules == ["q_proj"]
    with pytest.raises(ConfigError, match="--steps: expected a whole number, got 2.7"):
        TrainConfig(steps=2.7)
    with pytest.raises(ConfigError, match="-o/--task-option: expected a mapping"):
        TrainConfig(task_args="think=true")
    cfg = TrainConfig(steps=3)
    with pytest.raises(ConfigError, match="--lr: expected a finite number"):
        dataclasses.replace(cfg, lr=math.inf)
    cfg.lr = math.nan  # set after construction: train checks again before anything loads
    with pytest.raises(ConfigError, match="--lr: expected a finite number"):
        train(cfg)


# -------------------------------------------------------------------- item 2: reward weights
@pytest.mark.parametrize("weight", ["nan", "inf", "-inf", "1e400"])
def test_non_finite_reward_weights_are_refused(tmp_path, weight):
    result, out = _invoke("train", "--model", NOWHERE, "--task", "harness-words",
                          "--output-dir", tmp_path / "run", "--reward-weight", f"format={weight}")
    _refused(result, out, "--reward-weight format=", "expected a finite number as the weight")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------- item 1: the step's loss, gradient, weights
def _checkpoint_tensors(run_dir: Path):
    from safetensors.torch import load_file

    for f in sorted(run_dir.glob("checkpoints/*/**/*.safetensors")):
        yield f, load_file(str(f))


def _steps_logged(run_dir: Path) -> list[int]:
    log = run_dir / "metrics.jsonl"
    return [json.loads(line)["step"] for line in log.read_text().splitlines()] if log.exists() else []


def test_update_refuses_a_non_finite_loss_before_the_optimizer_steps(tiny_qwen2_dir):
    """The guard itself, on a real policy and batch: NaN advantages give a NaN loss (and
    gradient); update raises and the weights are as they were."""
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import sample
    from mrtpo.harness.update import update
    from mrtpo.tasks import get_task

    task = get_task("harness-words")
    policy = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4, device="cpu")
    rollout = sample(policy, task, task.load()[:2], 2, max_new_tokens=4)
    mask = rollout.response_mask()
    before = [p.detach().clone() for p in policy.trainable_parameters()]
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-3)
    for bad in (math.nan, math.inf):
        with pytest.raises(NonFiniteError, match="the loss is nan|the loss is inf|gradient norm is"):
            update(policy, optimizer, rollout.batch(policy.pad_id, policy.device),
                   torch.full(mask.shape, bad) * mask, temperature=1.0, loss_type="dapo", epsilon=0.2,
                   epsilon_high=None, beta=0.0, num_iterations=1, grad_accum=1, max_grad_norm=1.0,
                   max_completion_length=4)
        for p, q in zip(policy.trainable_parameters(), before):
            assert torch.equal(p.detach(), q)


def test_a_step_that_makes_weights_non_finite_is_refused(tiny_qwen2_dir):
    """Finite loss and gradient, but an optimizer step that overflows the weights (any
    optimizer: the check is on the weights after the step, not on the settings)."""
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import sample
    from mrtpo.harness.update import update
    from mrtpo.tasks import get_task

    task = get_task("harness-words")
    policy = load_policy(str(tiny_qwen2_dir), lora=True, lora_r=4, device="cpu")
    rollout = sample(policy, task, task.load()[:2], 2, max_new_tokens=4)
    mask = rollout.response_mask()
    adv = torch.linspace(-1e6, 1e6, mask.shape[0]).unsqueeze(-1) * mask  # large, finite
    with pytest.raises(NonFiniteError, match="the optimizer step made weights non-finite"):
        update(policy, torch.optim.SGD(policy.trainable_parameters(), lr=3e38),
               rollout.batch(policy.pad_id, policy.device), adv, temperature=1.0, loss_type="dapo",
               epsilon=0.2, epsilon_high=None, beta=0.0, num_iterations=1, grad_accum=1,
               max_grad_norm=0.0, max_completion_length=4)


def test_a_step_with_an_infinite_gradient_saves_nothing(tiny_qwen2_dir, tmp_path):
    """--lora-alpha 1e30 is finite, but the LoRA update it scales overflows the first gradient."""
    out = tmp_path / "run"
    with pytest.raises(NonFiniteError, match=r"step 1: the gradient norm is inf.*nothing of this step "
                                             r"was saved.*--lora-alpha \(now 1e\+30\)"):
        train(_cfg(tiny_qwen2_dir, out, steps=2, lr=1.0, lora_alpha=1e30, max_grad_norm=0.0))
    assert not list(out.glob("checkpoints/*")) and _steps_logged(out) == []


def test_a_diverging_run_stops_with_a_clear_message_and_no_nan_checkpoint(tiny_qwen2_dir, tmp_path):
    """--lr 1 --lora-alpha 1e20: the first step is finite, the second overflows, and the guard
    stops the run there: exit 1, a one-paragraph message, and the checkpoint of step 1 (the
    only one) holds finite weights."""
    out = tmp_path / "run"
    result, text = _invoke("train", "--model", tiny_qwen2_dir, "--task", "harness-words", "--steps", 4,
                           "--batch-prompts", 2, "--num-generations", 2, "--max-new-tokens", 6,
                           "--verify-workers", 0, "--lora-r", 4, "--save-every", 1, "--no-mrtpo",
                           "--lr", "1", "--lora-alpha", "1e20", "--max-grad-norm", 0, "--output-dir", out)
    assert result.exit_code == 1, text
    assert "Traceback" not in text and isinstance(result.exception, SystemExit), text
    assert re.search(r"error: step 2: the (loss|gradient norm) is nan", text), text
    assert "nothing of this step was saved" in text and "--lora-alpha (now 1e+20)" in text
    assert _steps_logged(out) == [1]
    assert [p.name for p in out.glob("checkpoints/step-*")] == ["step-000001"]
    saved = list(_checkpoint_tensors(out))
    assert saved
    for f, tensors in saved:
        for name, t in tensors.items():
            assert torch.isfinite(t).all(), (f, name)


def test_the_progress_line_takes_a_missing_reward():
    from mrtpo.commands.train import _reward_line

    assert _reward_line({"step": 1, "reward": None, "rewards/format/mean": None}) == "reward n/a"
    assert _reward_line({"step": 1, "reward": 0.5, "rewards/format/mean": 1.0}) == "reward 0.500 | format 1.00"


# ------------------------------------------------------- item 22: two spellings of one setting
@pytest.mark.parametrize("args", [
    ["--lr", "0.1", "--learning_rate", "0.2"],
    ["--learning-rate=0.1", "--lr=0.2"],
    ["--max_steps", "1", "--steps", "3"],
    ["--save-steps", "1", "--save-every", "2"],
    ["--num_generations", "2", "--num-generations", "4"],
    ["--lora", "--no-lora"],
    ["--max-completion-length", "8", "--max_new_tokens", "9"],
])
def test_two_spellings_of_one_setting_on_the_command_line_are_refused(tmp_path, args):
    result, out = _invoke("train", "--model", NOWHERE, "--task", "harness-words",
                          "--output-dir", tmp_path / "run", *args)
    spellings = [a.split("=")[0] for a in args if a.startswith("--")]
    _refused(result, out, f"{spellings[0]} and {spellings[1]} name the same setting; give it once")


@pytest.mark.parametrize("args", [
    ["--steps", "1", "--steps", "3"],  # one spelling repeated: the last, as flags usually go
    ["--run-name", "--lr", "--lr", "0.1"],  # a value that looks like a flag is a value
    ["-o", "a=1", "--task-option", "b=2"],  # repeatable
    ["--report-to", "none", "--report_to", "none"],
])
def test_repeatable_flags_and_values_are_not_conflicts(tmp_path, args):
    result, out = _invoke("train", "--model", NOWHERE, "--task", "harness-words",
                          "--output-dir", tmp_path / "run", *args)
    assert "name the same setting" not in out, out


def test_two_spellings_of_one_key_in_yaml_are_refused(tmp_path):
    path = _yaml(tmp_path, "num-generations: 2\nnum_generations: 4\n")
    with pytest.raises(ConfigError, match=r"'num-generations' and 'num_generations' name the same setting"):
        resolve(path, {})


# ------------------------------------------------------- item 21: brackets printed, not markup
def test_a_missing_tracker_message_keeps_its_brackets(monkeypatch, tmp_path):
    import mrtpo.harness.trackers as trackers

    monkeypatch.setitem(trackers.PACKAGES, "tensorboard", "no_such_tracker_package")
    result, out = _invoke("train", "--model", NOWHERE, "--task", "harness-words",
                          "--output-dir", tmp_path / "run", "--report-to", "tensorboard")
    _refused(result, out, 'pip install "mrtpo[trackers]"')


def test_error_messages_with_brackets_are_printed_as_they_are(tmp_path):
    result, out = _invoke("train", "--model", NOWHERE, "--config", tmp_path / "[bold]x[/bold].yaml")
    _refused(result, out, "[bold]x[/bold].yaml: no such file")
    path = _yaml(tmp_path, "run_name: [red]\n")
    result, out = _invoke("train", "--model", NOWHERE, "--config", path, "--task", "harness-words")
    _refused(result, out, "run_name: expected text or none, got ['red']")


def test_eval_prints_names_and_paths_with_brackets(tmp_path):
    from mrtpo.tasks import get_task

    examples = get_task("harness-words").load()
    responses = tmp_path / "r.jsonl"
    responses.write_text("".join(json.dumps({"id": ex.id, "response": "<answer>x</answer>"}) + "\n"
                                 for ex in examples))
    out_file = tmp_path / "per[bold]example.jsonl"
    result, out = _invoke("eval", "harness-words", "--responses", responses, "--out", out_file)
    assert result.exit_code == 0, out
    assert f"per-example results: {out_file}" in out


# ------------------------------------------------------------ item 7: rewards that time out
def test_a_reward_that_times_out_is_counted_and_said(tiny_qwen2_dir, tmp_path, caplog):
    """harness-broken's `fragile` reward sleeps 30 s on every completion; with a 0.2 s deadline
    each of its jobs scores the floor as 'timed out'. The metric counts them, the console says
    it once, and rewards that ran in time count 0."""
    cfg = _cfg(tiny_qwen2_dir, tmp_path / "run", task="harness-broken", task_args={"mode": "sleep"},
               steps=2, verify_workers=1, verify_timeout=0.2)
    with caplog.at_level("WARNING", logger="mrtpo.harness.loop"):
        result = train(cfg)
    for record in result.history:
        assert record["rewards/fragile/timeout_frac"] == 1.0
        assert record["rewards/format/timeout_frac"] == 0.0
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["rewards/fragile/timeout_frac"] for r in logged] == [1.0, 1.0]
    said = [r.getMessage() for r in caplog.records if "timed out" in r.getMessage()]
    assert len(said) == 1, said  # once per reward, not every step
    assert "step 1: reward 'fragile' timed out on 100% of the completions" in said[0]
    assert "rewards/fragile/timeout_frac" in said[0] and "--verify-timeout" in said[0]


def test_a_query_past_its_time_limit_counts_as_a_timeout():
    """text2sql's own query deadline (not the scorer's) reaches the metric the same way."""
    from mrtpo.harness.metrics import timeout_metrics
    from mrtpo.harness.scoring import Scorer, timed_out
    from mrtpo.tasks import get_task
    from mrtpo.tasks.base import Verdict

    task = get_task("text2sql", timeout=0.2, workers=0)
    ex = task.load()[0]
    slow = ("```sql\nWITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
            "SELECT count(*) FROM c\n```")
    with Scorer(task, workers=0) as scorer:
        scored = scorer.score([ex, ex], [slow, "```sql\nSELECT 1\n```"])
    metrics = timeout_metrics(scored)
    assert metrics["rewards/executes/timeout_frac"] == 0.5
    assert metrics["rewards/format/timeout_frac"] == 0.0
    assert not timed_out(Verdict(0.0, "SQLite error: no such column: x"))
    assert timed_out(Verdict(0.0, "timed out after 30 s"))


# ---------------------------------------------------------------- item 25a: task options
@pytest.mark.parametrize("item, words", [
    ("timeout=.inf", "option timeout=inf: expected a finite number, e.g. -o timeout=5.0"),
    ("timeout=-.inf", "option timeout=-inf: expected a finite number"),
    ("timeout=.nan", "option timeout=nan: expected a finite number"),
    ("timeout=inf", "option timeout='inf': expected a finite number"),
    ("timeout=1e300", "timeout=1e+300: give a positive number of seconds, at most 86400"),
    ("timeout=0", "timeout=0.0: give a positive number of seconds"),
    ("workers=-1", "task 'text2sql': workers=-1: give a whole number from 0 (in this process) to 64"),
    ("workers=100000", "workers=100000: give a whole number from 0"),
])
def test_task_options_out_of_range_are_refused_by_eval_and_train(tiny_qwen2_dir, tmp_path, item, words):
    responses = tmp_path / "r.jsonl"
    responses.write_text('{"id": "x", "response": "SELECT 1"}\n')
    for cmd in (("eval", "text2sql", "--responses", responses),
                ("train", "--model", tiny_qwen2_dir, "--task", "text2sql", "--output-dir", tmp_path / "run",
                 "--verify-workers", 0)):
        result, out = _invoke(*cmd, "-o", item)
        assert result.exit_code == 2, (cmd, out)
        assert words in out, (cmd[0], out)
        assert "Traceback" not in out and not isinstance(result.exception, OverflowError)


def test_every_float_task_option_must_be_finite():
    from mrtpo.tasks.options import TaskOptionError, check_options

    def factory(rate: float = 1.0, limit: float | None = None, n: int = 1):
        return None

    assert check_options("t", factory, {"rate": "2.5", "limit": 3, "n": 4.0}) == {"rate": 2.5, "limit": 3.0, "n": 4}
    for key, bad in (("rate", math.inf), ("rate", "-inf"), ("limit", math.nan), ("n", math.inf)):
        with pytest.raises(TaskOptionError, match=f"option {key}=.*expected a finite number"):
            check_options("t", factory, {key: bad})


def test_listings_print_names_and_paths_with_brackets(tmp_path):
    cache = tmp_path / "cache[bold]x"
    result, out = _invoke("model", "ls", "--cache-dir", cache)
    assert result.exit_code == 0 and "cache[bold]x" in out, out
