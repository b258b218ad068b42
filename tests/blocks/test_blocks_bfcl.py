"""Regression: the lint's R1 ("one reward, one block") on BFCL blocks of the toolcall task.

The dataset-level lint masks the example's own label strings (quoted) before judging prose.
BFCL labels share strings with the blocks' payloads: a number such as 0.0001 in the label is
also a JSON number inside the schema block, "all" is a value and also part of "<tool_call>",
"tools" a value and part of "<tools>". Masking those cut one JSON document into several
"payloads" and turned tags into prose, so correct schema and reference blocks were reported as
merged (acceptance run on bfcl_eval: 13 R1 problems in 135 examples). Payloads are now found
by structure before any masking (`mrtpo.blocks.prose._payload_spans`).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mrtpo.blocks.lint import lint_task
from mrtpo.blocks.rules import check_text, flatten_strings, split_text
from mrtpo.tasks import get_task
from mrtpo.tasks.base import Task

SAMPLE = Path(__file__).resolve().parents[2] / "mrtpo" / "data" / "toolcall" / "bfcl_v4_sample"


def toolcall() -> Task:
    try:
        return get_task("toolcall")
    except (ImportError, AttributeError) as exc:
        pytest.skip(f"task toolcall unavailable: {exc}")


def write_bfcl(root: Path) -> Path:
    """A hand-made BFCL v4 layout (question file + possible_answer/) with one example whose
    label strings occur inside its blocks' payloads, as in simple_python_115/224 and
    live_multiple_171-71-0 of bfcl_eval."""
    question = {
        "id": "simple_python_9001",
        "question": [[{"role": "user", "content": "Find the top hardware stores selling tools in "
                       "all regions, with a tolerance of 0.0001 and at most 2500 results."}]],
        "function": [{
            "name": "store_search.top_rated",
            "description": "Finds the top rated stores for a product category.",
            "parameters": {"type": "dict", "properties": {
                "category": {"type": "string", "enum": ["tools", "garden", "paint"],
                             "description": "The product category."},
                "region": {"type": "string", "description": "The region, or 'all'.", "default": "all"},
                "tolerance": {"type": "float", "description": "Matching tolerance.", "default": 0.0001},
                "limit": {"type": "integer", "description": "Most results returned.", "default": 2500},
            }, "required": ["category", "region"]},
        }],
    }
    answer = {"id": "simple_python_9001", "ground_truth": [{"store_search.top_rated": {
        "category": ["tools"], "region": ["all"], "tolerance": [0.0001], "limit": [2500, ""]}}]}
    (root / "possible_answer").mkdir(parents=True)
    name = "BFCL_v4_simple_python.json"
    (root / name).write_text(json.dumps(question) + "\n")
    (root / "possible_answer" / name).write_text(json.dumps(answer) + "\n")
    return root


def test_handmade_bfcl_example_lints_clean(tmp_path):
    task = toolcall()
    examples = task.load(str(write_bfcl(tmp_path / "bfcl")))
    assert [e.id for e in examples] == ["simple_python_9001"]
    ex = examples[0]
    # the example really has the overlap the bug needed: label strings inside the payloads
    quoted = {s for s in flatten_strings(ex.data) if len(s) >= 3}
    ref = task.reference(ex)
    blocks = {r.name: r.block(ex, r.verify(ex, ref)) for r in task.rewards(ex)}
    assert {"0.0001", "all", "tools", "2500"} <= quoted
    assert "0.0001" in blocks["schema"] and blocks["schema"] in ex.prompt
    assert "<tool_call>" in blocks["correct"] and '"all"' in blocks["correct"]
    for name in ("schema", "correct"):
        split = split_text(blocks[name], quoted)
        assert len(split.payloads) == 1, (name, split.payloads)
        assert check_text(blocks[name], quoted=quoted) == [], name
    report = lint_task(task, examples)
    assert report.findings == [], [str(f) for f in report.findings]


def test_bundled_bfcl_sample_lints_clean():
    """The bundled excerpt had one such block (live_parallel_multiple_13-11-0's schema)."""
    task = toolcall()
    examples = task.load(str(SAMPLE))
    report = lint_task(task, examples)
    assert report.examples == len(examples) > 0
    assert report.findings == [], [str(f) for f in report.findings]


SCHEMA = '<tools>\n{"type": "function", "function": {"name": "f", "parameters": {"type": "dict", ' \
         '"properties": {"rate": {"type": "float", "default": 0.0001}}}}}\n</tools>'


def test_quoted_number_inside_json_leaves_one_payload():
    split = split_text(SCHEMA, ["0.0001", "float", "tools"])
    assert [k for k, _ in split.payloads] == ["json"]
    assert json.loads(split.payloads[0][1])["function"]["name"] == "f"
    assert check_text(SCHEMA, quoted=["0.0001", "tools"]) == []


def test_merges_are_still_caught_with_quoted_values_inside_the_payload():
    # a statement beside the schema is still a second piece of information
    merged = "The rate is a small tolerance.\n" + SCHEMA
    assert {(f.rule, f.check) for f in check_text(merged, quoted=["0.0001"])} >= {("R1", "merged")}
    # two JSON documents separated by prose are still two payloads
    two = '{"a": 0.0001}\nand also\n{"b": 2500}'
    assert any(f.rule == "R1" for f in check_text(two, quoted=["0.0001", "2500"]))


def test_quoted_text_that_covers_a_payload_stays_quotation():
    # the verifier's feedback quoting a call is feedback, not a call payload
    fb = 'unexpected call {"name": "g", "arguments": {}}'
    block = f"The call is rejected: {fb}"
    assert split_text(block, [fb]).payloads == []
    assert check_text(block, quoted=[fb]) == []
