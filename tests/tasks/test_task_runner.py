"""Task code runs one way (mrtpo.tasks.runner): in a worker, under --verify-timeout, a verifier
that hangs or dies scoring its floor with a one-line report, on every command (issue 61, A).

The hostile plugin (tests/helpers/hostile_task.py) is installed into a tmp dir as a dist-info
and found through PYTHONPATH by a `mrtpo` subprocess, bounded in wall clock: a hang fails the
test with subprocess.TimeoutExpired instead of hanging the suite."""
from __future__ import annotations

import json

import pytest

import hostile_task
from cli_runs import invoke
from mrtpo.tasks import register_task, unregister_task

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    return hostile_task.install(tmp_path_factory.mktemp("plugin"))


@pytest.fixture(scope="module")
def responses(tmp_path_factory):
    path = tmp_path_factory.mktemp("responses") / "responses.jsonl"
    path.write_text("".join(json.dumps({"id": f"w{i}", "response": "<answer>select</answer>"}) + "\n"
                            for i in range(2)))
    return path


def _one_report(stderr: str, *words: str) -> None:
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.startswith("warning: reward 'hostile'")]
    assert len(lines) == 1, stderr[-3000:]  # once per reward and kind of failure, not per call
    for w in words:
        assert w in lines[0], lines[0]


# --- A1: the held-out measurement of `mrtpo train` ---------------------------------------------
@pytest.mark.parametrize("mode, words", [("sleep", "timed out after 1 s"), ("exit", "exited with code 7")])
def test_train_heldout_gives_a_hanging_or_dying_verifier_its_floor(plugin, tiny_qwen2_dir, tmp_path,
                                                                  mode, words):
    run = tmp_path / "run"
    done = hostile_task.mrtpo(plugin, "train", "--task", "hostile", "-o", f"mode={mode}", "--model",
                              tiny_qwen2_dir, "--output-dir", run, "--steps", 1, "--batch-prompts", 2,
                              "--num-generations", 2, "--max-new-tokens", 4, "--heldout", 2,
                              "--verify-timeout", 1, timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    _one_report(done.stderr, words, "scores its floor")
    doc = json.loads((run / "heldout.json").read_text())
    assert doc["rewards/hostile/mean"] == {"before": 0.0, "after": 0.0}, doc


# --- A2: eval, lint and preview give verifiers the deadline ------------------------------------
@pytest.mark.parametrize("args", [["eval", "hostile", "--responses", "{responses}", "--limit", 2, "--json"],
                                  ["blocks", "lint", "hostile", "-o", "n=2"],
                                  ["blocks", "preview", "hostile", "-n", 1, "--jsonl"]],
                         ids=["eval", "lint", "preview"])
def test_a_hanging_verifier_times_out_in_every_command(plugin, responses, args):
    args = [str(a).format(responses=responses) for a in args]
    done = hostile_task.mrtpo(plugin, *args, "-o", "mode=sleep", "--verify-timeout", 1, timeout=90)
    assert done.returncode in (0, 1), done.stderr[-3000:]  # lint exits 1 on findings
    _one_report(done.stderr, "timed out after 1 s")
    if args[0] == "eval":
        assert json.loads(done.stdout)["metrics"]["rewards/hostile/mean"] == 0.0
    if args[1] == "lint":
        assert "verify-timed-out" in done.stdout


def test_eval_scores_a_dying_verifier_its_floor(plugin, responses):
    done = hostile_task.mrtpo(plugin, "eval", "hostile", "-o", "mode=exit", "--responses", responses, "--limit", 2,
                              "--json", timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    _one_report(done.stderr, "the verifier died", "exited with code 7")
    assert json.loads(done.stdout)["metrics"]["rewards/hostile/mean"] == 0.0


@pytest.mark.parametrize("mode, words", [("blocksleep", "ran past its 1 s deadline"),
                                         ("refsleep", "ran past its 1 s deadline")])
def test_a_hanging_block_builder_or_reference_is_a_lint_finding(plugin, mode, words):
    done = hostile_task.mrtpo(plugin, "blocks", "lint", "hostile", "-o", f"mode={mode}", "-o", "n=1",
                              "--verify-timeout", 1, "--json", timeout=90)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert words in done.stdout, done.stdout[-3000:]


# --- A3: contract breaches are the lint's findings, not tracebacks -----------------------------
@pytest.fixture
def hostile_registered():
    register_task("hostile")(hostile_task.HostileTask)
    yield
    unregister_task("hostile")


@pytest.mark.parametrize("mode, check", [("string", "bad-score"), ("dictfeedback", "bad-feedback"),
                                         ("ref42", "reference-not-text")])
def test_lint_reports_a_broken_contract_as_a_finding(hostile_registered, mode, check):
    result, out = invoke("blocks", "lint", "hostile", "-o", f"mode={mode}", "-o", "n=2", "--json")
    assert result.exit_code == 1, (result.exit_code, out[-2000:], result.exception)
    assert "Traceback" not in out and not isinstance(result.exception, (TypeError, AttributeError)), out
    assert f'"check": "{check}"' in out, out[-3000:]


# --- A4: tasks ls bounds a plugin's factory ----------------------------------------------------
def test_tasks_ls_lists_a_hanging_plugin_with_its_error(tmp_path):
    where = hostile_task.install(tmp_path, {"hostile": "hostile_task:HostileTask",
                                            "hangs": "hostile_task:hanging_factory"})
    done = hostile_task.mrtpo(where, "tasks", "ls", "--json", "--timeout", 2, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["name"]: row for row in json.loads(done.stdout)["tasks"]}
    assert rows["hangs"]["error"] == "failed to load: it ran past its 2 s deadline", rows["hangs"]
    assert rows["hostile"]["rewards"][-1] == "hostile" and rows["hostile"]["error"] is None


# --- credit and probe run the task's code the same way -----------------------------------------
def test_credit_gives_a_hanging_verifier_its_floor(plugin, tiny_qwen2_dir):
    done = hostile_task.mrtpo(plugin, "credit", "hostile", "-o", "mode=sleep", "--model", tiny_qwen2_dir,
                              "--limit", 1, "--verify-timeout", 1, "--json", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    _one_report(done.stderr, "timed out after 1 s")
    assert json.loads(done.stdout)["schema"] == "mrtpo.credit/1"


def test_probe_names_a_hanging_reference(plugin, tiny_qwen2_dir):
    done = hostile_task.mrtpo(plugin, "probe", "hostile", "-o", "mode=refsleep", "--model", tiny_qwen2_dir,
                              "--limit", 1, "--no-control", "--verify-timeout", 1, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "task.reference(example) ran past its 1 s deadline" in done.stderr, done.stderr[-3000:]
