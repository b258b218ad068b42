"""benchmarks/speed/eval_decode.py on a tiny model: both decoding paths run in one run on the
same held-out prompts and give the same responses, and the file is a results-page table (the
times themselves are not asserted)."""
from __future__ import annotations

import json

from benchmarks.speed import eval_decode as bench


def test_lean_and_generate_decoding_are_timed_side_by_side(tiny_llama_dir, tmp_path):
    doc = bench.main(["--model", str(tiny_llama_dir), "--task", "text2sql", "--examples", "5",
                      "--max-new-tokens", "6", "--batch-size", "3", "--repeats", "2", "--json", str(tmp_path / "r.json")])
    assert [r[0] for r in doc["rows"]] == ["generate (static prompt cache)", "lean decoder (harness.fast.decode)"]
    (_, t_plain, one), (_, t_lean, ratio) = doc["rows"]
    assert one == 1.0 and t_plain > 0 and t_lean > 0 and abs(ratio - t_lean / t_plain) < 1e-12
    assert [(r["same"], r["responses"]) for r in doc["rounds"]] == [(5, 5), (5, 5)]
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["schema"] == "mrtpo.table/1" and saved["section"] == "speed-step"
    assert saved["settings"]["examples"] == 5
