"""benchmarks/speed/decode_graphs.py's plumbing on CPU (the CUDA graphs themselves need a GPU):
both settings sample through the trainer's rollout, and on CPU, where transformers compiles
nothing, the `compiled` setting samples the same completions."""
from __future__ import annotations

import json

from benchmarks.speed import decode_graphs as script


def test_both_settings_run_and_the_figures_are_written(tmp_path):
    doc = script.main(["--device", "cpu", "--dtype", "float32", "--quick", "--json", str(tmp_path / "d.json")])
    assert [(r["setting"], r["batch"]) for r in doc["runs"]] == [("eager", 0), ("eager", 0), ("eager", 1),
                                                               ("compiled", 0), ("compiled", 0), ("compiled", 1)]
    assert set(doc["ms_per_token"]) == {"eager", "compiled"}
    assert [r["timed"] for r in doc["runs"]] == [False, True, True, False, True, True]
    assert doc["batch_rows"] == 4 and doc["compared_completions"] == doc["same_completions"] == 8
    assert json.loads((tmp_path / "d.json").read_text())["schema"] == "mrtpo.decode-graphs/1"
