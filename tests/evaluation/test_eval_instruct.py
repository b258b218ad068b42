"""`mrtpo eval instruct`: IFEval's prompt/instruction-level accuracy, strict and loose.

Run: .venv/bin/python -m pytest tests/evaluation/test_eval_instruct.py -q
The conformance test reads ../shared/data/ifeval and skips when it is absent.
"""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mrtpo.cli import app
from mrtpo.evaluation import run_eval, score
from mrtpo.tasks import get_task

ENV = {"COLUMNS": "200", "NO_COLOR": "1"}
END = "Is there anything else I can help with?"

# Project-layout rows (base + constraints) and responses whose strict/loose outcome is known.
ROWS = [
    {"id": "a", "base": "Write two lines about roses.",
     "constraints": [{"id": "punctuation:no_comma", "kwargs": {}},
                     {"id": "change_case:english_lowercase", "kwargs": {}}]},
    {"id": "b", "base": "Write a poem about the sea.",
     "constraints": [{"id": "detectable_format:title", "kwargs": {}},
                     {"id": "startend:end_checker", "kwargs": {"end_phrase": END}}]},
    {"id": "c", "base": "Describe a cat.",
     "constraints": [{"id": "detectable_format:number_highlighted_sections", "kwargs": {"num_highlights": 2}}]},
]
RESPONSES = {
    # first line has a comma and capitals: strict fails both, loose (first line dropped) passes both
    "a": "Sure, here it is:\nroses are red and soft\nthey smell sweet in the morning",
    # title passes; the end phrase is followed by "**": strict fails, loose ('*' removed) passes
    "b": f"<<the sea>>\nwaves roll in and out. {END}\n**",
    # one highlight where two are asked: fails both ways
    "c": "A cat is *small* and soft.",
}
# strict: a [F, F], b [T, F], c [F]  -> prompts 0/3, instructions 1/5
# loose:  a [T, T], b [T, T], c [F]  -> prompts 2/3, instructions 4/5


@pytest.fixture()
def files(tmp_path):
    data = tmp_path / "if.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps({"id": k, "response": v}) + "\n" for k, v in RESPONSES.items()))
    return data, responses


def test_four_accuracies_on_hand_checked_responses(files):
    data, responses = files
    task = get_task("instruct")
    report = run_eval(task, task.load(str(data)), responses_path=responses)
    assert report.metrics == pytest.approx({
        "prompt_level_strict_acc": 0 / 3, "inst_level_strict_acc": 1 / 5,
        "prompt_level_loose_acc": 2 / 3, "inst_level_loose_acc": 4 / 5})
    by_id = {r["id"]: r for r in report.per_example}
    assert by_id["b"]["follow_instruction_list"] == [True, False]
    assert by_id["b"]["follow_instruction_list_loose"] == [True, True]
    assert "does not end with" in by_id["b"]["feedback"][1]
    assert report.groups["startend:end_checker"] == {"strict": 0.0, "loose": 1.0, "n": 1}


def test_metric_agrees_with_the_task_rewards_and_its_own_evaluation(files):
    data, _ = files
    task = get_task("instruct")
    exs = task.load(str(data))
    responses = [RESPONSES[ex.id] for ex in exs]
    report = score(task, exs, responses)
    assert report.metrics == pytest.approx(task.evaluate(exs, responses).summary())
    for ex, rec in zip(exs, report.per_example):
        assert [v.score == 1.0 for v in task.score(ex, rec["response"])] == rec["follow_instruction_list"]


def test_a_think_block_is_not_checked(files):
    data, _ = files
    task = get_task("instruct")
    exs = task.load(str(data))[:1]
    plain = score(task, exs, ["roses are red\nthey smell sweet"])
    thought = score(task, exs, ["<think>Hmm, Roses, Violets.</think>roses are red\nthey smell sweet"])
    assert plain.metrics == thought.metrics
    assert plain.metrics["prompt_level_strict_acc"] == 1.0


