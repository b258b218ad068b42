"""Torn logs, corrupt and tampered checkpoints, the run lock, --resume to fewer steps, and
leftovers of an interrupted save, on real training runs of a tiny model."""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import harness_task
import pytest
from small_runs import small_config as _cfg
from small_runs import step_dir

from mrtpo.harness import ConfigError, train
from mrtpo.harness.run import checkpoints
from mrtpo.harness.run.files import JsonlLog
from mrtpo.harness.run.lock import RunDirLocked, RunLock

harness_task.register()
pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def runs(tiny_qwen2_dir, tmp_path_factory):
    """Run A: 2 steps, a checkpoint after each. Run B: 1 step with another seed."""
    base = tmp_path_factory.mktemp("runs")
    train(_cfg(tiny_qwen2_dir, base / "a", steps=2))
    train(_cfg(tiny_qwen2_dir, base / "b", steps=1, seed=7))
    return base


@pytest.fixture
def run_a(runs, tmp_path):
    """A fresh copy of run A to damage."""
    return Path(shutil.copytree(runs / "a", tmp_path / "a"))


# --- a torn last line is dropped with a warning -------------------------------------------
def test_torn_last_line_is_dropped_and_a_bad_middle_line_named(tmp_path, caplog):
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "reward": 0.7}\n{"step": 3, "rew')
    with caplog.at_level(logging.WARNING):
        assert [r["step"] for r in JsonlLog(log).read()] == [1, 2]
        JsonlLog(log).truncate_after(1)
    assert "torn last line" in caplog.text and "line 3" in caplog.text
    assert log.read_text() == '{"step": 1, "reward": 0.5}\n'
    log.write_text('{"step": 1}\n{"step": 2, "rew\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl, line 2: not valid JSON"):
        JsonlLog(log).read()


# --- a corrupt newest checkpoint is skipped; leftovers are removed ---------------------
def test_resume_falls_back_past_a_corrupt_checkpoint(tiny_qwen2_dir, run_a, caplog):
    (step_dir(run_a, 2) / "optimizer.pt").write_bytes(b"")  # zero bytes: torch.load aborts on it
    for name in ("metrics.jsonl", "completions.jsonl"):  # the crash also tore the logs
        with (run_a / name).open("a") as f:
            f.write('{"step": 3, "torn')
    root = run_a / "checkpoints"
    (root / ".tmp-step-000003-x1y2").mkdir()
    (root / ".tmp-step-000003-x1y2" / "optimizer.pt").write_bytes(b"half")
    (root / ".latest-abc123").write_text("step-000003")
    with caplog.at_level(logging.WARNING):
        result = train(_cfg(tiny_qwen2_dir, run_a, steps=3, resume=True))
    assert "optimizer.pt is 0 bytes" in caplog.text and "resuming from step-000001" in caplog.text
    assert [r["step"] for r in result.history] == [1, 2, 3]
    assert [r["step"] for r in JsonlLog(run_a / "metrics.jsonl").read()] == [1, 2, 3]
    assert not list(root.glob(".tmp-step-*")) and not list(root.glob(".latest-*"))
    assert checkpoints.problems(step_dir(run_a, 3)) == ""


def _truncate(p: Path):
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _garble(p: Path):
    p.write_bytes(os.urandom(p.stat().st_size))


CORRUPTIONS = {
    "adapter truncated": ("adapter/adapter_model.safetensors", _truncate, "bytes"),
    "adapter empty": ("adapter/adapter_model.safetensors", lambda p: p.write_bytes(b""), "0 bytes"),
    "adapter garbage": ("adapter/adapter_model.safetensors", _garble, "SHA-256 differs"),
    "adapter missing": ("adapter/adapter_model.safetensors", Path.unlink, "is missing"),
    "optimizer truncated": ("optimizer.pt", _truncate, "bytes"),
    "optimizer garbage": ("optimizer.pt", _garble, "SHA-256 differs"),
    "rng empty": ("rng.pt", lambda p: p.write_bytes(b""), "0 bytes"),
    "rng missing": ("rng.pt", Path.unlink, "is missing"),
    "state garbage": ("state.json", lambda p: p.write_text("{not json"), "not valid JSON"),
    "state without step": ("state.json", lambda p: p.write_text('{"stp": 2}'), "does not hold a step"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_each_corrupt_file_is_named_and_skipped(run_a, case, caplog):
    name, damage, words = CORRUPTIONS[case]
    damage(step_dir(run_a, 2) / name)
    with caplog.at_level(logging.WARNING):
        assert checkpoints.resume_point(run_a) == step_dir(run_a, 1)
    assert name.split("/")[-1] in caplog.text and words in caplog.text, caplog.text


def test_no_intact_checkpoint_is_a_clear_error(tiny_qwen2_dir, run_a):
    for step in (1, 2):
        (step_dir(run_a, step) / "rng.pt").write_bytes(b"\0" * 10)
    with pytest.raises(checkpoints.CheckpointError, match=r"no intact checkpoint.*rng\.pt"):
        train(_cfg(tiny_qwen2_dir, run_a, steps=3, resume=True))


# --- tampered checkpoints ------------------------------------------------------------------
def test_state_json_with_another_step_is_refused(run_a):
    state = step_dir(run_a, 2) / "state.json"
    state.write_text(json.dumps({**json.loads(state.read_text()), "step": 1}))
    assert "says step 1" in checkpoints.problems(step_dir(run_a, 2))
    assert checkpoints.resume_point(run_a) == step_dir(run_a, 1)


def test_optimizer_from_another_run_is_refused(runs, run_a):
    shutil.copy(runs / "b" / "checkpoints" / "step-000001" / "optimizer.pt", step_dir(run_a, 2) / "optimizer.pt")
    assert "optimizer.pt" in checkpoints.problems(step_dir(run_a, 2))
    shutil.rmtree(step_dir(run_a, 1))  # a whole checkpoint of run B copied in
    shutil.copytree(runs / "b" / "checkpoints" / "step-000001", step_dir(run_a, 1))
    assert "belongs to another run" in checkpoints.problems(step_dir(run_a, 1))
    with pytest.raises(checkpoints.CheckpointError, match="no intact checkpoint"):
        checkpoints.resume_point(run_a)


# --- one run per directory ------------------------------------------------------------------
def _hold_lock(run_dir: Path) -> subprocess.Popen:
    code = ("import sys, time; from mrtpo.harness.run.lock import RunLock; "
            f"l = RunLock({str(run_dir)!r}).acquire(); print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_run_in_a_locked_directory_is_refused(tiny_qwen2_dir, tmp_path):
    holder = _hold_lock(tmp_path / "run")
    try:
        with pytest.raises(RunDirLocked, match=rf"in use by another run \(pid {holder.pid} on "):
            train(_cfg(tiny_qwen2_dir, tmp_path / "run", steps=1))
        assert not (tmp_path / "run" / "metrics.jsonl").exists()
        assert not (tmp_path / "run" / "config.yaml").exists()
    finally:
        holder.kill()
        holder.wait()
    with RunLock(tmp_path / "run"):  # a killed holder leaves no stale lock
        with RunLock(tmp_path / "run"):  # re-entrant within one process
            pass


def test_concurrent_cli_runs_one_refused(tiny_qwen2_dir, tmp_path):
    """The reported reproducer: two `mrtpo train` started 0.3 s apart in one directory."""
    args = [sys.executable, "-m", "mrtpo", "train", "--model", str(tiny_qwen2_dir), "--task",
            "harness-words", "--output-dir", str(tmp_path / "run"), "--steps", "2",
            "--batch-prompts", "2", "--num-generations", "2", "--max-new-tokens", "4",
            "--verify-workers", "0", "--no-mrtpo"]
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests' / 'helpers'}")
    code = "import harness_task, sys; harness_task.register(); from mrtpo.cli import main; sys.argv = ['mrtpo'] + sys.argv[1:]; main()"
    procs = []
    for _ in range(2):
        procs.append(subprocess.Popen([sys.executable, "-c", code] + args[3:], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        time.sleep(0.3)
    outs = [p.communicate(timeout=240) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], [(p.returncode, o[1][-500:]) for p, o in zip(procs, outs)]
    refused = next(o[1] for p, o in zip(procs, outs) if p.returncode == 2)
    assert "in use by another run" in " ".join(refused.split())
    steps = [r["step"] for r in JsonlLog(tmp_path / "run" / "metrics.jsonl").read()]
    assert steps == [1, 2]


def test_learning_benchmark_takes_the_same_lock(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks" / "learning"))
    try:
        import learning
    finally:
        sys.path.pop(0)
    run_dir = tmp_path / "runs" / "toolcall" / "grpo" / "seed0"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')
    holder = _hold_lock(run_dir)
    try:
        with pytest.raises(RunDirLocked, match="in use by another run"):
            learning.run_one(tmp_path, "toolcall", "grpo", 0, {"steps": 3})
        assert (run_dir / "metrics.jsonl").is_file()  # the other run's files are untouched
    finally:
        holder.kill()
        holder.wait()


# --- --resume to fewer steps is refused -----------------------------------------------------
def test_resume_to_fewer_steps_is_refused(tiny_qwen2_dir, run_a):
    before = (run_a / "config.yaml").read_bytes()
    with pytest.raises(ConfigError, match=r"--resume --steps 1: .* already reached step 2"):
        train(_cfg(tiny_qwen2_dir, run_a, steps=1, resume=True))
    assert (run_a / "config.yaml").read_bytes() == before


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (an orphan's zombie may wait for a reaper)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_killed_runs_forked_children_neither_keep_its_lock_nor_outlive_it(tmp_path):
    """A run killed from outside (SIGKILL: the OOM killer) while it holds its lock, with the
    verifier pool's workers and another forked child alive: the lock is free at once (the
    children closed their copies of its file), and the pool's workers exit on their own (they
    closed their copies of the parent's pipe ends, so they read end-of-file)."""
    code = (
        "import os, sys, time\n"
        "from mrtpo.harness.run.lock import RunLock\n"
        "from mrtpo.harness.scoring import _ForkPool\n"
        f"RunLock({str(tmp_path / 'run')!r}).acquire()\n"
        "pool = _ForkPool(2)\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    time.sleep(60); os._exit(0)\n"
        "print(' '.join(str(p.pid) for p in pool.procs), child, flush=True)\n"
        "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    *workers, sleeper = [int(p) for p in proc.stdout.readline().split()]
    try:
        with pytest.raises(RunDirLocked):
            RunLock(tmp_path / "run").acquire()
        proc.kill()
        proc.wait()
        assert _alive(sleeper)
        with RunLock(tmp_path / "run"):  # free while the forked child still lives
            pass
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(w) for w in workers), "the pool's workers outlived the run"
    finally:
        for pid in (*workers, sleeper):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
