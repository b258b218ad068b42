"""`-o/--task-option KEY=VALUE`, one spelling in every command, through typer's CliRunner.

The task error hints name the command-line form (`-o skip_unsupported=true`, `-o db_root=DIR`);
these tests follow each hint from the command line and check that it works, and that every
command reads the option with the same parser (mrtpo/commands/options.py).
"""
from __future__ import annotations

import json
import re
import sqlite3

import pytest
from typer.testing import CliRunner

from mrtpo.cli import app
from mrtpo.commands.options import parse_task_options
from mrtpo.commands.train import overrides_from_flags

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def _invoke(*args):
    result = CliRunner().invoke(app, [str(a) for a in args], env=ENV, prog_name="mrtpo")
    return result, ANSI.sub("", result.output)


@pytest.fixture()
def ifbench_like(tmp_path):
    """IFBench's row layout: one row whose id has no checker here, one the task supports."""
    rows = [{"key": 1, "prompt": "Describe a river. Start your response with a verb.",
             "instruction_id_list": ["words:start_verb"], "kwargs": [{}]},
            {"key": 2, "prompt": "Name a colour. Wrap your entire response with double quotation marks.",
             "instruction_id_list": ["startend:quotation"], "kwargs": [{}]}]
    path = tmp_path / "IFBench_mini.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_blocks_lint_follows_the_instruct_hint(ifbench_like):
    result, out = _invoke("blocks", "lint", "instruct", "--data", ifbench_like, "--plain")
    assert result.exit_code == 2
    assert "words:start_verb (1 rows, first at" in out
    assert "on the command line: -o skip_unsupported=true" in out  # the hint names the CLI form

    result, out = _invoke("blocks", "lint", "instruct", "--data", ifbench_like, "--plain",
                          "-o", "skip_unsupported=true")
    assert result.exit_code == 0, out
    assert "blocks lint: task instruct: 1 examples" in result.stdout
    assert "linted 1 examples" in result.stderr


def test_blocks_preview_takes_the_option_too(ifbench_like):
    # Python's spelling (the hint's `skip_unsupported=True`) is the same bool
    result, out = _invoke("blocks", "preview", "instruct", "--data", ifbench_like, "--jsonl",
                          "--task-option", "skip_unsupported=True")
    assert result.exit_code == 0, out
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert records and {r["example"] for r in records} == {"2"}  # row 1 dropped


def test_blocks_option_errors_exit_2(ifbench_like):
    result, out = _invoke("blocks", "lint", "instruct", "--data", ifbench_like, "-o", "bogus=1")
    assert result.exit_code == 2 and "task 'instruct' has no option 'bogus'. Its options: think," in out
    result, out = _invoke("blocks", "preview", "instruct", "-o", "skip_unsupported")
    assert result.exit_code == 2 and "--task-option" in out and "write KEY=VALUE" in out


def test_text2sql_db_root_hint_works_from_the_command_line(tmp_path):
    dbs = tmp_path / "dbs"
    dbs.mkdir()
    with sqlite3.connect(dbs / "shop.sqlite") as con:
        con.execute("CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT, price REAL)")
        con.executemany("INSERT INTO item VALUES (?, ?, ?)", [(1, "pen", 1.5), (2, "ink", 4.0)])
    data = tmp_path / "questions" / "q.jsonl"
    data.parent.mkdir()
    data.write_text(json.dumps({"id": "s1", "question": "How many items are there?",
                                "db_id": "shop", "query": "SELECT count(*) FROM item"}) + "\n")

    result, out = _invoke("blocks", "lint", "text2sql", "--data", data, "--plain")
    assert result.exit_code == 2 and "no database 'shop' found" in out
    assert "on the command line: -o db_root=DIR" in out

    result, out = _invoke("blocks", "lint", "text2sql", "--data", data, "--plain", "-o", f"db_root={dbs}")
    assert result.exit_code in (0, 1), out  # loaded and linted (1 only if a rule fires)
    assert "blocks lint: task text2sql: 1 examples" in result.stdout


@pytest.mark.parametrize("args", [
    ["eval", "instruct", "--responses", "r.jsonl"],
    ["credit", "instruct", "--model", "smollm2-135m"],
    ["train", "--model", "m", "--task", "instruct"],
    ["blocks", "lint", "instruct"],
    ["blocks", "preview", "instruct"],
], ids=lambda a: " ".join(a[:2]))
def test_every_command_reads_the_option_with_the_same_parser(args):
    result, out = _invoke(*args, "-o", "no_equals_sign")
    assert result.exit_code == 2, out
    assert "Invalid value for --task-option: 'no_equals_sign': write KEY=VALUE" in " ".join(out.split())


def test_train_help_shows_task_option_not_the_old_name():
    result, out = _invoke("train", "--help")
    assert result.exit_code == 0
    assert re.search(r"--task-option\s+-o\b", out)
    assert "--task-arg" not in out


def test_train_keeps_task_arg_as_a_hidden_alias():
    base = {name: None for name in ("task_args", "legacy_task_arg", "reward_weights", "lr")}
    got = overrides_from_flags({**base, "legacy_task_arg": ["mode=set", "think=True"],
                                "task_args": ["mode=bag", "timeout=2.5"]})
    assert got == {"task_args": {"mode": "bag", "think": True, "timeout": 2.5}}  # -o wins on mode
    assert overrides_from_flags({**base, "legacy_task_arg": ["think=false"]}) == {"task_args": {"think": False}}
    assert overrides_from_flags(base) == {}  # neither given: the config file's task_args stay
    # the alias is a real flag of the command, parsed by the same parser
    result, out = _invoke("train", "--model", "m", "--task", "instruct", "--task-arg", "oops")
    assert result.exit_code == 2 and "Invalid value for --task-arg: 'oops'" in " ".join(out.split())


def test_values_parse_the_same_way():
    # YAML scalars, as TRL's launcher reads --task_args ("1e-5" and "none" stay text here; the
    # option's declared type turns them into a number / None when the task is built)
    got = parse_task_options(["a=true", "b=False", "c=null", "d=3", "e=1.0e-5", "f=[1, 2]",
                              "g=/data/dbs", 'h="7"', "i=set", " j =x=y", "k=no", "l=1e-5"])
    assert got == {"a": True, "b": False, "c": None, "d": 3, "e": 1e-5, "f": [1, 2],
                   "g": "/data/dbs", "h": "7", "i": "set", "j": "x=y", "k": False, "l": "1e-5"}
    assert parse_task_options(None) == {} and parse_task_options(["k=1", "k=2"]) == {"k": 2}
