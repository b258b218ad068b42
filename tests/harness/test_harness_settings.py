"""Every setting of `mrtpo train` is checked once, by its declared type and range, whichever way
it comes (flag, YAML, TRL alias, Python API), before any model loads: non-finite floats and
reward weights, YAML values typed by field, two spellings of one setting, task options that
are not finite."""
from __future__ import annotations

import dataclasses
import math

import pytest

import harness_task
from cli_runs import NOWHERE
from cli_runs import invoke as _invoke
from cli_runs import refused as _refused
from cli_runs import yaml_file as _yaml
from mrtpo.harness import ConfigError, TrainConfig, resolve, train
from mrtpo.harness.config import FIELDS

harness_task.register()
pytestmark = pytest.mark.timeout(300)


# ---------------------------------------------------------------------------- floats
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


# ------------------------------------------------------------- YAML, typed by field
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


# -------------------------------------------------------------------- reward weights
@pytest.mark.parametrize("weight", ["nan", "inf", "-inf", "1e400"])
def test_non_finite_reward_weights_are_refused(tmp_path, weight):
    result, out = _invoke("train", "--model", NOWHERE, "--task", "harness-words",
                          "--output-dir", tmp_path / "run", "--reward-weight", f"format={weight}")
    _refused(result, out, "--reward-weight format=", "expected a finite number as the weight")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------- two spellings of one setting
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


# ---------------------------------------------------------------- task options
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
