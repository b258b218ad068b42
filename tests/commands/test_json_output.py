"""One JSON convention for every command (docs/json-output.md): `--json` is
one object with a "schema" field, `--jsonl` one record per line; stdout parses as it is."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from mrtpo.cli import app

runner = CliRunner()


def _json(*args, code=0):
    r = runner.invoke(app, list(args))
    assert r.exit_code == code, r.output
    return json.loads(r.stdout)


def test_tasks_ls_json():
    doc = _json("tasks", "ls", "--json")
    assert doc["schema"] == "mrtpo.tasks/1"
    by_name = {t["name"]: t for t in doc["tasks"]}
    assert by_name["text2sql"]["rewards"] == ["format", "executes", "result"]
    assert by_name["text2sql"]["origin"] and by_name["text2sql"]["error"] is None


def test_blocks_lint_json_matches_the_report():
    from mrtpo.blocks.lint import lint_task
    from mrtpo.tasks import get_task

    r = runner.invoke(app, ["blocks", "lint", "toolcall", "-n", "3", "--json"])
    doc = json.loads(r.stdout)
    task = get_task("toolcall")
    report = lint_task(task, task.load()[:3])
    assert r.exit_code == (1 if report.findings else 0)
    assert doc["schema"] == "mrtpo.blocks.lint/1" and doc["task"] == "toolcall"
    assert (doc["examples"], doc["responses"], doc["blocks"]) == (report.examples, report.responses, report.blocks)
    assert doc["findings"] == [f.to_dict() for f in report.findings]
    assert doc["clean"] == (not report.findings)
    assert sum(r["findings"] for r in doc["rules"].values()) == len(report.findings)


def test_blocks_preview_json_is_one_document_and_jsonl_its_records():
    doc = _json("blocks", "preview", "toolcall", "-n", "2", "--json")
    r = runner.invoke(app, ["blocks", "preview", "toolcall", "-n", "2", "--jsonl"])
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert doc["schema"] == "mrtpo.blocks.preview/1" and doc["task"] == "toolcall"
    assert doc["records"] == lines and len(lines) == 4  # reference + corrupted per example
    r = runner.invoke(app, ["blocks", "preview", "toolcall", "--json", "--jsonl"])
    assert r.exit_code == 2 and "not both" in r.output
