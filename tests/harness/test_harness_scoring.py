"""Scoring: the [N, K] table by reward name, the worker pool with deadlines, and the
reward-contract errors that stop a run with the reward's name."""
from __future__ import annotations

import math
import time

import pytest

from harness_task import BrokenTask, WordTask
from mrtpo.harness.scoring import Scorer, reward_names
from mrtpo.tasks.contract import RewardError
from mrtpo.tasks.base import Reward, Verdict

RESPONSES = ["<answer>select</answer>", "select count", "<answer>", "", "poem poem", "<answer>name</answer>"]


def _examples():
    ex = WordTask(6).load()  # w0, w2, w4 have a target word; w1, w3, w5 not
    return [ex[0], ex[0], ex[1], ex[1], ex[2], ex[2]]


def test_columns_by_name_with_nan_where_absent():
    with Scorer(WordTask(), workers=0) as scorer:
        s = scorer.score(_examples(), RESPONSES)
    assert s.names == ["format", "short", "letters", "word"]
    assert s.scores.shape == (6, 4)
    assert math.isnan(s.scores[2, 3]) and math.isnan(s.scores[3, 3])  # w1 has no word reward
    assert s.scores[0].tolist()[0] == 1.0 and s.scores[0, 3] == 1.0  # exact format, word present
    assert s.scores[1, 0] == 0.0 and s.scores[2, 0] == 0.5
    assert s.scores[1, 1].item() == pytest.approx(1 - len("select count") / 40)
    assert s.weights.tolist() == [1.0, 0.5, 1.0, 1.0]
    assert s.row_names[2] == ["format", "short", "letters"]
    assert s.verdicts[4][3] == Verdict(0.0, "the word 'singer' is missing")  # w2 asks for 'singer'


def test_pool_gives_the_same_table_as_in_process():
    with Scorer(WordTask(), workers=0) as a, Scorer(WordTask(), workers=2) as b:
        sa, sb = a.score(_examples(), RESPONSES), b.score(_examples(), RESPONSES)
    assert sa.names == sb.names
    assert sa.scores.nan_to_num(-1).tolist() == sb.scores.nan_to_num(-1).tolist()
    assert [[v.feedback for v in r] for r in sa.verdicts] == [[v.feedback for v in r] for r in sb.verdicts]


def test_weight_overrides_by_name():
    with Scorer(WordTask(), workers=0, weights={"short": 2.0}) as scorer:
        s = scorer.score(_examples()[:2], RESPONSES[:2])
    assert s.weights.tolist() == [1.0, 2.0, 1.0, 1.0]


def test_a_slow_reward_times_out_to_its_floor():
    task = BrokenTask("sleep", n=2)
    ex = task.load()
    with Scorer(task, workers=1, timeout=0.5) as scorer:
        t0 = time.perf_counter()
        s = scorer.score([ex[0], ex[1]], ["<answer>select</answer>", "x"])
        elapsed = time.perf_counter() - t0
    col = s.column("fragile")
    assert s.scores[:, col].tolist() == [0.0, 0.0]
    assert all(v[-1].feedback == "timed out after 0.5 s" for v in s.verdicts)
    assert s.scores[0, s.column("format")] == 1.0  # the other rewards scored normally
    assert elapsed < 10


@pytest.mark.parametrize("mode, message", [
    ("nan", "non-finite"),
    ("list", "returned 2 scores for one response"),
    ("raise", "raised on example"),
])
@pytest.mark.parametrize("workers", [0, 1])
def test_contract_breaches_stop_with_the_reward_name(mode, message, workers):
    task = BrokenTask(mode, n=2)
    with Scorer(task, workers=workers) as scorer:
        with pytest.raises(RewardError, match=message) as err:
            scorer.score(task.load(), ["a", "b"])
    assert "'fragile'" in str(err.value)
    assert "example '0'" in str(err.value) or "example 'w0'" in str(err.value)


def test_repeated_reward_names_are_made_unique():
    r = Reward("keywords:existence", lambda e, s: Verdict(1.0), lambda e, v: "")
    other = Reward("length", lambda e, s: Verdict(1.0), lambda e, v: "")
    assert reward_names([r, other, r, r]) == ["keywords:existence", "length", "keywords:existence#2",
                                              "keywords:existence#3"]


def test_the_pool_returns_a_verdict_for_every_job_call_after_call():
    """A worker's "started" and its result can arrive between two polls of its pipe; the pool
    must never take "started" for the result (it did, about one call in three, on toolcall)."""
    from mrtpo.tasks import get_task

    task = get_task("toolcall")
    examples = task.load()[:4] * 2
    responses = [task.reference(e) for e in examples[:4]] + ["no call"] * 4
    plain = Scorer(task, workers=0).score(examples, responses)
    with Scorer(task, workers=2, timeout=30) as scorer:
        for _ in range(12):
            table = scorer.score(examples, responses)
            assert table.scores.tolist() == plain.scores.tolist()
