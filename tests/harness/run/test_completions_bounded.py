"""The completions log stays readable whatever a verifier says (issue 61, item 9): megabytes of
feedback are cut, with a marker, so `mrtpo credit RUN_DIR` reads the run back."""
from __future__ import annotations

import json

import hostile_task
import pytest
from cli_runs import invoke

from mrtpo.tasks import register_task, unregister_task

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def hostile_registered():
    register_task("hostile")(hostile_task.HostileTask)
    yield
    unregister_task("hostile")


def test_huge_feedback_is_cut_in_the_log_and_credit_reads_it(hostile_registered, tiny_qwen2_dir, tmp_path):
    run = tmp_path / "run"
    result, out = invoke("train", "--task", "hostile", "-o", "mode=hugefeedback", "-o", "size=3000000",
                         "--model", tiny_qwen2_dir, "--output-dir", run, "--steps", 1,
                         "--batch-prompts", 2, "--num-generations", 2, "--max-new-tokens", 4, "--heldout", 0)
    assert result.exit_code == 0, out[-3000:]
    lines = (run / "completions.jsonl").read_text().splitlines()
    assert lines and max(len(line) for line in lines) < 200_000, max(len(line) for line in lines)
    feedback = json.loads(lines[0])["feedback"][-1]
    assert feedback.endswith(" more characters cut]") and len(feedback) <= 16_000, feedback[-80:]
    result, out = invoke("credit", run, "--json")
    assert result.exit_code == 0, out[-3000:]
