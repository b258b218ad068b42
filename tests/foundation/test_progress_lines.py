"""Progress in logs: when stderr is not a terminal (CliRunner's is not),
`mrtpo train`, `mrtpo credit TASK --model` and `mrtpo model build` print plain progress lines
while they run, with the count, the time per unit and the ETA."""
from __future__ import annotations

import io
import re

import pytest
from typer.testing import CliRunner

import harness_task
from mrtpo.cli import app
from mrtpo.progress import PlainProgress

harness_task.register()
ENV = {"COLUMNS": "200", "NO_COLOR": "1", "MRTPO_PROGRESS_SECONDS": "0"}


def test_plain_progress_prints_at_a_steady_rate():
    now = [0.0]
    out = io.StringIO()
    p = PlainProgress("train", 10, every=5.0, stream=out, clock=lambda: now[0])
    p.update(0, "sampling")
    for step in range(1, 11):
        now[0] += 2.0  # 2 s a step: a line at most every 5 s, and the last one
        p.update(step, f"reward {step / 10:.1f}")
    lines = out.getvalue().splitlines()
    assert lines[0] == "train: step 0/10 | sampling"
    assert lines[1] == "train: step 3/10 | 2.00 s/step | ETA 14s | reward 0.3"
    assert lines[-1] == "train: step 10/10 | 2.00 s/step | ETA 0s | reward 1.0"
    assert len(lines) == 5  # steps 0, 3, 6, 9, 10


def test_train_prints_step_lines_in_a_log(tiny_qwen2_dir, tmp_path):
    r = CliRunner().invoke(app, ["train", "--model", str(tiny_qwen2_dir), "--task", "harness-words", "--steps", "2",
                                 "--batch-prompts", "2", "--num-generations", "2", "--max-new-tokens", "6",
                                 "--verify-workers", "0", "--lora-r", "4", "--output-dir", str(tmp_path / "run")],
                           env=ENV)
    assert r.exit_code == 0, r.output
    # the held-out measurements' lines: tests/evaluation/test_heldout.py
    lines = [line for line in r.stderr.splitlines() if line.startswith("train: ") and "held-out" not in line]
    assert lines[0].startswith("train: loading model")
    assert lines[1] == "train: step 0/2 | sampling"
    assert re.fullmatch(r"train: step 1/2 \| [\d.]+ s/step \| ETA \d+s \| reward [\d.]+ \| format .*", lines[2])
    assert lines[3].startswith("train: step 2/2 | ")
    assert "\x1b[" not in r.stderr and "━" not in r.stderr  # no bar drawn into the log


def test_credit_prints_replay_lines_in_a_log(tiny_qwen2_dir):
    r = CliRunner().invoke(app, ["credit", "harness-words", "--model", str(tiny_qwen2_dir), "--limit", "2", "-q"],
                           env=ENV)
    assert r.exit_code == 0, r.output
    lines = [line for line in r.stderr.splitlines() if line.startswith("credit: ")]
    assert lines[0].startswith("credit: loading ")
    assert lines[-1].startswith("credit: response 4/4 | ")  # reference + corrupted copy, 2 examples


def test_model_build_prints_phase_lines_in_a_log(tiny_gguf_file, tmp_path, monkeypatch):
    from tiny_gguf import packaged_default

    recipe = packaged_default(tiny_gguf_file, tmp_path / "site", "test-lines", monkeypatch)
    r = CliRunner().invoke(app, ["model", "build", recipe.name, "--cache-dir", str(tmp_path)], env=ENV)
    assert r.exit_code == 0, r.output
    lines = [line for line in r.stderr.splitlines() if line.startswith("building ")]
    assert lines == [f"building {recipe.name}: locating the GGUF (an installed package, --from, or the registry)",
                     f"building {recipe.name}: converting {recipe.gguf} from installed package "
                     f"{recipe.package} to a dense checkpoint"]


def test_chunked_replay_gives_the_same_records(tiny_qwen2_dir):
    """The credit replay runs in chunks (for its progress); q does not depend on the chunk size."""
    from mrtpo.credit.records import compute, responses_for
    from mrtpo.harness.policy import load_policy
    from mrtpo.tasks import get_task

    task = get_task("harness-words")
    examples = task.load()[:3]
    policy = load_policy(str(tiny_qwen2_dir), lora=False, device="cpu")
    responses = responses_for(task, examples, None)
    seen = []
    one = compute(task, examples, responses, policy.model, policy.tokenizer, chunk=1,
                  on_progress=lambda done, total: seen.append((done, total)))
    whole = compute(task, examples, responses, policy.model, policy.tokenizer, chunk=64)
    assert seen == [(i, 6) for i in range(1, 7)]
    assert len(one) == len(whole) == 6
    for a, b in zip(one, whole):
        assert a.tokens == b.tokens and a.credit == b.credit
        for da, db in zip(a.distances, b.distances):
            assert da == pytest.approx(db, abs=1e-6)


def test_eval_prints_generation_lines_in_a_log(tiny_qwen2_dir):
    r = CliRunner().invoke(app, ["eval", "harness-words", "--model", str(tiny_qwen2_dir), "--limit", "3",
                                 "--batch-size", "2", "--max-new-tokens", "4", "--json"], env=ENV)
    assert r.exit_code == 0, r.output
    lines = [line for line in r.stderr.splitlines() if line.startswith("harness-words: generating: ")]
    assert lines[0] == "harness-words: generating: prompt 0/3"
    assert lines[-1].startswith("harness-words: generating: prompt 3/3 | ")
    assert r.stdout.lstrip().startswith("{")  # stdout stays the JSON document
