"""mrtpo/yamlio.py, the one YAML reader: alias bombs (a few hundred bytes standing for 10^9 values)
are refused at once wherever mrtpo reads YAML (-o values, --config keys, a run's own config.yaml
read by --resume and credit), error messages show a bounded part of any value, recursive aliases
are refused, and a repeated key in a --config YAML is refused, naming it."""
from __future__ import annotations

import time

import pytest

import harness_task
from cli_runs import clean_error as _clean_error
from cli_runs import invoke
from limits import time_limit

harness_task.register()
pytestmark = pytest.mark.timeout(300)


def _invoke(*args):
    return invoke(*args, with_stderr=True)


#: ten levels of ten aliases: 10^10 values in 400 bytes
BOMB = "[" + ",".join(["x"] * 10) + "]"


def _bomb_yaml(key: str, inline: bool = False) -> str:
    """A YAML document whose `key` stands for 10^10 values through aliases."""
    lines = ["anchors:", "  - &a0 [" + ",".join(["x"] * 10) + "]"]
    for i in range(1, 10):
        lines.append(f"  - &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]")
    lines.append(f"{key}: *a9")
    return "\n".join(lines) + "\n"


def _flow_bomb() -> str:
    """The same as one flow value (for -o KEY=VALUE)."""
    text = "&a0 [" + ",".join(["x"] * 10) + "]"
    for i in range(1, 10):
        text = f"[{text}, " + ", ".join([f"&a{i} [" + ",".join([f'*a{i - 1}'] * 10) + "]"]) + "]"
    return text


# --- alias bombs ----------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["eval", "train", "blocks"])
def test_an_option_value_that_is_an_alias_bomb_is_refused_at_once(tiny_qwen2_dir, tmp_path, command):
    args = {"eval": ["eval", "harness-words", "--responses", tmp_path / "r.jsonl"],
            "train": ["train", "--task", "harness-words", "--model", tiny_qwen2_dir, "--output-dir", tmp_path / "o"],
            "blocks": ["blocks", "preview", "harness-words"]}[command]
    with time_limit(20, "an alias bomb in -o"):
        result, out = _invoke(*args, "-o", f"think={_flow_bomb()}")
    _clean_error(result, out, "aliases")


@pytest.mark.parametrize("key", ["lora_target_modules", "reward_weights", "task_args", "steps"])
def test_a_config_key_that_is_an_alias_bomb_is_refused_at_once(tiny_qwen2_dir, tmp_path, key):
    config = tmp_path / "c.yaml"
    config.write_text(_bomb_yaml(key).replace("anchors:", "run_name: x\nx_anchors:"))
    with time_limit(20, "an alias bomb in --config"):
        result, out = _invoke("train", "--config", config, "--model", tiny_qwen2_dir, "--output-dir", tmp_path / "o")
    _clean_error(result, out, str(config), "aliases")


def test_a_runs_own_config_that_is_an_alias_bomb_is_refused_on_resume_and_ignored_by_credit(run_copy):
    (run_copy / "config.yaml").write_text(_bomb_yaml("lora_target_modules").replace("anchors:", "x_anchors:"))
    with time_limit(20, "--resume on an alias bomb"):
        result, out = _invoke("train", "--resume", "--output-dir", run_copy)
    _clean_error(result, out, "config.yaml", "aliases")
    with time_limit(30, "credit on an alias bomb"):
        result, out = _invoke("credit", run_copy, "--limit", 1)
    assert result.exit_code == 0 and "Traceback" not in out, out


def test_error_messages_show_a_bounded_part_of_a_shared_value():
    """The Python API: a list that shares itself 10^9 times over is named in bounded time."""
    from mrtpo.harness import ConfigError, TrainConfig
    from mrtpo.textio import brief

    value: list = [1]
    for _ in range(9):
        value = [value] * 10
    start = time.perf_counter()
    assert len(brief(value)) < 300
    with pytest.raises(ConfigError, match=r"lora-target-modules|lora_target_modules") as err:
        TrainConfig(lora_target_modules=value)
    assert len(str(err.value)) < 1000 and time.perf_counter() - start < 5


def test_a_recursive_alias_is_refused(tmp_path, tiny_qwen2_dir):
    config = tmp_path / "c.yaml"
    config.write_text("task_args: &a {x: *a}\n")
    result, out = _invoke("train", "--config", config, "--model", tiny_qwen2_dir, "--output-dir", tmp_path / "o")
    _clean_error(result, out, "recursive")


# --- repeated keys ---------------------------------------------------------------------------
@pytest.mark.parametrize("text, key", [("steps: 1\nlr: 0.1\nsteps: 2\n", "steps"),
                                       ("task_args:\n  n: 1\n  n: 2\n", "n")])
def test_a_repeated_config_key_is_refused_naming_it(tmp_path, tiny_qwen2_dir, text, key):
    config = tmp_path / "c.yaml"
    config.write_text(text)
    result, out = _invoke("train", "--config", config, "--model", tiny_qwen2_dir, "--output-dir", tmp_path / "o")
    _clean_error(result, out, str(config), f"the key {key!r} is given twice")


# --- deep nesting and huge files -------------------------------------------------------------
DEEP = "[" * 3000 + "]" * 3000  # PyYAML's composer recursed into it: RecursionError, a traceback


def test_a_value_nested_thousands_deep_is_refused_in_one_line(tiny_qwen2_dir, tmp_path):
    result, out = _invoke("eval", "harness-words", "--responses", tmp_path / "r.jsonl", "-o", f"think={DEEP}")
    _clean_error(result, out, "nested more than")
    config = tmp_path / "c.yaml"
    config.write_text(f"task_args:\n  think: {DEEP}\n")
    result, out = _invoke("train", "--config", config, "--model", tiny_qwen2_dir, "--output-dir", tmp_path / "o")
    _clean_error(result, out, str(config), "nested more than")


def test_a_runs_own_config_nested_deep_is_refused_on_resume_and_ignored_by_credit(run_copy):
    with (run_copy / "config.yaml").open("a") as f:
        f.write(f"x_deep: {DEEP}\n")
    result, out = _invoke("train", "--resume", "--output-dir", run_copy)
    _clean_error(result, out, "config.yaml", "nested more than")
    result, out = _invoke("credit", run_copy, "--limit", 1)
    assert result.exit_code == 0 and "Traceback" not in out, out


def test_a_runs_huge_config_is_not_read_by_credit(run_copy):
    """A sparse 100 GB config.yaml: credit's size check comes before the read (was MemoryError)."""
    import os

    config = run_copy / "config.yaml"
    config.unlink()
    with config.open("wb") as f:
        f.truncate(100 << 30)
    assert os.stat(config).st_blocks == 0 or pytest.skip("no sparse files here")
    with time_limit(30, "credit on a huge config.yaml"):
        result, out = _invoke("credit", run_copy, "--limit", 1)
    assert result.exit_code == 0 and "Traceback" not in out, out
