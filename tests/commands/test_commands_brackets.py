"""Messages, names and paths printed through rich keep their brackets (printed, not read as
markup)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import harness_task
from mrtpo.cli import app

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


# ------------------------------------------------------- brackets printed, not markup
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


def test_listings_print_names_and_paths_with_brackets(tmp_path):
    cache = tmp_path / "cache[bold]x"
    result, out = _invoke("model", "ls", "--cache-dir", cache)
    assert result.exit_code == 0 and "cache[bold]x" in out, out