def test_empty_and_missing_responses_score_zero(files, tmp_path):
    data, _ = files
    partial = tmp_path / "partial.jsonl"
    partial.write_text(json.dumps({"id": "c", "response": ""}) + "\n")
    r = CliRunner().invoke(app, ["eval", "instruct", "--data", str(data), "--responses", str(partial),
                                 "--missing", "zero", "--json"], env=ENV, prog_name="mrtpo")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["n"] == 3 and summary["metrics"]["inst_level_loose_acc"] == 0.0
    assert "2 examples have no response" in r.stderr
    r = CliRunner().invoke(app, ["eval", "instruct", "--data", str(data), "--responses", str(partial)],
                           env=ENV, prog_name="mrtpo")
    assert r.exit_code == 2 and "no response for 2 of 3 examples" in r.stderr


# --- conformance with the official IFEval evaluator -----------------------------------------------

RANDOM_KEYS = {1122, 1129}  # letter_frequency on '#' and '!': the official code draws a random letter


def _official(path):
    return {row["prompt"]: row for row in map(json.loads, path.read_text().splitlines())}


def test_ifeval_gpt4_responses_reproduce_the_official_figures(shared_dir, tmp_path):
    ifeval = shared_dir / "data" / "ifeval"
    out = tmp_path / "per_example.jsonl"
    r = CliRunner().invoke(app, ["eval", "instruct", "--data", str(ifeval / "input_data.jsonl"),
                                 "--responses", str(ifeval / "gpt4_responses.jsonl"), "--json",
                                 "--out", str(out)], env=ENV, prog_name="mrtpo")
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)["metrics"]
    assert json.loads(r.stdout)["n"] == 541 and json.loads(r.stdout)["settings"]["instructions"] == 834
    # one response answers a prompt worded slightly differently; it is paired, with a warning
    assert "near match" in r.stderr and "'2785'" in r.stderr

    ours = {int(row["id"]): row for row in map(json.loads, out.read_text().splitlines())}
    strict, loose = _official(ifeval / "gpt4_official_results_strict.jsonl"), _official(
        ifeval / "gpt4_official_results_loose.jsonl")
    keys = {int(row["key"]): row["prompt"] for row in map(json.loads, (ifeval / "input_data.jsonl").read_text().splitlines())}
    det = [k for k in keys if k not in RANDOM_KEYS]
    # every deterministic instruction verdict equals the official one, strict and loose
    for k in det:
        assert ours[k]["follow_instruction_list"] == strict[keys[k]]["follow_instruction_list"], k
        assert ours[k]["follow_instruction_list_loose"] == loose[keys[k]]["follow_instruction_list"], k

    def acc(rows, field):
        flat = [x for row in rows for x in row[field]]
        return sum(all(row[field]) for row in rows) / len(rows), sum(flat) / len(flat)

    off_strict = acc([strict[keys[k]] for k in keys], "follow_instruction_list")
    off_loose = acc([loose[keys[k]] for k in keys], "follow_instruction_list")
    assert off_strict == pytest.approx((0.7671, 0.8345), abs=5e-5)  # the published figures
    assert off_loose == pytest.approx((0.7948, 0.8549), abs=5e-5)
    # all 541 prompts: the printed figures are the official ones within 0.002. The two random-letter
    # prompts are scored as not followed, as the published strict run has them (strict is then
    # exact); the published loose run drew another letter and passed one of them (1/541 = 0.0018).
    assert abs(m["prompt_level_strict_acc"] - 0.7671) <= 0.002
    assert abs(m["inst_level_strict_acc"] - 0.8345) <= 0.002
    assert abs(m["prompt_level_loose_acc"] - 0.7948) <= 0.002
    assert abs(m["inst_level_loose_acc"] - 0.8549) <= 0.002
    assert (m["prompt_level_strict_acc"], m["inst_level_strict_acc"]) == pytest.approx(off_strict, abs=1e-12)
    for k in RANDOM_KEYS:
        assert ours[k]["nondeterministic"] == ["keywords:letter_frequency"]
