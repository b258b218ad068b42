"""The `instruct` task: bundled sample, rewards and blocks, P_without_k, and the four readers."""
from __future__ import annotations

import json
import re
import logging

import pytest

from mrtpo.formats import TextFormat
from mrtpo.tasks import Task, get_task
from mrtpo.tasks.instruct import DataError, InstructTask, UnsupportedInstructions, compose_prompt
from mrtpo.verifiers.ifeval.split import remove_sentence


@pytest.fixture(scope="module")
def task():
    return get_task("instruct")


@pytest.fixture(scope="module")
def sample(task):
    return task.load()


def test_registered_task_contract(task):
    assert isinstance(task, InstructTask) and isinstance(task, Task)
    assert task.name == "instruct" and task.placement == "in_prompt"
    assert isinstance(task.format, TextFormat)
    assert task.reward_names == ("<instruction_id> (one per constraint)",)


def test_bundled_sample_shape(sample):
    assert 30 <= len(sample) <= 60
    assert len({e.id for e in sample}) == len(sample)
    sizes = {len(e.data["constraints"]) for e in sample}
    assert sizes == {1, 2, 3}
    ids = {c["id"] for e in sample for c in e.data["constraints"]}
    assert any(i.startswith(("count:", "format:", "words:")) for i in ids)  # IFBench ids too
    assert len(ids) >= 30


def test_every_reference_follows_all_its_constraints(task, sample):
    for e in sample:
        ref = task.reference(e)
        assert ref, e.id
        verdicts = task.score(e, ref)
        assert [v.score for v in verdicts] == [1.0] * len(verdicts), (e.id, [v.feedback for v in verdicts])


def test_one_reward_per_constraint_named_by_id_with_suffix_on_repeats(task, sample):
    garden = next(e for e in sample if e.id == "garden")
    assert [r.name for r in task.rewards(garden)] == ["keywords:existence", "keywords:existence#2"]
    for e in sample:
        rewards = task.rewards(e)
        assert [r.name.split("#")[0] for r in rewards] == [c["id"] for c in e.data["constraints"]]


def test_blocks_are_the_constraint_sentences_verbatim_in_p0(task, sample):
    for e in sample:
        for k, (reward, c) in enumerate(zip(task.rewards(e), e.data["constraints"])):
            block = reward.block(e, reward.verify(e, "anything"))
            assert block == c["sentence"] and block in e.prompt
            without = task.prompt_without(e, k)
            assert block not in without
            others = [o["sentence"] for j, o in enumerate(e.data["constraints"]) if j != k]
            assert all(o in without for o in others)
            assert without == remove_sentence(e.prompt, block)
            assert "  " not in without and not without.startswith((" ", "\n")) and not without.endswith(" ")


def test_prompt_without_changes_only_the_seam():
    p = "Write a poem.\n\nUse no commas. End with Amen. Answer in English."
    assert remove_sentence(p, "Use no commas.") == "Write a poem.\n\nEnd with Amen. Answer in English."
    assert remove_sentence(p, "End with Amen.") == "Write a poem.\n\nUse no commas. Answer in English."
    assert remove_sentence(p, "Answer in English.") == "Write a poem.\n\nUse no commas. End with Amen."
    assert remove_sentence(p, "Write a poem.") == "Use no commas. End with Amen. Answer in English."
    assert remove_sentence("A.\nB.\nC.", "B.") == "A.\nC."
    assert remove_sentence(p, "") == p
    with pytest.raises(ValueError, match="not part of the prompt"):
        remove_sentence(p, "Missing sentence.")


def test_verdicts_score_one_or_zero_with_feedback(task, sample):
    e = next(e for e in sample if e.id == "lighthouse")
    good = task.score(e, task.reference(e))
    bad = task.score(e, "A light, on a cliff.")
    assert [v.score for v in good] == [1.0, 1.0]
    assert [v.score for v in bad] == [0.0, 0.0]
    assert "commas" in bad[0].feedback and "sentences: 1" in bad[1].feedback
    empty = task.score(e, "")
    assert [v.score for v in empty] == [0.0, 0.0] and all("empty" in v.feedback for v in empty)


def test_think_block_is_stripped_before_checking(sample):
    e = next(e for e in sample if e.id == "lighthouse")
    thinking = InstructTask(think=True)
    ref = thinking.reference(e)
    assert ref.startswith("<think>")
    assert [v.score for v in thinking.score(e, ref)] == [1.0, 1.0]
    assert [v.score for v in thinking.score(e, "<think>plan, with commas, here</think>\n" + e.data["reference"])] == [1.0, 1.0]
    unclosed = thinking.score(e, "<think>never closed. Still thinking. And more.")
    assert [v.score for v in unclosed] == [0.0, 0.0] and "not closed" in unclosed[0].feedback


