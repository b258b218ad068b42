"""Standard output carries the documents and nothing else (issue 61, C): a full device under
it is one line on stderr whichever way mrtpo is started (the console script too), and what a
task's code prints never lands in a --json or --jsonl document (mrtpo.commands.jsonout)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import hostile_task

pytestmark = pytest.mark.timeout(300)
FULL = Path("/dev/full")


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    where = hostile_task.install(tmp_path_factory.mktemp("plugin"))
    (where / "responses.jsonl").write_text("".join(
        json.dumps({"id": f"w{i}", "response": "<answer>select</answer>"}) + "\n" for i in range(2)))
    return where


COMMANDS = {"tasks-ls-json": ["tasks", "ls", "--json"],
            "eval-json": ["eval", "hostile", "--responses", "{r}", "--limit", 2, "--json"],
            "eval-table": ["eval", "hostile", "--responses", "{r}", "--limit", 2],
            "lint-json": ["blocks", "lint", "hostile", "-o", "n=1", "--json"],
            "preview-jsonl": ["blocks", "preview", "hostile", "-n", 1, "--jsonl"]}


@pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full")
@pytest.mark.parametrize("which", list(COMMANDS))
def test_the_console_script_on_a_full_device_is_one_line(plugin, which):
    args = [str(a).format(r=plugin / "responses.jsonl") for a in COMMANDS[which]]
    with open(FULL, "w") as full:
        done = hostile_task.mrtpo(plugin, *args, stdout=full, script=True, timeout=120)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr[-3000:]
    assert "cannot write the output to standard output (No space left on device)" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr[-3000:]


@pytest.mark.parametrize("mode", ["print", "printload"], ids=["in-the-verifier", "in-this-process"])
@pytest.mark.parametrize("which", ["eval-json", "lint-json", "preview-jsonl"])
def test_what_task_code_prints_goes_to_stderr_under_json(plugin, mode, which):
    args = [str(a).format(r=plugin / "responses.jsonl") for a in COMMANDS[which]]
    done = hostile_task.mrtpo(plugin, *args, "-o", f"mode={mode}", "-o", "size=200000", timeout=120)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    docs = [json.loads(line) for line in done.stdout.splitlines()] if which.endswith("jsonl") \
        else [json.loads(done.stdout)]
    assert docs and all(isinstance(d, dict) for d in docs)
    assert ("x" * 1000 if mode == "print" else "loading the hostile data") in done.stderr
