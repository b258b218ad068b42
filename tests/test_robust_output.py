"""Issue 40, items 12, 13 and 17: where output goes wrong.

- 13: every command that prints gives one line on stderr and exit status 1, not an OSError
  traceback, when its standard output is on a full disk (`> /dev/full`); a closed pipe still
  ends quietly.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[1]
FULL = Path("/dev/full")


def _mrtpo(*args, stdout, cwd=None):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", "mrtpo", *map(str, args)], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, env=env, cwd=cwd, timeout=240)


@pytest.fixture(scope="module")
def responses(tmp_path_factory):
    from mrtpo.tasks import get_task

    first = get_task("toolcall").load()[0]
    path = tmp_path_factory.mktemp("out") / "responses.jsonl"
    path.write_text(json.dumps({"id": first.id, "response": "no call"}) + "\n")
    return path


@pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["--help"], ["tasks", "ls"], ["model", "ls"],
                                  ["eval", "toolcall", "--responses", "{responses}", "--missing", "skip", "--json"],
                                  ["eval", "toolcall", "--responses", "{responses}", "--missing", "skip"]],
                         ids=["help", "tasks-ls", "model-ls", "eval-json", "eval-table"])
def test_a_full_disk_under_stdout_is_one_line(responses, args):
    args = [a.format(responses=responses) for a in args]
    with open(FULL, "w") as full:
        done = _mrtpo(*args, stdout=full)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    assert "cannot write the output to standard output (No space left on device)" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_closed_pipe_still_ends_quietly():
    proc = subprocess.Popen([sys.executable, "-m", "mrtpo", "tasks", "ls"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err, err
