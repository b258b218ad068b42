"""TrainConfig: YAML + flags, validation messages that say what to do, resume rules."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from mrtpo.harness.config import ConfigError, TrainConfig, resolve


def test_every_field_has_a_default_and_a_why():
    cfg = TrainConfig()  # constructible with defaults alone
    for f in dataclasses.fields(TrainConfig):
        assert f.metadata.get("help"), f"{f.name} has no help line"
    assert cfg.clip_high == cfg.epsilon
    assert TrainConfig(epsilon_high=0.28).clip_high == 0.28


def test_yaml_is_overridden_by_flags(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: some/model\ntask: toolcall\nnum-generations: 4\nlr: 0.001\n"
                    "lora_target_modules: [q_proj, v_proj]\n")
    cfg = resolve(path, {"lr": 0.5, "output_dir": str(tmp_path / "run")})
    assert (cfg.model, cfg.task, cfg.num_generations, cfg.lr) == ("some/model", "toolcall", 4, 0.5)
    assert cfg.lora_target_modules == ["q_proj", "v_proj"]


def test_default_run_dir_is_under_runs():
    cfg = resolve(None, {"task": "toolcall", "advantage": "grpo", "saw": "reward"})
    assert cfg.output_dir.startswith("runs/toolcall-grpo-saw-mrtpo-")
    assert resolve(None, {"run_name": "mine"}).output_dir == "runs/mine"


@pytest.mark.parametrize("values, message", [
    ({"num_generations": 1}, "--num-generations must be >= 2"),
    ({"loss_type": "bnpo"}, "--loss-type must be one of dapo, grpo, dr_grpo"),
    ({"saw": "reward", "advantage": "gdpo"}, "use --saw advantage"),
    ({"saw": "advantage", "advantage": "grpo"}, r"use --saw reward \(GRPO-h\)"),
    ({"scale_rewards": "batch"}, "applies to --advantage grpo only"),
    ({"grad_accum": 9, "batch_prompts": 2, "num_generations": 4}, "lower it"),
    ({"top_p": 0.0}, "--top-p"),
    ({"eval_every": 2, "heldout": 0}, "--eval-every measures the examples --heldout holds out; pass --heldout N >= 1"),
    ({"heldout_every": 2, "heldout": 0}, "pass --heldout N >= 1 too"),  # its older name, the same setting
    ({"heldout_every": -1}, "--eval-every must be >= 0"),
    ({"mrtpo_lambda": 1.5}, r"--mrtpo-lambda must be in \[0, 1\]"),
])
def test_invalid_values_say_what_to_do(values, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**values)


def test_unknown_settings_get_a_suggestion(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("num_generation: 4\n")
    with pytest.raises(ConfigError, match="unknown setting 'num_generation'.*Did you mean num_generations"):
        resolve(path)
    with pytest.raises(ConfigError, match="no such file"):
        resolve(tmp_path / "missing.yaml")


def test_resume_starts_from_the_saved_config(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    saved = TrainConfig(model="m", task="toolcall", steps=2, lr=0.01, output_dir=str(run))
    saved.save(run / "config.yaml")
    assert yaml.safe_load((run / "config.yaml").read_text())["lr"] == 0.01
    cfg = resolve(None, {"resume": True, "output_dir": str(run), "steps": 4})
    assert (cfg.model, cfg.lr, cfg.steps, cfg.resume) == ("m", 0.01, 4, True)
    with pytest.raises(ConfigError, match=r"--resume would change settings that alter training \(--lr"):
        resolve(None, {"resume": True, "output_dir": str(run), "lr": 0.1})
    with pytest.raises(ConfigError, match="pass its directory with --output-dir"):
        resolve(None, {"resume": True})
    with pytest.raises(ConfigError, match="does not exist"):
        resolve(None, {"resume": True, "output_dir": str(tmp_path / "nope")})


def test_a_dtype_the_device_cannot_compute_in_is_refused_before_loading():
    import torch

    from mrtpo.harness.policy import resolve_dtype

    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("bfloat16", torch.device("cpu")) == torch.bfloat16  # CPUs compute in bf16
    from mrtpo.harness.policy import _cannot_compute

    # every dtype --dtype names computes on a CPU; the probe itself names what a device lacks
    assert _cannot_compute(torch.float16, torch.device("cpu")) is None
    assert "not implemented for 'Float8_e4m3fn'" in _cannot_compute(torch.float8_e4m3fn, torch.device("cpu"))


@pytest.mark.parametrize("given, read", [
    ({"eval_every": 0, "heldout_every": 25}, {"eval_every": 25}),  # what every kept benchmark run saved
    ({"eval_every": 5, "heldout_every": 0}, {"eval_every": 5}),
    ({"eval_every": 4, "heldout_every": 6}, {"eval_every": 4}),  # both on: the more frequent
    ({"heldout_every": 3}, {"eval_every": 3}),
    # eval_size held examples out of --data only with --eval-every on and no --eval-data
    ({"eval_every": 2, "eval_size": 20, "heldout": 8}, {"eval_every": 2, "heldout": 20}),
    ({"eval_every": 2, "eval_size": 4, "heldout": 8}, {"eval_every": 2, "heldout": 8}),
    ({"eval_every": 2, "eval_size": 4}, {"eval_every": 2, "heldout": 4}),
    ({"eval_every": 0, "eval_size": 20, "heldout": 8}, {"eval_every": 0, "heldout": 8}),
    ({"eval_every": 2, "eval_size": 20, "heldout": 8, "eval_data": "held.jsonl"},
     {"eval_every": 2, "heldout": 8, "eval_data": "held.jsonl"}),
])
def test_older_names_are_read_as_todays(tmp_path, given, read):
    """--heldout-every and --eval-size, as a config file (a config.yaml written before the merge)
    and a TrainConfig call give them."""
    from mrtpo.harness.config import read_yaml

    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(given))
    assert read_yaml(path) == read
    cfg = TrainConfig(**given)  # where `heldout` is not given, a call has its default
    assert {k: getattr(cfg, k) for k in read} == (read if "heldout" in given or "eval_size" not in given
                                                   else {**read, "heldout": max(given["eval_size"], 8)})
    assert cfg.heldout_every == cfg.eval_every and cfg.eval_size == cfg.heldout  # read back as what they became


def test_every_kept_run_config_reads():
    """The config.yaml files of the runs kept under benchmarks/results (written before the merge)
    read, with their heldout_every as the cadence."""
    from pathlib import Path

    from mrtpo.harness.config import read_yaml

    paths = sorted((Path(__file__).parents[2] / "benchmarks" / "results").glob("**/config.yaml"))
    assert paths
    for path in paths:
        raw = yaml.safe_load(path.read_text())
        values = read_yaml(path)
        assert values["eval_every"] == (raw.get("heldout_every") or raw.get("eval_every", 0)), path
        assert not {"heldout_every", "eval_size"} & set(values)
