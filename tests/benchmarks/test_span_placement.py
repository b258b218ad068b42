"""benchmarks/experiments/span_placement.py: the spans it puts each toolcall reward's credit on.

The learning figures are measured, not asserted; this checks the spans (they cut every
bundled reference into format / schema / correct pieces that are the parsed calls' names,
argument names and values) and the stand-in for the replay (q is 1 exactly on the tokens
of each reward's spans, the end of turn is the format's)."""
from __future__ import annotations

import json

import pytest

from benchmarks.experiments import span_placement as span_placement_module


@pytest.fixture(scope="module")
def spans_mod():
    return span_placement_module


def test_paired_changes_subtract_the_baseline_seed_by_seed(spans_mod):
    # 10 steps: a tenth is one step, so a change is last minus first
    curves = {"gdpo": {"reward": [[0.0] * 10], "rewards/mean": [[0.2] + [0.0] * 8 + [0.5], [0.1] * 10],
                       "rewards/correct/mean": [[0.0] * 9 + [0.3], [0.0] * 10]},
              "spans": {"reward": [[0.0] * 10], "rewards/mean": [[0.2] + [0.0] * 8 + [0.9], [0.1] * 9 + [0.0]],
                        "rewards/correct/mean": [[0.0] * 9 + [0.4], [0.0] * 9 + [0.2]]}}
    out = spans_mod.paired_changes(curves, "gdpo", 10)
    assert list(out) == ["spans"]
    assert out["spans"]["mean over rewards"] == pytest.approx([0.4, -0.1])
    assert out["spans"]["correct"] == pytest.approx([0.1, 0.2])


def test_the_span_runs_train_with_span_weights_in_their_own_process(spans_mod, tiny_qwen2_dir, tmp_path, monkeypatch):
    """Through the script's entry point: the runs train in spawned processes (learning.run_one),
    and their logged token weights are the spans' (1 / share on a reward's span, 0 elsewhere),
    not the replay's, so the setting reached the process that trained."""
    import sys

    import yaml

    from mrtpo.tasks.toolcall import call_spans

    monkeypatch.setattr(sys, "argv", ["span_placement.py", "--model", str(tiny_qwen2_dir), "--seeds", "0",
                                      "--steps", "1", "--compare", "", "--max-new-tokens", "24",
                                      "--log-completions-every", "1", "--threads", "1", "--out", str(tmp_path)])
    spans_mod.main()
    run = tmp_path / "runs" / "toolcall" / "mrtpo-spans" / "seed0"
    assert yaml.safe_load((run / "config.yaml").read_text())["mrtpo_weights"] == "spans"
    rows = [json.loads(line) for line in (run / "completions.jsonl").read_text().splitlines()]
    assert rows
    for row in rows:
        k = row["reward_names"].index("schema")
        w = row["token_weights"][k]
        if call_spans(row["response"])["schema"]:
            assert len({round(x, 5) for x in w}) <= 2 and min(w) == 0.0, w  # on the span or off it
        else:
            assert w == pytest.approx([1.0] * len(w))
