"""IF-RLVR in full: IFTrain's 29 checkers (open-instruct's IFEvalG semantics), the loader on a
1,000-row file in the data set's format, open-instruct's fraction reward, and `mrtpo train` on it.

The rows come from tests/data/if_rlvr_sample.jsonl (200 rows built by the reference code
itself, tests/data/if_rlvr_build.py); the differential tests against that code are in
tests/oracle/test_iftrain_oracle.py.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mrtpo.evaluation import score
from mrtpo.tasks.instruct import InstructTask, UnsupportedInstructions
from mrtpo.verifiers.ifeval import check, describe, normalize_kwargs, supported_ids, verify
from mrtpo.verifiers.ifeval.iftrain_checks import reference_is_random, split_into_sentences
from mrtpo.verifiers.ifeval.open_instruct import open_instruct_reward, remove_thinking_section

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "data" / "if_rlvr_sample.jsonl"
IFTRAIN = supported_ids("iftrain")

CASES = [
    ("copy:repeat_phrase", {"phrase": "Time flies when having fun", "small_n": 2},
     "Time flies when eating fun\nTime runs when having fun", True),
    ("copy:repeat_phrase", {"phrase": "Time flies when having fun", "small_n": 2},
     "Time flies when eating fun\nTime flies when having fun", False),  # one copy unchanged
    ("copy:repeat_phrase", {"phrase": "Time flies when having fun", "small_n": 2},
     "time flies when eating fun\ntime runs when having fun", False),  # the first word's case counts
    ("copy:copy", {"prompt_to_repeat": "Tell me a joke."}, "  TELL me a joke.\n", True),
    ("copy:copy", {"prompt_to_repeat": "Tell me a joke."}, "Tell me a joke. Ha!", False),
    ("new:copy_span_idx", {"prompt_to_repeat": "Describe the sea now.", "n_start": 9, "n_end": 16}, "the sea", True),
    ("new:copy_span_idx", {"prompt_to_repeat": "Describe the sea now.", "n_start": 9, "n_end": 16}, "the sea ", True),
    ("new:copy_span_idx", {"prompt_to_repeat": "Describe the sea now.", "n_start": 9, "n_end": 16}, "the sea n", False),
    ("copy:copying_simple", {"prompt_to_repeat": "Go home."}, "go home.", True),
    ("copy:copying_multiple", {"prompt_to_repeat": "Go home.", "N": 2}, "Go home. ****** Go home.", True),
    ("copy:copying_multiple", {"prompt_to_repeat": "Go home.", "N": 2}, "Go home.******Go home.******", False),
    ("detectable_format:sentence_hyphens", {}, "I ran.-You hid.-We won.", True),
    ("detectable_format:sentence_hyphens", {}, "I ran. -You hid.", False),
    ("detectable_format:sentence_hyphens", {}, "A well-known fact.", False),  # a hyphen inside a sentence
    ("keywords:no_adjacent_consecutive", {}, "apple cat egg", True),
    ("keywords:no_adjacent_consecutive", {}, "apple Banana", False),
    ("detectable_format:square_brackets", {}, "[Every] [word] [here.]", True),
    ("detectable_format:square_brackets", {}, "[Every] word", False),
    ("keywords:word_once", {"keyword": "sea"}, "The SEA.", True),
    ("keywords:word_once", {"keyword": "sea"}, "The sea is seasonal.", False),  # substring matches count
    ("keywords:word_count_different_numbers", {"keyword": "sun", "frequency": 2, "relation": "less than"},
     "one sun", True),
    ("keywords:word_count_different_numbers", {"keyword": "sun", "frequency": 2, "relation": "at least"},
     "one sun", False),
    ("keywords:exclude_word_harder", {"keyword": "sea"}, "sea at the start, seaside, (sea)", True),
    ("keywords:exclude_word_harder", {"keyword": "sea"}, "by the sea now", False),
    ("paragraphs:paragraphs", {}, "One.\n***\nTwo.", True),
    ("paragraphs:paragraphs", {}, "One.\n\nTwo.", False),
    ("paragraphs:paragraphs2", {}, "One.\n\nTwo.", True),
    ("paragraphs:paragraphs2", {}, "One.\n\n\n\nTwo.", False),  # an empty paragraph between
    ("first_word:first_word_sent", {"first_word": "so"}, "So I went. so it goes!", True),
    ("first_word:first_word_sent", {"first_word": ["so"]}, "So I went. Then I left.", False),
    ("first_word:first_word_answer", {"first_word": "well"}, "Well, maybe.", False),  # "Well," is the word
    ("first_word:first_word_answer", {"first_word": "well"}, "WELL maybe.", True),
    ("last_word:last_word_sent", {"last_word": "now"}, "Go now. Come NOW!", True),
    ("last_word:last_word_sent", {"last_word": "now"}, "Go now. Come later.", False),
    ("last_word:last_word_answer", {"last_word": "end"}, "This is the (end).", True),
    ("last_word:last_word_answer", {"last_word": "end"}, "The end is near", False),
    ("detectable_format:bigram_wrapping", {}, "<<I am>> <<at home>> alone", True),  # an odd last word is free
    ("detectable_format:bigram_wrapping", {}, "<<I am>> at home", False),
    ("punctuation:punctuation_dot", {}, "No dots at all", True),
    ("punctuation:punctuation_dot", {}, "Pi is 3.14", False),
    ("punctuation:punctuation_exclamation", {}, "Calm.", True),
    ("punctuation:punctuation_exclamation", {}, "Wow!", False),
    ("count:lowercase_counting", {"N": 2}, "The Sea is calm", True),
    ("count:lowercase_counting", {"N": 2}, "it's a sea", False),  # "it", "s", "a", "sea"
    ("letters:letter_counting", {"N": 5, "relation": "less than"}, "abcd 123", True),
    ("letters:letter_counting", {"N": 5, "relation": "at least"}, "abcd 123", False),
    ("letters:letter_counting2", {"letter": "e", "let_frequency": 2, "let_relation": "at least"}, "EeL", True),
    ("count:counting_composition", {"n_sent": 1, "n_words": 3}, "I ran. *** We won. *** It rained.", True),
    ("count:counting_composition", {"n_sent": 1, "n_words": 3}, "I ran. * * * We won. * * * It rained.", False),
    ("count:count_unique", {}, "Alpha beta gamma.", True),
    ("count:count_unique", {}, "Alpha beta. Gamma.", False),  # "." twice
    ("count:count_increment_word", {"keyword1": "sun", "keyword2": "moon"}, "sun, moon and moon", True),
    ("count:count_increment_word", {"keyword1": "sun", "keyword2": "moon"}, "sun, Sunday, moon and moon", False),
    ("keywords:palindrome", {}, "I saw a kayak", True),  # "I" and "a" are palindromes too
    ("keywords:palindrome", {}, "Hello world", False),
    ("keywords:keyword_specific_position", {"keyword": "sea", "n": 2, "m": 3}, "Hi. I love sea views.", True),
    ("keywords:keyword_specific_position", {"keyword": "sea", "n": 2, "m": 3}, "Hi. I love Sea views.", False),
    ("keywords:start_end", {}, "Hello there, hello", True),
    ("keywords:start_end", {}, "Hello there, hello.", False),
]


def test_the_29_ifevalg_ids():
    assert len(IFTRAIN) == 29
    assert {"letters:letter_counting2", "paragraphs:paragraphs2", "new:copy_span_idx"} <= set(IFTRAIN)
    assert not set(IFTRAIN) & set(supported_ids("ifeval"))


def test_cases_cover_every_iftrain_id():
    assert {c[0] for c in CASES} == set(IFTRAIN)


@pytest.mark.parametrize("iid,kwargs,response,expected", CASES)
def test_ifevalg_semantics(iid, kwargs, response, expected):
    ok, feedback = verify(iid, kwargs, response)
    assert ok is expected, feedback
    assert feedback


def test_regex_sentence_splitter():
    assert split_into_sentences("Dr. Smith went home. He slept! Did he? Yes.") == [
        "Dr. Smith went home.", "He slept!", "Did he?", "Yes."]
    assert split_into_sentences("Pi is 3.14 and e.g. this. U.S.A. is big") == [
        "Pi is 3.14 and e.g. this.", "U.S.A. is big"]
    assert split_into_sentences("Wait... what") == ["Wait...", "what"]


@pytest.mark.parametrize("iid,kwargs,needle", [
    ("keywords:word_once", {"keyword": "  "}, "is empty"),
    ("keywords:word_once", {"keyword": "smile("}, "regular expression"),
    ("keywords:keyword_specific_position", {"keyword": "sea", "n": 0, "m": 2}, "at least 1"),
    ("copy:repeat_phrase", {"phrase": "(oops the end", "small_n": 2}, "regular expression"),
    ("letters:letter_counting", {"N": 3, "relation": "at most"}, "must be one of"),
    ("copy:copying_multiple", {"prompt_to_repeat": "Go."}, "missing kwarg(s) ['N']"),
])
def test_bad_kwargs_are_data_errors(iid, kwargs, needle):
    with pytest.raises(ValueError) as err:
        normalize_kwargs(iid, kwargs)
    assert needle in str(err.value) and iid in str(err.value)


def test_string_or_list_kwargs_and_random_draws():
    assert describe("keywords:keyword_specific_position", {"keyword": ["sea"], "n": 1, "m": 2}) == (
        "Include keyword sea in the 1-th sentence, as the 2-th word of that sentence.")
    assert check("count:count_increment_word", {"keyword1": ["a"], "keyword2": "b"}, "a b b")
    assert reference_is_random("new:copy_span_idx", {"prompt_to_repeat": "x y", "n_start": 0, "n_end": 2})
    assert reference_is_random("letters:letter_counting2", {"letter": "#", "let_frequency": 1, "let_relation": "at least"})
    assert not reference_is_random("new:copy_span_idx", {"prompt_to_repeat": "x y", "n_start": 1, "n_end": 2})
    # the value given is what is checked (open-instruct would draw a random start here)
    assert check("new:copy_span_idx", {"prompt_to_repeat": "Go home now.", "n_start": 0, "n_end": 7}, "go home")


def test_open_instruct_reward_is_the_fraction_on_the_answer():
    cons = [("punctuation:no_comma", {}), ("keywords:start_end", {}), ("punctuation:punctuation_dot", {})]
    assert remove_thinking_section("<|assistant|><think>a, b</think> <answer>x</answer> ") == "x"
    assert open_instruct_reward(cons, "<think>a, b.</think>hi there hi") == 1.0
    assert open_instruct_reward(cons, "hi, there hi") == pytest.approx(2 / 3)
    assert open_instruct_reward(cons, "<think>all thought</think>   ") == 0.0
    assert open_instruct_reward([], "text") == 0.0


def _rows() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]


def _thousand_rows() -> list[dict]:
    """1,000 rows in IF-RLVR's format: each sample row's constraints under five requests (its own
    and four others'); a kwarg that repeats the request (prompt_to_repeat) follows it."""
    rows = _rows()
    bases = [r["messages"][0]["content"][: -len(r["constraint"]) - 1] for r in rows]
    out = []
    for shift in range(5):
        for i, row in enumerate(rows):
            old, new = bases[i], bases[(i + 7 * shift) % len(rows)]
            (gt,) = ast.literal_eval(row["ground_truth"])
            kwargs = [{k: (new if v == old else v) for k, v in kw.items()} if kw else kw for kw in gt["kwargs"]]
            out.append({**row, "key": f"{row['key']}-{shift}",
                        "messages": [{"role": "user", "content": f"{new} {row['constraint']}"}],
                        "ground_truth": str([{"instruction_id": gt["instruction_id"], "kwargs": kwargs}])})
    return out


@pytest.fixture(scope="module")
def rlvr_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("if-rlvr") / "if_multi_constraints.jsonl"
    rows = _thousand_rows()
    assert len(rows) == 1000
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_thousand_rows_load_with_none_refused_and_every_block_found(rlvr_file):
    task = InstructTask()
    examples = task.load(str(rlvr_file))
    assert len(examples) == 1000
    ids = {c["id"] for e in examples for c in e.data["constraints"]}
    assert ids == set(supported_ids("ifeval")) | set(IFTRAIN)  # all 54 ids of IFEvalG's registry
    assert sum(len(e.data["constraints"]) for e in examples) > 2500
    for e in examples:
        assert e.data["layout"] == "if-rlvr"
        for k, c in enumerate(e.data["constraints"]):
            assert c["match"] in ("template", "given"), (e.id, c)
            assert c["sentence"] in e.prompt
            without = task.prompt_without(e, k)
            assert without.count(c["sentence"]) == e.prompt.count(c["sentence"]) - 1, (e.id, c["id"])


def test_rows_copy_the_request_they_carry(rlvr_file):
    task = InstructTask()
    examples = task.load(str(rlvr_file))
    copies = [(e, c) for e in examples for c in e.data["constraints"] if c["id"] == "copy:copying_simple"]
    assert copies
    for e, c in copies:
        request = c["kwargs"]["prompt_to_repeat"]
        assert e.prompt.startswith(request)  # the request the row states
        (verdict,) = [v for v, cc in zip(task.score(e, request), e.data["constraints"]) if cc is c]
        assert verdict.score == 1.0


def test_only_ids_outside_both_registries_are_refused(tmp_path):
    row = _rows()[0]
    bad = {**row, "ground_truth": str([{"instruction_id": ["basic:word_once", "keywords:word_once"],
                                        "kwargs": [{"keyword": "x"}, {"keyword": "x"}]}])}
    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(UnsupportedInstructions, match=r"basic:word_once \(1 rows, first at .*mixed.jsonl:2\)") as err:
        InstructTask().load(str(path))
    assert err.value.ids == ["basic:word_once"]
    assert len(InstructTask(skip_unsupported=True).load(str(path))) == 1


def test_eval_prints_open_instructs_reward_beside_ours(rlvr_file):
    task = InstructTask()
    examples = task.load(str(rlvr_file))[:200]
    responses = ["<think>x</think>" + e.prompt for e in examples]
    report = score(task, examples, responses)
    ours = [sum(r["rewards"]) / len(r["rewards"]) for r in report.per_example]
    theirs = [open_instruct_reward([(c["id"], c["kwargs"]) for c in e.data["constraints"]], resp)
              for e, resp in zip(examples, responses)]
    assert report.metrics["mean_constraint_reward"] == pytest.approx(sum(ours) / len(ours))
    assert report.metrics["open_instruct_reward"] == pytest.approx(sum(theirs) / len(theirs))
    assert [r["open_instruct_reward"] for r in report.per_example] == theirs
    # IFEval data gets IFEval's four figures only
    assert "open_instruct_reward" not in score(task, task.load()[:3], ["x"] * 3).metrics


@pytest.mark.slow
def test_train_runs_on_the_if_rlvr_file(rlvr_file, tiny_qwen2_dir, tmp_path):
    # the rows that carry an IFTrain constraint come first, so the two steps score some of them
    rows = [json.loads(line) for line in rlvr_file.read_text().splitlines()]
    rows.sort(key=lambda r: not any(i in IFTRAIN for i in ast.literal_eval(r["ground_truth"])[0]["instruction_id"]))
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "mrtpo", "train", "--task", "instruct", "--data", str(data), "--steps", "2",
           "--model", str(tiny_qwen2_dir), "--output-dir", str(run), "--batch-prompts", "2",
           "--num-generations", "2", "--max-new-tokens", "8", "--verify-workers", "0", "--lora-r", "4",
           "--save-every", "0", "--seed", "0"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "COLUMNS": "200", "NO_COLOR": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    completions = [json.loads(line) for line in (run / "completions.jsonl").read_text().splitlines()]
    names = {n.split("#")[0] for c in completions for n in c["reward_names"]}
    assert names & set(IFTRAIN), names
