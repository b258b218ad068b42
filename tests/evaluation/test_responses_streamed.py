"""The responses reader streams its rows and refuses what is not a file (issue 61, B): a FIFO
or a device as --responses is refused at once by eval, blocks preview and credit, and eval's
memory does not grow with the number of rows it reads."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from limits import peak_rss_mb

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]
HELPERS = ROOT / "tests" / "helpers"


def _mrtpo(*args, timeout=60):
    code = "import harness_task; harness_task.register()\nfrom mrtpo.cli import main; main()"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HELPERS), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.mark.parametrize("command", ["eval", "preview", "credit"])
@pytest.mark.parametrize("which", ["fifo", "urandom"])
def test_a_fifo_or_a_device_as_responses_is_refused_at_once(tmp_path, tiny_qwen2_dir, command, which):
    if which == "fifo":
        path = tmp_path / "responses.jsonl"
        os.mkfifo(path)  # nobody writes to it: opening it would wait for ever
    else:
        path = Path("/dev/urandom")
    args = {"eval": ["eval", "harness-words", "--responses", path],
            "preview": ["blocks", "preview", "harness-words", "--responses", path],
            "credit": ["credit", "harness-words", "--model", tiny_qwen2_dir, "--responses", path]}[command]
    start = time.monotonic()
    done = _mrtpo(*args)  # subprocess.TimeoutExpired: it waited for the FIFO's writer
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    said = "is a named pipe (FIFO), not a file" if which == "fifo" else "is a device, not a file"
    assert f"{path}: {said}" in done.stderr, done.stderr[-2000:]
    assert time.monotonic() - start < 45


def test_eval_memory_does_not_grow_with_the_rows_it_reads(tmp_path):
    """~33 MB of short rows (600k) that pair with no example: eval keeps a count, not the rows."""
    def responses(path: Path, extra: int) -> Path:
        with path.open("w") as f:
            for i in range(8):
                f.write(json.dumps({"id": f"w{i}", "response": "<answer>select</answer>"}) + "\n")
            row = '{"id": "other-%07d", "response": "a short one"}\n'
            f.writelines(row % i for i in range(extra))
        return path

    code = ("import sys, harness_task; harness_task.register()\n"
            "from mrtpo.cli import main\n"
            "sys.argv = ['mrtpo', 'eval', 'harness-words', '--responses', {path!r}, '--json']\n"
            "try:\n    main()\nexcept SystemExit as done:\n    assert done.code == 0, done.code\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HELPERS), str(ROOT)]), "OMP_NUM_THREADS": "1"}
    small, _ = peak_rss_mb(code.format(path=str(responses(tmp_path / "small.jsonl", 10))), env=env)
    big_file = responses(tmp_path / "big.jsonl", 600_000)
    assert big_file.stat().st_size > 30e6
    big, out = peak_rss_mb(code.format(path=str(big_file)), env=env)
    assert '"n": 8' in out
    assert big - small < 60, f"peak RSS {small:.0f} MB for 18 rows, {big:.0f} MB for 600,008"
