"""The credit probe: edit spans, the lift/specificity math, the built-in tasks' edits, a run
on a custom task with a real (tiny) model against the replay's own distances, and the CLI."""
from __future__ import annotations

import json
import math
from dataclasses import asdict

import pytest
import torch
from typer.testing import CliRunner

from mrtpo.credit import probe
from mrtpo.tasks import Example, ProbeEdit, Reward, Task, Verdict, get_task


# --- spans -------------------------------------------------------------------------------

@pytest.mark.parametrize("before,after,span", [
    ('{"city": "Paris"}', '{"city": "Rome"}', "Rome"),
    ("SELECT a FROM book", "SELECT a FROM boox", "x"),
    ("```sql\nSELECT 1\n```", "```sqlite\nSELECT 1\n```", "ite"),
    ("<tool_call>\n{}", "[tool_call]\n{}", "[tool_call]"),
    ("End with Good luck!", "End with Good!", "d"),  # a deletion marks the character before the cut
])
def test_between_finds_the_changed_characters(before, after, span):
    e = ProbeEdit.between("r", "k", before, after)
    assert e.response == after and after[e.span[0]: e.span[1]] == span
    assert ProbeEdit.between("r", "k", before, before) is None


# --- the math ----------------------------------------------------------------------------

def test_edit_figures_share_and_lift():
    q = torch.tensor([[0.0, 1.0, 0.0, 0.0],  # all mass on the edited token
                      [1.0, 1.0, 1.0, 1.0],  # even: no information
                      [0.0, 0.0, 0.0, 0.0]])  # empty block
    shares, lifts = probe.edit_figures(q, [False, True, False, False])  # token share 1/4
    assert shares[:2] == [1.0, 0.25] and lifts[:2] == [4.0, 1.0]
    assert math.isnan(shares[2]) and math.isnan(lifts[2])


def test_first_token_mask_keeps_the_spans_first_token():
    assert probe.first_token_mask([False, True, True, False]) == [False, True, False, False]
    assert probe.first_token_mask([False, False]) == [False, False]


def _edit(kind, reward, lifts):
    return probe.EditResult("e", kind, reward, "r", "s", 1, 4, {k: v / 4 for k, v in lifts.items()}, lifts,
                            {k: 0.0 for k in lifts})


def test_summary_specificity_is_own_lift_over_the_best_other():
    edits = [_edit("value", "correct", {"correct": 3.0, "format": 1.0, "schema": 1.5}),
             _edit("value", "correct", {"correct": 5.0, "format": 1.0, "schema": math.nan}),
             _edit("tags", "format", {"correct": 1.0, "format": 1.2, "schema": 1.0})]
    kinds = {k.kind: k for k in probe.summarize(edits)}
    v = kinds["value"]
    assert v.edits == 2 and v.own_lift == 4.0 and v.best_other == ("schema", 1.5)
    assert v.specificity == pytest.approx(4.0 / 1.5)
    assert kinds["tags"].specificity == pytest.approx(1.2)
    report = probe.ProbeReport("t", "m", 2, list(kinds.values()))
    assert report.verdict().startswith("partly reward-specific: specificity >= 2 on 1 of 2")
    kinds["value"].lift["correct"] = 2.0  # 2.0 / 1.5: some, not >= 2; tags 1.2: neither
    assert probe.ProbeReport("t", "m", 2, list(kinds.values())).verdict().startswith(
        "barely reward-specific: no edit kind reaches specificity 2, 1 of 2 reach 1.25")
    kinds["value"].lift["correct"] = 1.0
    assert probe.ProbeReport("t", "m", 2, list(kinds.values())).verdict().startswith("not reward-specific")


def test_per_example_reward_names_are_compared_by_role():
    """instruct names a reward per constraint: the summary compares own against best other."""
    edits = [_edit("startend:end_checker", "a", {"a": 3.0, "b": 1.0}),
             _edit("startend:end_checker", "b", {"a": 0.5, "b": 2.0})]
    edits[0].decision_distance, edits[0].text_control = {"a": 0.3, "b": 0.1}, {"a": 0.1, "b": 0.2}
    edits[1].decision_distance, edits[1].text_control = {"a": 0.2, "b": 0.5}, {"a": 0.4, "b": 0.3}
    (k,) = probe.summarize(edits)
    assert k.lift == {"(own)": 2.5, "(best other)": 0.75} and k.specificity == pytest.approx(2.5 / 0.75)
    assert k.decision_distance == {"(own)": pytest.approx(0.4)} and k.text_control == {"(own)": pytest.approx(0.2)}
    assert k.own_over_text == pytest.approx(2.0)


