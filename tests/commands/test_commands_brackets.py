"""Messages, names and paths printed through rich keep their brackets (printed, not read as
markup)."""
from __future__ import annotations

import json

import harness_task
import pytest
from cli_runs import NOWHERE
from cli_runs import invoke as _invoke
from cli_runs import refused as _refused
from cli_runs import yaml_file as _yaml

harness_task.register()
pytestmark = pytest.mark.timeout(300)


# ------------------------------------------------------- brackets printed, not markup
def test_a_missing_tracker_message_keeps_its_brackets(monkeypatch, tmp_path):
    import mrtpo.harness.run.trackers as trackers

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


def test_listings_print_names_and_paths_with_brackets(tmp_path):
    cache = tmp_path / "cache[bold]x"
    result, out = _invoke("model", "ls", "--cache-dir", cache)
    assert result.exit_code == 0 and "cache[bold]x" in out, out


def test_help_texts_hold_no_bracket_that_rich_would_read_as_markup():
    """`--help` renders through rich: `[mrtpo]` in a help text would vanish from what users read
    (as `--run-name`'s `<task>-<advantage>[-saw]-[mrtpo]-<time>` once did)."""
    import typer.main
    from rich.markup import RE_TAGS

    from mrtpo.cli import app

    def commands(command, path):
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():  # a group's subcommands
            yield from commands(sub, f"{path} {name}")

    every = list(commands(typer.main.get_command(app), "mrtpo"))
    assert len(every) > 10  # every command reached
    eaten = []
    for path, command in every:
        texts = {"(command)": command.help or ""} | {p.name: getattr(p, "help", None) or "" for p in command.params}
        eaten += [(path, name, m.group(0)) for name, text in texts.items()
                  for m in RE_TAGS.finditer(text) if not m.group(2)]  # group 2: escaping backslashes
    assert not eaten, eaten
