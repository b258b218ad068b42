"""The `instruct` task's prompt sets: the seeded generator (`-o prompts=generated`), the shipped
IFEval prompts (`-o prompts=ifeval`, `--data ifeval`) and the completion budget's rule
(`-o fit_tokens=N`)."""
from __future__ import annotations

import json
from importlib import resources

import pytest

from cli_runs import invoke
from mrtpo.tasks import get_task
from mrtpo.tasks.instruct_data import (GENERATED_BUDGET_TOKENS, SAMPLERS, budget_words, fits, generated_rows,
                                       needed_words)
from mrtpo.verifiers.ifeval import supported_ids


def test_generated_prompts_are_seeded_and_many():
    a, b, other = generated_rows(seed=0), generated_rows(seed=0), generated_rows(seed=1)
    assert len(a) >= 1000 and a == b and a != other
    assert len({r["id"] for r in a}) == len(a)
    task = get_task("instruct", prompts="generated")
    assert [ex.prompt for ex in task.load()] == [ex.prompt for ex in get_task("instruct", prompts="generated").load()]
    assert get_task("instruct", prompts="generated", generated=50, prompts_seed=3).load()[0].id == "gen3-00000"


def test_every_generated_constraint_is_checked_fits_and_stands_in_the_prompt():
    checked = set(supported_ids("ifeval")) | set(supported_ids("iftrain"))
    assert set(SAMPLERS) <= checked
    task = get_task("instruct", prompts="generated")
    examples = task.load()
    drawn = set()
    for ex in examples:
        cons = ex.data["constraints"]
        assert 1 <= len(cons) <= 3 and fits(cons, GENERATED_BUDGET_TOKENS), ex.id
        groups = [g for c in cons for g in SAMPLERS[c["id"]][0]]
        assert len(groups) == len(set(groups)), (ex.id, [c["id"] for c in cons])  # no two of one group
        for c in cons:
            assert c["sentence"] and c["sentence"] in ex.prompt and c["match"] == "given", (ex.id, c)
            drawn.add(c["id"])
    assert drawn == set(SAMPLERS)  # every sampler is drawn somewhere in the set


def test_generated_prompts_pass_blocks_lint():
    result, out = invoke("blocks", "lint", "instruct", "-o", "prompts=generated")
    assert result.exit_code == 0, out
    assert "no findings" in out and "linted 1200 examples" in out


def test_the_budget_rule():
    assert budget_words(128) == 96
    assert needed_words("length_constraints:number_words", {"relation": "at least", "num_words": 300}) == 300
    assert needed_words("length_constraints:number_words", {"relation": "less than", "num_words": 300}) == 1
    assert needed_words("detectable_format:number_bullet_lists", {"num_bullets": 5}) == 20
    assert needed_words("punctuation:no_comma", {}) == 1
    assert needed_words("combination:repeat_prompt", {"prompt_to_repeat": "a b c"}) == 13
    # IFEval's rows carry every kwarg, unused ones as None
    assert needed_words("length_constraints:number_sentences",
                        {"relation": "at least", "num_sentences": 12, "keywords": None}) == 96
    assert fits([{"id": "length_constraints:number_sentences", "kwargs": {"relation": "at least",
                                                                          "num_sentences": 12}}], 128)
    assert not fits([{"id": "length_constraints:number_sentences", "kwargs": {"relation": "at least",
                                                                              "num_sentences": 13}}], 128)


def test_the_shipped_ifeval_prompts_load_whole_and_by_the_budget():
    whole = get_task("instruct", prompts="ifeval").load()
    assert len(whole) == 541 and sum(len(ex.data["constraints"]) for ex in whole) == 834  # as published
    assert [ex.id for ex in get_task("instruct").load("ifeval")] == [ex.id for ex in whole]
    fit = get_task("instruct", prompts="ifeval", fit_tokens=128).load()
    assert len(fit) == 490 and all(fits(ex.data["constraints"], 128) for ex in fit)
    assert "1000" not in {ex.id for ex in fit}  # "Write a 300+ word summary": 300 words do not fit 96
    assert [ex.id for ex in fit] == [ex.id for ex in whole if fits(ex.data["constraints"], 128)]  # order kept


def test_the_shipped_ifeval_prompts_score_with_mrtpo_eval(tmp_path):
    """Every prompt answered with a text that follows nothing the checkers ask of a response
    with content: the floor, on all 541, through `mrtpo eval instruct -o prompts=ifeval`."""
    whole = get_task("instruct", prompts="ifeval").load()
    responses = tmp_path / "r.jsonl"
    responses.write_text("".join(json.dumps({"id": ex.id, "response": ""}) + "\n" for ex in whole))
    result, out = invoke("eval", "instruct", "-o", "prompts=ifeval", "--responses", responses, "--json")
    assert result.exit_code == 0, out
    doc = json.loads(result.stdout)
    assert doc["n"] == 541 and doc["metrics"]["prompt_level_strict_acc"] == 0.0


def test_the_shipped_ifeval_prompts_reproduce_the_official_figure(shared_dir):
    ifeval = shared_dir / "data" / "ifeval"
    shipped = resources.files("mrtpo").joinpath("data/instruct/ifeval_input_data.jsonl")
    assert (ifeval / "input_data.jsonl").read_bytes() == shipped.read_bytes()  # the published file, unchanged
    result, out = invoke("eval", "instruct", "-o", "prompts=ifeval", "--responses",
                         ifeval / "gpt4_responses.jsonl", "--json")
    assert result.exit_code == 0, out
    assert abs(json.loads(result.stdout)["metrics"]["prompt_level_strict_acc"] - 0.7671) <= 0.002


@pytest.mark.parametrize("options, words", [(["prompts=many"], "prompts"), (["fit_tokens=0"], "fit_tokens"),
                                            (["generated=0"], "generated")])
def test_bad_prompt_options_are_refused(options, words):
    result, out = invoke("blocks", "lint", "instruct", *[x for o in options for x in ("-o", o)])
    assert result.exit_code == 2 and words in out and "Traceback" not in out, out


def test_train_on_generated_prompts_holds_out_ifeval(tiny_qwen2_dir, tmp_path):
    """The held-out learning runs' setting: generated prompts to train on, IFEval's prompts that
    fit the budget held out (the first --heldout of them), scored with IFEval's metric."""
    run = tmp_path / "run"
    result, out = invoke("train", "--task", "instruct", "-o", "prompts=generated", "-o", "fit_tokens=128",
                         "--eval-data", "ifeval", "--heldout", 3, "--model", tiny_qwen2_dir, "--output-dir", run,
                         "--steps", 1, "--batch-prompts", 2, "--num-generations", 2, "--max-new-tokens", 4,
                         "--verify-workers", 0, "--lora-r", 4, "--save-every", 0)
    assert result.exit_code == 0, out
    doc = json.loads((run / "heldout.json").read_text())
    fit = [ex.id for ex in get_task("instruct", prompts="ifeval", fit_tokens=128).load()]
    assert doc["_example_ids"] == fit[:3] and "prompt_level_strict_acc" in doc
