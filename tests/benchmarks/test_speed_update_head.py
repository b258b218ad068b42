"""benchmarks/speed/update_head.py on a tiny model: the head once per position and once per
distinct state are timed side by side in one run, give the same log-probs and gradients, and
the table is the results page's kind (the times themselves are not asserted)."""
from __future__ import annotations

import json

from benchmarks.speed import update_head as bench


def test_head_rows_are_timed_side_by_side(tiny_qwen2_dir, tmp_path):
    doc = bench.main(["--model", str(tiny_qwen2_dir), "--task", "toolcall", "--repeats", "2",
                      "--json", str(tmp_path / "h.json")])
    assert [r[0] for r in doc["rows"]] == ["positions", "states"]
    positions, states = doc["rows"][0][1], doc["rows"][1][1]
    assert states < positions  # shared trie nodes and the one zero state
    assert all(r[2] > 0 for r in doc["rows"]) and doc["rows"][0][3] == 1.0
    assert len(doc["rounds"]) == 2
    assert doc["logp_difference"] < 1e-5 and doc["gradient_difference"] < 1e-5
    saved = json.loads((tmp_path / "h.json").read_text())
    assert saved["schema"] == "mrtpo.table/1" and saved["section"] == "speed"
