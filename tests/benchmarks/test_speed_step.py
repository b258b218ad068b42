"""benchmarks/speed/step.py on a tiny model: both settings are timed in one run and give the
same completions, log-probs and gradients (the times themselves are not asserted)."""
from __future__ import annotations

import json

from benchmarks.speed import step


def test_fast_and_plain_steps_are_timed_side_by_side_and_agree(tiny_qwen2_dir, tmp_path):
    doc = step.main(["--model", str(tiny_qwen2_dir), "--task", "toolcall", "--max-new-tokens", "8",
                     "--repeats", "2", "--json", str(tmp_path / "s.json")])
    assert [r["phase"] for r in doc["rows"]] == ["rollout", "replay", "forward", "backward", "total"]
    for r in doc["rows"]:
        assert r["plain"] > 0 and r["fast"] > 0 and r["ratio"] == r["fast"] / r["plain"]
    assert doc["same_completions"] == doc["completions"] > 0
    assert doc["cpu"] and doc["cpu"] != "unknown"
    assert doc["max_distance_difference"] < 1e-4
    assert doc["max_logp_difference"] < 1e-4 and doc["gradient_relative_difference"] < 1e-4
    assert json.loads((tmp_path / "s.json").read_text())["schema"] == "mrtpo.speed-step/1"
