"""benchmarks/experiments/credit_concentration.py: the top-80 share of the policy and of its
random-init control, per reward and pooled, as `mrtpo credit` computes it (the figures are
measured, not asserted; this checks what the table holds)."""
from __future__ import annotations

from benchmarks.experiments import credit_concentration as bench

from mrtpo.statistics import ALL


def test_rows_hold_the_policy_and_its_control_for_every_reward(tiny_qwen2_dir):
    from mrtpo.credit.probe import random_control
    from mrtpo.harness.run.trained import load_frozen_policy

    policy = load_frozen_policy(str(tiny_qwen2_dir))
    # the fixture is itself a random init from seed 0: the control draws from seed 1 here
    rows = bench.measure(policy, random_control(policy.model, seed=1), "toolcall", limit=2, demo=True)
    assert [r["reward"] for r in rows] == ["format", "schema", "correct", ALL]
    for r in rows:
        assert r["responses"] == (12 if r["reward"] == ALL else 4)  # reference + corrupted copy of 2 examples
        for mean, lo, hi in (r["model"], r["control"]):
            assert mean is None or 0 < lo <= mean <= hi <= 1
    assert rows[-1]["model"] != rows[-1]["control"]  # two models, two sets of distances
    doc = bench.table(rows, "tiny", "python benchmarks/experiments/credit_concentration.py", 2)
    assert doc["schema"] == "mrtpo.table/1" and len(doc["rows"]) == 4
    assert all(len(row) == len(doc["columns"]) for row in doc["rows"])
    assert doc["rows"][-1][-1] == "13-15%"  # the paper's toolcall figure, beside the pooled row
