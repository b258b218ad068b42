"""benchmarks/learning/learning.py: each run trains in a fresh process and is read back once
finished (benchmarks/lib/runs.py's `run_one`); summary.json keeps the settings, the seeds, the
start/end window, the seconds per run and the per-step curves its table and plot were made from."""
from __future__ import annotations

import json
import math
import sys

from benchmarks.learning import learning
from benchmarks.lib.runs import run_one


def test_summary_of_finished_runs_keeps_window_seconds_and_curves(tmp_path, tiny_qwen2_dir, monkeypatch):
    scores = {("gdpo", 0): [0.0, 0.5, 1.0, 1.0], ("gdpo", 1): [0.5, 0.5, 0.5, 1.0],
              ("mrtpo", 0): [0.0, 0.0, 0.5, 0.5], ("mrtpo", 1): [0.5, 1.0, 1.0, 1.0]}
    for (method, seed), values in scores.items():
        run = tmp_path / "runs" / "toolcall" / method / f"seed{seed}"
        run.mkdir(parents=True)
        rows = [{"step": i + 1, "reward": v, "rewards/format/mean": v, "time/step": 2.0} for i, v in enumerate(values)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(sys, "argv", ["learning.py", "--model", str(tiny_qwen2_dir), "--tasks", "toolcall",
                                      "--methods", "gdpo,mrtpo", "--seeds", "0,1", "--steps", "4",
                                      "--window", "2", "--out", str(tmp_path)])
    learning.main()
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert doc["seeds"] == [0, 1] and doc["window"] == 2 and doc["settings"]["steps"] == 4
    assert doc["settings"]["model"] == str(tiny_qwen2_dir)  # a path names itself
    assert doc["command"].startswith("python -m benchmarks.learning.learning --model ")
    assert doc["schema"] == "mrtpo.learning/1"  # its kind, declared for the results page
    assert doc["seconds_per_run"] == {"gdpo": 8.0, "mrtpo": 8.0}
    assert doc["curves"]["toolcall"]["gdpo"]["rewards/format/mean"] == [[0.0, 0.5, 1.0, 1.0], [0.5, 0.5, 0.5, 1.0]]
    row = next(r for r in doc["rows"] if r["reward"] == "format" and r["method"] == "mrtpo")
    assert math.isclose(row["start"], (0.0 + 1.5) / 4) and math.isclose(row["end"], (1.0 + 2.0) / 4)  # 2-step means


def test_a_run_trains_in_a_fresh_process_and_is_read_back_after(tmp_path, tiny_qwen2_dir):
    settings = dict(model=str(tiny_qwen2_dir), steps=2, batch_prompts=2, num_generations=2, max_new_tokens=4,
                    verify_workers=0, lora=True, lora_r=4, save_every=1, log_completions_every=0, eval_every=0)
    history = run_one(tmp_path, "toolcall", "mrtpo", 0, settings, threads=1)
    assert [r["step"] for r in history] == [1, 2]
    run = tmp_path / "runs" / "toolcall" / "mrtpo" / "seed0"
    assert (run / "config.yaml").is_file() and any(run.glob("checkpoints/step-*"))
    (run / "config.yaml").unlink()  # a finished run is read back, not trained again (it would fail now)
    assert run_one(tmp_path, "toolcall", "mrtpo", 0, settings) == history
