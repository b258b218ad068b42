"""benchmarks/experiments/span_placement.py: the spans it puts each toolcall reward's credit on.

The learning figures are measured, not asserted; this checks the spans (they cut every
bundled reference into format / schema / correct pieces that are the parsed calls' names,
argument names and values) and the stand-in for the replay (q is 1 exactly on the tokens
of each reward's spans, the end of turn is the format's)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

import benchmark_module


@pytest.fixture(scope="module")
def spans_mod():
    return benchmark_module.load("span_placement")


def test_spans_cut_every_reference_into_its_parts(spans_mod):
    from mrtpo.tasks import get_task

    task = get_task("toolcall")
    examples = task.load()
    assert len(examples) >= 30
    for ex in examples:
        ref = task.reference(ex)
        spans = spans_mod.toolcall_spans(ref)
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


def test_text_without_a_call_is_all_format(spans_mod):
    spans = spans_mod.toolcall_spans("I cannot help with that.")
    assert spans == {"format": [(0, 24)], "schema": [], "correct": []}


def test_span_distances_mark_the_tokens_of_each_span(spans_mod, tiny_tokenizer):
    from mrtpo.tasks import get_task

    task = get_task("toolcall")
    ex = task.load()[2]
    ref = task.reference(ex)
    ids = tiny_tokenizer(ref, add_special_tokens=False)["input_ids"] + [tiny_tokenizer.eos_token_id]
    offsets = spans_mod.token_offsets(tiny_tokenizer, ids)
    assert "".join(ref[a:b] for a, b in offsets) == ref
    rollout = SimpleNamespace(response_ids=[ids, ids[:5]], responses=[ref, tiny_tokenizer.decode(ids[:5])],
                              max_length=len(ids), examples=[ex, ex])
    names = ["format", "schema", "correct"]
    scored = SimpleNamespace(names=names, column=names.index, verdicts=[task.score(ex, ref)] * 2)
    policy = SimpleNamespace(tokenizer=tiny_tokenizer)
    q, blocks = spans_mod.span_distances(policy, task, rollout, scored, 1.0)
    assert q.shape == (2, 3, len(ids)) and len(blocks) == 2
    spans = spans_mod.toolcall_spans(ref)
    for k, name in enumerate(names):
        for t, (a, b) in enumerate(offsets[:-1]):
            want = any(a < e and b > s for s, e in spans[name])
            assert bool(q[0, k, t]) == want, (name, t, ref[a:b])
    assert q[0, :, -1].tolist() == [1.0, 0.0, 0.0]  # the end of turn is the format's
    assert q[0].sum(0)[:-1].min() >= 1  # every token is some reward's
    assert q[1, :, 5:].abs().sum() == 0  # padding stays 0


def test_paired_changes_subtract_the_baseline_seed_by_seed(spans_mod):
    # 10 steps: a tenth is one step, so a change is last minus first
    curves = {"gdpo": {"reward": [[0.0] * 10], "rewards/mean": [[0.2] + [0.0] * 8 + [0.5], [0.1] * 10],
                       "rewards/correct/mean": [[0.0] * 9 + [0.3], [0.0] * 10]},
              "spans": {"reward": [[0.0] * 10], "rewards/mean": [[0.2] + [0.0] * 8 + [0.9], [0.1] * 9 + [0.0]],
                        "rewards/correct/mean": [[0.0] * 9 + [0.4], [0.0] * 9 + [0.2]]}}
    out = spans_mod.paired_changes(curves, "gdpo", 10)
    assert list(out) == ["spans"]
    assert out["spans"]["mean over rewards"] == pytest.approx([0.4, -0.1])
    assert out["spans"]["correct"] == pytest.approx([0.1, 0.2])
