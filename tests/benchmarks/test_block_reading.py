"""benchmarks/experiments/block_reading.py on a tiny random model: it finds a counterfactual for every
bundled toolcall and text2sql example with a reference block and reads probabilities.

The figures themselves are measured, not asserted; this checks that the script's plumbing
is right (the block swapped is the reference block, the first differing token is found, the
probabilities are the model's)."""
from __future__ import annotations

import pytest

from benchmarks.experiments import block_reading as block_reading_module


@pytest.fixture(scope="module")
def block_reading():
    return block_reading_module


@pytest.mark.parametrize("task", ["toolcall", "text2sql"])
def test_block_reading_runs_on_a_tiny_model(block_reading, tiny_qwen2_dir, task):
    from mrtpo.tasks import get_task

    out = block_reading.measure(str(tiny_qwen2_dir), task)
    assert out["examples"] >= 30  # nearly every bundled example yields a counterfactual
    t = get_task(task)
    examples = {ex.id: ex for ex in t.load()}
    for row in out["rows"]:
        ex = examples[row["example"]]
        ref = t.reference(ex)
        k = [r.name for r in t.rewards(ex)].index(row["reward"])
        assert t.rewards(ex)[k].block(ex, t.score(ex, ref)[k]).strip() == ref.strip()  # the reference block
        assert row["wrong_answer"] != ref and t.format.parse(row["wrong_answer"]).strict
        assert t.score(ex, row["wrong_answer"])[k].score < t.score(ex, ref)[k].score
    for name in block_reading.CONTEXTS:
        for which in ("wrong", "reference"):
            assert 0.0 <= out["mean"][name][which] <= 1.0
    # a random-init model reads nothing: the wrong token gains next to nothing from the block
    assert abs(out["copy_gain"]) < 0.05
    assert out["copy_gain"] == pytest.approx(out["mean"]["counterfactual"]["wrong"] - out["mean"]["P_all"]["wrong"])


def test_a_task_without_a_reference_block_is_refused_clearly(block_reading, tiny_qwen2_dir):
    with pytest.raises(SystemExit, match="no example has a reference block"):
        block_reading.measure(str(tiny_qwen2_dir), "instruct")
