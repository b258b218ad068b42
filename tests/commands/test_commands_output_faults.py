"""Where output goes wrong.

- every command that prints gives one line on stderr and exit status 1, not an OSError
  traceback, when its standard output is on a full disk (`> /dev/full`); a closed pipe still
  ends quietly;
- a full disk during a checkpoint save or an export is one line naming what was kept."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]
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


# --- a full disk during a checkpoint save or an export ----------------------------------------
# A file-size limit (RLIMIT_FSIZE) fails writes as a full disk does, without a small disk to fill:
# 20 KB stops safetensors' adapter file (its error wraps the OS's), 40 KB torch's optimizer.pt
# (torch says only "unexpected pos").
LIMITED = """
import resource, signal, sys
sys.path.insert(0, {tests!r})
import harness_task
harness_task.register()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
sys.argv = ["mrtpo"] + sys.argv[1:]
from mrtpo.cli import main
main()
"""


def _limited(limit: int, *args):
    code = LIMITED.format(tests=str(Path(__file__).resolve().parents[1] / "helpers"), limit=limit)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=240)


@pytest.fixture(scope="module")
def one_step_run(tiny_qwen2_dir, tmp_path_factory):
    import harness_task
    from small_runs import small_config

    from mrtpo.harness import train

    harness_task.register()
    out = tmp_path_factory.mktemp("full") / "run"
    train(small_config(tiny_qwen2_dir, out, steps=1))
    return out


@pytest.mark.parametrize("limit", [20_000, 40_000], ids=["safetensors", "torch"])
def test_a_save_that_finds_no_room_names_the_last_checkpoint_and_resume_still_works(one_step_run, tmp_path, limit):
    import shutil

    run = Path(shutil.copytree(one_step_run, tmp_path / "run"))
    done = _limited(limit, "train", "--resume", "--output-dir", run, "--steps", 2)
    err = " ".join(done.stderr.split())
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "file too large" in err and "while saving the checkpoint of step 2" in err, err
    assert "the last checkpoint is step 1" in err and "--resume" in err, err
    assert sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(("step-", ".tmp"))) == \
        ["step-000001"]
    done = _limited(1 << 30, "train", "--resume", "--output-dir", run, "--steps", 2)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run / "checkpoints" / "step-000002" / "state.json").is_file()


def test_an_export_that_finds_no_room_is_one_line(one_step_run, tmp_path):
    done = _limited(20_000, "export", one_step_run, tmp_path / "out", "--merge")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "file too large" in done.stderr and "nothing was written" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.export-*"))


def test_an_export_through_a_dangling_link_says_so(one_step_run, tmp_path):
    from typer.testing import CliRunner

    from mrtpo.cli import app

    (tmp_path / "parent").symlink_to(tmp_path / "nowhere")
    result = CliRunner().invoke(app, ["export", str(one_step_run), str(tmp_path / "parent" / "out")])
    out = " ".join(result.output.split())
    assert result.exit_code == 2 and "Traceback" not in out, out
    assert "Free space" not in out and "symbolic link" in out, out
