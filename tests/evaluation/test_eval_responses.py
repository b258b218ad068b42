"""Reading responses files and pairing their rows with examples.

Run: .venv/bin/python -m pytest tests/evaluation/test_eval_responses.py -q
"""
from __future__ import annotations

import json

import pytest

from mrtpo.evaluation.responses import (ResponsesError, pair_responses, read_responses,
                                        resolve_missing)
from mrtpo.tasks.base import Example

EXAMPLES = [
    Example("1000", "Write a poem about the sea. Do not use any commas."),
    Example("1001", "List three  fruits.\nUse bullet points.", data={"key": 7}),
    Example("q3", "Shinto shrines: use at least 3 placeholders like [address].",
            data={"prompt": "Shinto shrines: use at least 3 placeholders like [address]."}),
]


def _write(tmp_path, rows, name="r.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_rows_pair_by_id_key_or_prompt(tmp_path):
    path = _write(tmp_path, [
        {"key": 7, "response": "b"},  # example.data["key"]
        {"id": "1000", "response": "a"},
        {"prompt": EXAMPLES[2].prompt, "response": "c"},
    ])
    pairing = pair_responses(EXAMPLES, read_responses(path))
    assert pairing.responses == ["a", "b", "c"]
    assert pairing.warnings == []


def test_whitespace_differences_pair_silently_and_near_matches_with_a_warning(tmp_path):
    path = _write(tmp_path, [
        {"prompt": "List three fruits. Use bullet points.", "response": "b"},
        {"prompt": "Write a poem about the ocean. Do not use any commas.", "response": "a"},
        {"prompt": "Something else entirely, unrelated to any example.", "response": "x"},
    ])
    pairing = pair_responses(EXAMPLES, read_responses(path), source="r.jsonl")
    assert pairing.responses == ["a", "b", None]
    assert len(pairing.warnings) == 2
    assert "row 2" in pairing.warnings[0] and "'1000'" in pairing.warnings[0]  # the near match
    assert "1 row(s) match no example" in pairing.warnings[1] and "row 3" in pairing.warnings[1]


def test_a_json_array_file_and_alternative_response_fields(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps([{"id": "q3", "completion": "c"}, {"id": 1000, "output": None}]))
    rows = read_responses(path)
    assert [(r.id, r.response) for r in rows] == [("q3", "c"), ("1000", "")]


@pytest.mark.parametrize("line,match", [
    ("not json", r"line 1: not valid JSON"),
    ('{"id": "1000"}', r"row 1: no response field"),
    ('{"response": "x"}', r"row 1: the row has neither an identifier"),
    ('{"id": "1000", "response": ["a"]}', r"row 1, field 'response': expected the response text"),
    ("[1, 2]", r"row 1: expected a JSON object"),
])
def test_bad_rows_are_named_with_file_row_and_field(tmp_path, line, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ResponsesError, match=match) as info:
        read_responses(path)
    assert str(path) in str(info.value)


def test_two_rows_for_one_example_are_an_error(tmp_path):
    path = _write(tmp_path, [{"id": "1000", "response": "a"}, {"prompt": EXAMPLES[0].prompt, "response": "b"}])
    with pytest.raises(ResponsesError, match="rows 1 and 2 both answer example '1000'"):
        pair_responses(EXAMPLES, read_responses(path))


def test_missing_responses_error_zero_or_skip():
    responses = ["a", None, "c"]
    with pytest.raises(ResponsesError, match=r"no response for 1 of 3 examples \('1001'\).*--missing"):
        resolve_missing(EXAMPLES, responses, "error", "r.jsonl")
    exs, rs, warns = resolve_missing(EXAMPLES, responses, "zero", "r.jsonl")
    assert [e.id for e in exs] == ["1000", "1001", "q3"] and rs == ["a", "", "c"] and len(warns) == 1
    exs, rs, _ = resolve_missing(EXAMPLES, responses, "skip", "r.jsonl")
    assert [e.id for e in exs] == ["1000", "q3"] and rs == ["a", "c"]


def test_missing_file_and_empty_file(tmp_path):
    with pytest.raises(ResponsesError, match="no such responses file"):
        read_responses(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ResponsesError, match="holds no responses"):
        read_responses(tmp_path / "empty.jsonl")
