"""mrtpo.spans (token offsets of a decoded response, span masks) and toolcall's reward spans
(`call_spans`: they cut every bundled reference into format / schema / correct pieces that
are the parsed calls' names, argument names and values)."""
from __future__ import annotations

import json

from mrtpo.spans import span_token_mask, spans_token_mask, token_offsets
from mrtpo.tasks import get_task
from mrtpo.tasks.toolcall import call_spans


def test_spans_cut_every_reference_into_its_parts():
    task = get_task("toolcall")
    examples = task.load()
    assert len(examples) >= 30
    for ex in examples:
        ref = task.reference(ex)
        spans = call_spans(ref)
        covered = sorted(s for ranges in spans.values() for s in ranges)
        at = 0
        for s, e in covered:  # a partition of the text: no gap, no overlap
            assert s == at and e > s, (ex.id, covered)
            at = e
        assert at == len(ref)
        calls = task.parse(ref).calls
        assert [ref[s:e] for s, e in spans["schema"]] == [x for c in calls for x in [c["name"], *c["arguments"]]]
        values = [v for c in calls for v in c["arguments"].values()]
        assert [json.loads(ref[s:e]) for s, e in spans["correct"]] == values
        assert "<tool_call>" in ref[slice(*spans["format"][0])]


def test_text_without_a_call_is_all_format():
    assert call_spans("I cannot help with that.") == {"format": [(0, 24)], "schema": [], "correct": []}


def test_token_offsets_tile_the_decoded_response(tiny_tokenizer):
    text = 'Call {"name": "f"} now'
    ids = tiny_tokenizer(text, add_special_tokens=False)["input_ids"] + [tiny_tokenizer.eos_token_id]
    offsets = token_offsets(tiny_tokenizer, ids)
    assert "".join(text[a:b] for a, b in offsets) == text
    assert offsets[-1][0] == offsets[-1][1] == len(text)  # the end of turn decodes to nothing
    assert span_token_mask(offsets, (0, 1)) == [True] + [False] * (len(ids) - 1)
    assert spans_token_mask(offsets, [(0, 1), (len(text) - 1, len(text))]) == \
        [i in (0, len(ids) - 2) for i in range(len(ids))]