# --- built-in edits ----------------------------------------------------------------------

@pytest.mark.parametrize("name,kinds", [
    ("toolcall", {"argument value", "function name", "tags"}),
    ("text2sql", {"literal", "column", "fence"}),
    ("instruct", {"startend:end_checker", "punctuation:no_comma", "change_case:english_lowercase"}),
])
def test_builtin_edits_lower_the_reward_they_are_about(name, kinds):
    task = get_task(name)
    seen, lowered = set(), 0
    total = 0
    for ex in task.load():
        ref = task.reference(ex)
        if ref is None:
            continue
        names = [r.name for r in task.rewards(ex)]
        base = dict(zip(names, (v.score for v in task.score(ex, ref))))
        for e in task.probe_edits(ex):
            assert e.reward in names and e.response != ref
            assert e.response[e.span[0]: e.span[1]] and 0 <= e.span[0] < e.span[1] <= len(e.response)
            got = dict(zip(names, (v.score for v in task.score(ex, e.response))))
            lowered += got[e.reward] < base[e.reward]
            total += 1
            seen.add(e.kind)
    assert kinds <= seen
    assert lowered >= 0.9 * total


def test_text2sql_column_edit_gets_a_sqlite_error_block_naming_it():
    task = get_task("text2sql")
    ex = task.load()[1]
    edit = next(e for e in task.probe_edits(ex) if e.kind == "column")
    verdicts = task.score(ex, edit.response)
    block = task.rewards(ex)[1].block(ex, verdicts[1])
    word = [w for w in edit.response.split() if edit.response[edit.span[0]: edit.span[1]] in w][0]
    assert "SQLite error" in block and word.strip(",()") in block


# --- a custom task, replayed by a real model -----------------------------------------------

class ColorAnimal(Task):
    """Two rewards, each with its own block and its own probe edit."""

    name = "probe-color-animal"
    placement = "append"

    def load(self, path=None, split=None):
        return [Example(id=f"ex{i}", prompt=f"Name a color and an animal (round {i}).") for i in range(3)]

    def rewards(self, example):
        return [Reward("color", lambda ex, r: Verdict(float("red" in r)), lambda ex, v: "The color is red."),
                Reward("animal", lambda ex, r: Verdict(float("cat" in r)), lambda ex, v: "The animal is cat.")]

    def reference(self, example):
        return "The color is red and the animal is cat."

    def probe_edits(self, example):
        ref = self.reference(example)
        return [ProbeEdit.between("color", "color word", ref, ref.replace("red", "blue")),
                ProbeEdit.between("animal", "animal word", ref, ref.replace("cat", "dog"))]