# --- readers ------------------------------------------------------------------------------------
def _write(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_reads_ifbench_style_rows(tmp_path, task):
    kw = {"N": None, "min_words": 3.0, "max_words": 9.0, "sep": None, "keywords": None}
    prompt = "Describe tea. The response must contain between 3 and 9 words. Answer with a list of items, instead of bullet points use ->."
    path = _write(tmp_path, "ifbench.jsonl", [{
        "key": "7", "prompt": prompt, "instruction_id_list": ["count:word_count_range", "format:list"],
        "kwargs": [kw, dict(kw, min_words=None, max_words=None, sep="->")]}])
    (ex,) = task.load(path)
    assert ex.id == "7" and ex.prompt == prompt and ex.data["layout"] == "ifeval"
    c0, c1 = ex.data["constraints"]
    assert c0["kwargs"] == {"min_words": 3, "max_words": 9} and c1["kwargs"] == {"sep": "->"}
    assert c0["sentence"] == "The response must contain between 3 and 9 words." and c0["match"] == "template"
    assert task.prompt_without(ex, 0) == "Describe tea. Answer with a list of items, instead of bullet points use ->."
    assert [v.score for v in task.score(ex, "-> green tea\n-> black tea")] == [1.0, 1.0]


def test_woven_constraints_have_no_block_unless_appended(tmp_path):
    row = {"key": 1, "prompt": "Write a limerick about Lisbon without any commas.",
           "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    path = _write(tmp_path, "ifeval.jsonl", [row])
    (ex,) = InstructTask().load(path)
    assert ex.data["constraints"][0]["sentence"] == "" and ex.prompt == row["prompt"]
    assert InstructTask().rewards(ex)[0].block(ex, None) == ""
    assert InstructTask.prompt_without(ex, 0) == row["prompt"]
    (gen,) = InstructTask(append_missing=True).load(path)
    sentence = "In your entire response, refrain from the use of any commas."
    assert gen.prompt == row["prompt"] + "\n\n" + sentence
    assert gen.data["constraints"][0] == {"id": "punctuation:no_comma", "kwargs": {}, "sentence": sentence,
                                          "match": "generated"}
    assert InstructTask.prompt_without(gen, 0) == row["prompt"]


def test_close_paraphrases_are_found_unless_template_only(tmp_path):
    prompt = "Explain tides. In your response, the last word of each sentence must become the first word of the next sentence."
    path = _write(tmp_path, "p.jsonl", [{"key": 1, "prompt": prompt, "instruction_id_list": ["words:last_first"],
                                         "kwargs": [{}]}])
    (ex,) = InstructTask().load(path)
    c = ex.data["constraints"][0]
    assert c["match"] == "close" and c["sentence"] == prompt[len("Explain tides. "):]
    (strict,) = InstructTask(match="template").load(path)
    assert strict.data["constraints"][0]["sentence"] == ""


def test_reads_if_rlvr_rows(tmp_path, task):
    constraint = "Your entire response should be in English, and in all lowercase letters. No capital letters are allowed."
    rows = [
        {"key": "a", "messages": [{"role": "user", "content": "Tell me about owls.\n\n" + constraint}],
         "ground_truth": str([{"instruction_id": ["change_case:english_lowercase"], "kwargs": [None]}]),
         "constraint": constraint, "constraint_type": "single"},
        {"key": "b", "messages": [{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "Name a bird. Answer with less than 5 words. "
                                                              "Wrap your entire response with double quotation marks."}],
         "ground_truth": json.dumps([{"instruction_id": ["length_constraints:number_words", "startend:quotation"],
                                      "kwargs": [{"num_words": 5, "relation": "less than"}, None]}])},
    ]
    a, b = task.load(_write(tmp_path, "rlvr.jsonl", rows))
    assert a.data["layout"] == "if-rlvr" and a.data["constraints"][0]["sentence"] == constraint
    assert a.data["constraints"][0]["match"] == "given"
    assert b.system == "Be brief." and [c["match"] for c in b.data["constraints"]] == ["template", "template"]
    assert [v.score for v in task.score(b, '"A robin."')] == [1.0, 1.0]


def test_reads_project_rows_and_json_arrays(tmp_path, task):
    rows = [{"id": "p1", "prompt": "Describe snow. Do not use commas.",
             "constraints": [{"id": "punctuation:no_comma", "sentence": "Do not use commas."}],
             "reference": "Snow is soft and white."},
            {"id": "p2", "base": "Describe rain.", "constraints": [{"id": "startend:quotation"}]}]
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    p1, p2 = task.load(str(path))
    assert p1.data["constraints"][0]["match"] == "given" and task.reference(p1) == "Snow is soft and white."
    assert p2.prompt == compose_prompt("Describe rain.", ["Wrap your entire response with double quotation marks."])
    assert task.reference(p2) is None



def test_a_json_file_is_read_row_by_row_in_each_of_its_three_forms(tmp_path, task):
    """A .json array and JSON lines in a .json are streamed (the rows before a broken one come
    first); one object with the splits inside is read whole. All three give the same examples."""
    rows = [{"key": k, "prompt": "Go. Wrap your entire response with double quotation marks.",
             "instruction_id_list": ["startend:quotation"], "kwargs": [{}]} for k in range(3)]
    forms = {"array.json": json.dumps(rows, indent=2), "lines.json": "\n".join(map(json.dumps, rows)),
             "splits.json": json.dumps({"train": rows}, indent=2)}
    for name, text in forms.items():
        (tmp_path / name).write_text(text)
        assert [e.id for e in task.load(str(tmp_path / name))] == ["0", "1", "2"], name
    (tmp_path / "array.json").write_text(json.dumps(rows)[:-1] + ', {"key": 3, ]')
    (tmp_path / "lines.json").write_text(forms["lines.json"] + '\n{"key": 3, }')
    for name, said in (("array.json", "row 4 (line 1): not valid JSON"), ("lines.json", "lines.json:4: not valid JSON")):
        examples = task.iter_examples(str(tmp_path / name))
        assert [next(examples).id for _ in range(3)] == ["0", "1", "2"]
        with pytest.raises(DataError, match=re.escape(said)):
            next(examples)

@pytest.mark.parametrize("row,needle", [
    ({"prompt": "x", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}, {}]},
     "one object per instruction id"),
    ({"prompt": "x", "instruction_id_list": ["length_constraints:number_words"],
      "kwargs": [{"num_words": "many", "relation": "at least"}]}, "kwargs[0] (length_constraints:number_words)"),
    ({"prompt": "x", "constraints": [{"id": "punctuation:no_comma", "sentence": "Not in prompt."}]},
     "constraints[0].sentence"),
    ({"constraints": [{"id": "punctuation:no_comma"}]}, "needs a string 'prompt'"),
    ({"question": "x"}, "unknown row layout"),
    ({"messages": [{"role": "user", "content": "x"}], "ground_truth": "not a literal ["}, "'ground_truth'"),
])
def test_bad_rows_name_file_row_and_field(tmp_path, task, row, needle):
    path = _write(tmp_path, "bad.jsonl", [row])
    with pytest.raises(DataError) as err:
        task.load(path)
    assert f"{path}:1" in str(err.value) and needle in str(err.value)


