"""Task options are read one way (YAML scalars, as TRL's launcher reads them) and checked
against their declared types in one place, so every command (train, eval, blocks, credit, the
TRL launcher) gives the same clean error."""
from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

import harness_task
from mrtpo.cli import app
from mrtpo.commands.options import parse_task_options
from mrtpo.tasks import get_task

harness_task.register()
ANSI = re.compile(r"\x1b\[[0-9;]*m")
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def _invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args], env=ENV, prog_name="mrtpo")
    return result, " ".join(ANSI.sub("", result.output).split())


def _task(name, *items):
    return get_task(name, **parse_task_options(list(items)))


def test_values_mean_what_they_say():
    assert _task("instruct", "loose=no").loose is False  # "no" is not a truthy string
    assert _task("instruct", "loose=yes").loose is True
    assert _task("text2sql", "timeout=2.5").timeout == 2.5
    assert _task("text2sql", "timeout=1e1").timeout == 10.0  # numeric text for a float option
    assert _task("text2sql", "sample_rows=2").sample_rows == 2
    assert _task("text2sql", "workers=none").workers is None


@pytest.mark.parametrize("item, words", [
    ("think=maybe", "option think='maybe': expected true or false"),
    ("timeout=abc", "option timeout='abc': expected a number"),
    ("sample_rows=[1]", "option sample_rows=[1]: expected a whole number"),
    ("nosuch=1", "task 'text2sql' has no option 'nosuch'. Its options: mode, think,"),
    ("mode=xyz", "mode='xyz': use one of bag, set, ordered"),
])
def test_bad_options_are_refused_by_every_command(tiny_qwen2_dir, tmp_path, item, words):
    commands = [
        ("eval", "text2sql", "--responses", tmp_path / "none.jsonl"),
        ("blocks", "lint", "text2sql", "--plain"),
        ("blocks", "preview", "text2sql"),
        ("credit", "text2sql", "--model", tiny_qwen2_dir),
        ("train", "--model", tiny_qwen2_dir, "--task", "text2sql", "--steps", "1",
         "--output-dir", tmp_path / "run", "--verify-workers", "0"),
    ]
    for cmd in commands:
        result, out = _invoke(*cmd, "-o", item)
        assert result.exit_code == 2, (cmd, out)
        assert words in out, (cmd[:2], out)
        assert "Traceback" not in out and not isinstance(result.exception, TypeError)


def test_trl_launcher_reads_and_checks_task_args_the_same_way(tmp_path, capsys):
    from mrtpo.integrations.trl import _task_args, main

    items = ["loose=no", "think=true", "match=template", "x=[1, 2]", "y=null", "z=1e-5"]
    assert _task_args(items) == parse_task_options(items)
    with pytest.raises(SystemExit) as exc:
        main(["--model_name_or_path", "unused", "--task", "instruct", "--task_args", "think=maybe",
              "--output_dir", str(tmp_path / "trl"), "--report_to", "none", "--use_cpu"])
    assert exc.value.code == 2
    assert "option think='maybe': expected true or false" in capsys.readouterr().err
