"""One responses-JSONL reader: `mrtpo blocks`/`credit` (mrtpo.blocks.samples) read
their rows with `mrtpo.evaluation.responses.read_records`, each command keeping its own row
fields and its own words for a bad line."""
from __future__ import annotations

import json

import pytest

from mrtpo.blocks.samples import ResponsesFileError, read_responses as read_sample_responses
from mrtpo.evaluation.responses import ResponsesError, read_records, read_responses
from mrtpo.tasks.base import Example

EXAMPLES = [Example(id="q1", prompt="p1"), Example(id="q2", prompt="p2")]
ROWS = [{"id": "q1", "response": "a"}, {"id": "q2", "response": "b\u2028c"}]


@pytest.mark.parametrize("layout", ["jsonl", "array"])
def test_both_commands_read_the_same_records(tmp_path, layout):
    f = tmp_path / "r.jsonl"
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in ROWS) if layout == "jsonl" else json.dumps(ROWS)
    f.write_text(text, encoding="utf-8")
    assert list(read_records(f)) == [(1, ROWS[0]), (2, ROWS[1])]
    assert [(r.id, r.response) for r in read_responses(f)] == [("q1", "a"), ("q2", "b\u2028c")]
    assert read_sample_responses(f, EXAMPLES) == {"q1": [("response 1", "a")], "q2": [("response 1", "b\u2028c")]}


def test_a_bad_line_is_named_in_each_commands_words(tmp_path):
    f = tmp_path / "r.jsonl"
    f.write_text(json.dumps(ROWS[0]) + "\n{oops\n")
    with pytest.raises(ResponsesError, match=r"r.jsonl, line 2: not valid JSON \(.*\)$"):
        read_responses(f)
    with pytest.raises(ResponsesFileError, match=r"r.jsonl, row 2: not valid JSON \(.*\); each line is one object"):
        read_sample_responses(f, EXAMPLES)