def test_invalid_json_line_is_reported(tmp_path, task):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"prompt": "x", "instruction_id_list": [], "kwargs": []}\n{not json}\n')
    with pytest.raises(DataError, match=r"broken.jsonl:2: not valid JSON"):
        task.load(str(path))


def test_unsupported_ids_rejected_or_skipped_with_a_warning(tmp_path, caplog):
    rows = [{"key": 1, "prompt": "Go.", "instruction_id_list": ["words:start_verb"], "kwargs": [{}]},
            {"key": 2, "prompt": "Go. Wrap your entire response with double quotation marks.",
             "instruction_id_list": ["startend:quotation"], "kwargs": [{}]}]
    path = _write(tmp_path, "mixed.jsonl", rows)
    with pytest.raises(UnsupportedInstructions, match=r"words:start_verb \(1 rows, first at .*mixed.jsonl:1\)"):
        InstructTask().load(path)
    with caplog.at_level(logging.WARNING):
        (kept,) = InstructTask(skip_unsupported=True).load(path)
    assert kept.id == "2" and "Dropped 1 rows" in caplog.text


def test_missing_file_and_bad_options(task):
    with pytest.raises(DataError, match="no such file"):
        task.load("does/not/exist.jsonl")
    with pytest.raises(ValueError, match="match must be"):
        InstructTask(match="fuzzy")
