"""benchmarks/speed/rollout_dtype.py on a tiny model: both rollouts are timed in one run, the
float32 rollout's recorded log-probs are the weights' own, the bf16 copy's are close but not
equal, and the file is a results-page table (the times themselves are not asserted)."""
from __future__ import annotations

import json

from benchmarks.speed import rollout_dtype as bench


def test_float32_and_bf16_rollouts_are_timed_side_by_side(tiny_qwen2_dir, tmp_path):
    doc = bench.main(["--model", str(tiny_qwen2_dir), "--task", "toolcall", "--repeats", "2",
                      "--json", str(tmp_path / "r.json")])
    assert [r[0] for r in doc["rows"]] == ["rollout", "rest of the step (float32 either way)", "step"]
    for name, t32, t16, ratio in doc["rows"]:
        assert t32 > 0 and t16 > 0 and abs(ratio - t16 / t32) < 1e-12
    for r in doc["rounds"]:
        assert r["fp32"]["max"] < 1e-4  # sampling with the weights: their own log-probs
        assert 0 < r["bf16"]["mean"] < 0.05  # the copy: close, not equal
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["schema"] == "mrtpo.table/1" and saved["section"] == "speed-step"
