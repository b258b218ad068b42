"""benchmarks/lib/wrong_answers.py: plausible wrong answers made from a correct one (the
counterfactual references of experiments/block_reading.py), scored by the tasks' own verifiers."""
from __future__ import annotations

import random

import pytest

from benchmarks.lib.wrong_answers import argument_values, candidate_errors
from mrtpo.tasks import get_task


def _scored(name: str, n: int = 6, seed: int = 0):
    """[(example, reference scores by reward, [(kind, scores by reward)])] for n examples."""
    task = get_task(name)
    rng = random.Random(seed)
    out = []
    for ex in task.load()[:n]:
        ref = task.reference(ex)
        if ref is None:
            continue
        names = [r.name for r in task.rewards(ex)]
        ref_scores = dict(zip(names, (v.score for v in task.score(ex, ref))))
        wrong = [(kind, dict(zip(names, (v.score for v in task.score(ex, text)))))
                 for kind, text in candidate_errors(task.format, ref, rng)]
        out.append((ex, ref_scores, wrong))
    return out


@pytest.mark.parametrize("name,floor", [("toolcall", 0.5), ("text2sql", 0.5), ("instruct", 0.25)])
def test_wrong_answers_score_lower_and_none_higher(name, floor):
    """Candidates are mistakes the verifiers see: a share of them (most for calls and SQL; the
    text edits of instructions often keep every constraint, which is why block_reading keeps
    only those its verifiers score lower) lose on some reward, and none scores above the
    reference on any reward."""
    scored = _scored(name)
    assert scored, f"no example of {name} has a reference"
    lower = total = 0
    for _, ref, wrong in scored:
        for kind, got in wrong:
            total += 1
            lower += any(got[k] < ref[k] for k in ref)
            assert all(got[k] <= ref[k] + 1e-9 for k in ref), (kind, got, ref)
    assert total and lower / total >= floor, (lower, total)


@pytest.mark.parametrize("name", ["toolcall", "text2sql"])
def test_every_reward_can_be_broken_alone(name):
    """Each reward of the fixed-K tasks has a single-fault wrong answer in most examples: what
    block_reading needs to put a wrong answer in one reward's block."""
    scored = _scored(name)
    for reward in scored[0][1]:
        alone = [ex for ex, ref, wrong in scored
                 if any(got[reward] < ref[reward] and all(got[k] >= ref[k] for k in ref if k != reward)
                        for _, got in wrong)
                 or (reward != "format" and any(got[reward] < ref[reward] for _, got in wrong))]
        assert len(alone) >= len(scored) // 2, reward


def test_error_kinds_per_format():
    rng = random.Random(0)
    tool = get_task("toolcall")
    ex = tool.load()[0]
    kinds = {k for k, _ in candidate_errors(tool.format, tool.reference(ex), rng)}
    assert {"format:missing_tags", "format:text_before"} <= kinds
    assert any(k.startswith("call:") for k in kinds)
    sql = get_task("text2sql")
    ex = sql.load()[1]
    cands = candidate_errors(sql.format, sql.reference(ex), rng)
    assert ("format:missing_fence", sql.format.parse(sql.reference(ex)).answer) in cands
    assert any(k.startswith("sql:") for k, _ in cands)


def test_wrong_argument_uses_other_real_values():
    task = get_task("toolcall")
    refs = [task.reference(ex) for ex in task.load()]
    values = argument_values(task.format, refs)
    assert "location" in values and len(values["location"]) > 1
    cands = candidate_errors(task.format, refs[0], random.Random(1), n_content=30, values=values)
    others = [t for k, t in cands if k == "call:other_value"]
    assert others
    parsed = task.format.parse(others[0]).answer[0]["arguments"]
    assert any(v in values[k] for k, v in parsed.items())
