"""benchmarks/speed/decode_equality.py: compiled decoding against eager on the trainer's sampler,
compared row by row (the comparison itself, and the script end to end on CPU, where both
settings go through transformers' generate and "compiled" only buckets the static cache)."""
from __future__ import annotations

import json

from benchmarks.speed.decode_equality import compare, main, merge


def test_rows_are_compared_up_to_their_first_difference():
    eager = [[1, 2, 3], [4, 5, 6], [7, 8]]
    compiled = [[1, 2, 3], [4, 9, 6], [7, 8, 9]]
    logps = [[-1.0, -2.0, -3.0], [-0.5, -0.5, -0.5], [-0.1, -0.2]]
    moved = [[-1.0, -2.5, -3.0], [-0.25, -9.0, -9.0], [-0.1, -0.2, -0.3]]
    got = compare(eager, compiled, logps, moved)
    # row 0 alike (|diff| 0.5 at its 2nd token), row 1 parts at token 2 (0.25 before it), row 2 is longer
    assert got == {"rows": 3, "same_rows": 1, "tokens": 9, "tokens_before_a_difference": 3 + 1 + 2,
                   "max_logp_difference": 0.5}
    assert merge([got, compare([[1]], [[2]], [[0.0]], [[-5.0]])]) == {
        "rows": 4, "same_rows": 1, "tokens": 10, "tokens_before_a_difference": 6, "max_logp_difference": 0.5}


def test_float32_on_cpu_draws_the_same_tokens(tiny_llama_dir, tmp_path):
    out = tmp_path / "equality.json"
    doc = main(["--device", "cpu", "--quick", "--dtypes", "float32", "--model", str(tiny_llama_dir),
                "--task", "toolcall", "--json", str(out)])
    assert json.loads(out.read_text())["schema"] == "mrtpo.table/1" and doc["section"] == "decode-graphs"
    r = doc["results"]["float32"]
    assert r["rows"] == 8 and r["same_rows"] == 8 and r["tokens_before_a_difference"] == r["tokens"]
    assert r["max_logp_difference"] < 1e-4 and not r["folded_copy"]
    assert len(r["seconds"]["compiled"]) == 2 and doc["rows"][0][:3] == ["float32", 8, 1.0]
