"""benchmarks/speed/dropout.py on a tiny model: the three dropout settings are timed side by
side in one run, each policy carries the dropout it names, and the table is the results
page's kind (the times themselves are not asserted)."""
from __future__ import annotations

import json

from benchmarks.speed import dropout as bench


def test_dropout_settings_are_timed_side_by_side(tiny_qwen2_dir, tmp_path):
    doc = bench.main(["--model", str(tiny_qwen2_dir), "--task", "toolcall", "--repeats", "2",
                      "--json", str(tmp_path / "d.json")])
    assert [r[0] for r in doc["rows"]] == ["off", "torch", "sparse"]
    assert all(r[3] > 0 for r in doc["rows"]) and doc["rows"][1][4] == 1.0
    assert "Dropout" in doc["modules"]["torch"] and "SparseDropout" not in doc["modules"]["torch"]
    assert "SparseDropout" in doc["modules"]["sparse"] and "Dropout" not in doc["modules"]["sparse"]
    assert "Dropout" not in doc["modules"]["off"] and "SparseDropout" not in doc["modules"]["off"]
    assert len(doc["rounds"]) == 2
    saved = json.loads((tmp_path / "d.json").read_text())
    assert saved["schema"] == "mrtpo.table/1" and saved["section"] == "speed"