def test_probe_on_a_custom_task_matches_the_replays_distances(tiny_qwen2_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mrtpo.contexts import build_item
    from mrtpo.credit.records import response_ids
    from mrtpo.replay import distances

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_qwen2_dir)
    task = ColorAnimal()
    examples = task.load()
    report = probe.run(task, examples, model, tok, model_name="tiny", control=True)
    assert [k.kind for k in report.kinds] == ["color word", "animal word"]
    assert [k.edits for k in report.kinds] == [3, 3] and len(report.control) == 2
    # figures recomputed by hand from the replay's own distances
    e = report.edits[0]
    ex = examples[0]
    edit = task.probe_edits(ex)[0]
    ids = response_ids(tok, edit.response)
    item = build_item(task, tok, ex, ids, task.score(ex, edit.response))
    q = distances(model, [item])[0, :, : len(ids)]  # [K, T]
    offsets = tok(edit.response, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    mask = torch.tensor([a < edit.span[1] and b > edit.span[0] for a, b in offsets] + [False])
    expected = (q[0] * mask).sum() / q[0].sum() / (mask.sum() / len(ids))
    assert e.lift["color"] == pytest.approx(float(expected), rel=1e-5)
    assert e.span_text == "blue" and e.span_tokens == int(mask.sum())
    first = torch.zeros_like(mask)
    first[int(mask.nonzero()[0])] = True  # the decision token: the span's first
    expected = (q[0] * first).sum() / q[0].sum() * len(ids)
    assert e.decision_lift["color"] == pytest.approx(float(expected), rel=1e-5)
    assert report.kinds[0].decision_lift["color"] == pytest.approx(
        sum(x.decision_lift["color"] for x in report.edits if x.kind == "color word") / 3)
    # the text control: P_all with as many tokens of unrelated text as the block, after it
    from mrtpo.contexts import ReplayItem, context_messages, render_ids

    t0 = int(mask.nonzero()[0])
    assert e.decision_distance["color"] == pytest.approx(float(q[0, t0]), rel=1e-5)
    block = item.blocks[0].strip()
    extra = probe.filler(tok, len(tok(block, add_special_tokens=False)["input_ids"]))
    assert extra and probe.TEXT_CONTROL.startswith(extra[:20])
    p_all = context_messages(task, ex, item.blocks)[0]
    content = p_all[-1]["content"].replace(block, block + "\n\n" + extra)
    text = ReplayItem([item.context_ids[0], render_ids(tok, [*p_all[:-1], {**p_all[-1], "content": content}])],
                      ids, ["text"], ["x"])
    expected = distances(model, [text])[0, 0, t0]
    assert e.text_control["color"] == pytest.approx(float(expected), rel=1e-5) and expected > 0
    color = report.kinds[0]
    assert color.text_control["color"] == pytest.approx(
        sum(x.text_control["color"] for x in report.edits if x.kind == "color word") / 3)
    assert color.own_over_text == pytest.approx(color.decision_distance["color"] / color.text_control["color"])
    d = report.to_dict()
    assert d["verdict"] == report.verdict() and len(d["edits"]) == 6
    assert d["kinds"][0]["own_over_text"] == pytest.approx(color.own_over_text)


def test_a_weighting_is_taken_on_the_same_replay_and_mrtpos_weights_give_the_distances_figures(tiny_qwen2_dir):
    """`edit_results(replayed, weighting)`: MRTPO's mean-1 weights (`token_weights`) give the
    figures of the distances themselves (a constant per reward cancels in a share); another
    weighting changes the lifts, and leaves the decision distances and text controls alone."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mrtpo.advantages import token_weights

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_qwen2_dir)
    task = ColorAnimal()
    replayed = probe.replay_edits(task, model, tok, task.load())
    plain = probe.edit_results(replayed)
    assert [asdict(e) for e in plain] == [asdict(e) for e in probe.probe_edits(task, model, tok, task.load())[0]]

    def mrtpo_weights(q):  # [K, T] -> [K, T]
        return token_weights(q[None], torch.ones(1, q.shape[-1], dtype=torch.bool))[0]

    weighted = probe.edit_results(replayed, mrtpo_weights)
    for a, b in zip(plain, weighted):
        for r in a.lift:
            assert b.lift[r] == pytest.approx(a.lift[r], rel=1e-5)
            assert b.decision_lift[r] == pytest.approx(a.decision_lift[r], rel=1e-5)
    squared = probe.edit_results(replayed, lambda q: q ** 2)
    assert any(abs(a.lift["color"] - b.lift["color"]) > 1e-3 for a, b in zip(plain, squared))
    assert [e.decision_distance for e in squared] == [e.decision_distance for e in plain]
    assert [e.text_control for e in squared] == [e.text_control for e in plain]


def test_probe_refuses_an_edit_naming_an_unknown_reward(tiny_qwen2_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    class Wrong(ColorAnimal):
        def probe_edits(self, example):
            return [ProbeEdit("colour", "x", "The color is blue.", (13, 17))]

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen2_dir)
    tok = AutoTokenizer.from_pretrained(tiny_qwen2_dir)
    with pytest.raises(ValueError, match="names reward 'colour'"):
        probe.run(Wrong(), Wrong().load(), model, tok, control=False)


def test_probe_command_json_and_text(tiny_qwen2_dir):
    from mrtpo.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["probe", "toolcall", "--model", str(tiny_qwen2_dir), "--limit", "2", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout[res.stdout.index("{"):])
    assert out["schema"] == "mrtpo.probe/1" and out["task"] == "toolcall" and {k["kind"] for k in out["kinds"]} == {"argument value", "function name", "tags"}
    assert out["control"] is not None and out["verdict"]
    res = runner.invoke(app, ["probe", "text2sql", "--model", str(tiny_qwen2_dir), "--limit", "2", "--no-control"])
    assert res.exit_code == 0, res.output
    assert "verdict:" in res.stdout and "random-init control" not in res.stdout
    res = runner.invoke(app, ["probe", "nosuchtask", "--model", str(tiny_qwen2_dir)])
    assert res.exit_code == 2
