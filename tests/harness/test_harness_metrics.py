"""Harness metrics (TRL names, MRTPO's top-80% share), JSONL logs and the per-step prompt order."""
from __future__ import annotations

import json
import math

import pytest
import torch

from mrtpo.harness.data import prompts_for_step
from mrtpo.harness.metrics import completion_metrics, mrtpo_metrics, reward_metrics
from mrtpo.harness.run.files import JsonlLog, clean
from mrtpo.statistics import top_share


def test_reward_metrics_by_hand():
    nan = float("nan")
    # 2 groups of 2; rewards a (weight 1), b (weight 2, absent on group 1)
    scores = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, nan], [1.0, nan]])
    m = reward_metrics(scores, ["a", "b"], torch.tensor([1.0, 2.0]), group_size=2)
    # weighted sums: 1, 2, 1, 1 -> mean 1.25; group stds: 0.7071, 0 -> mean 0.3536
    assert m["reward"] == pytest.approx(1.25)
    assert m["reward_std"] == pytest.approx(math.sqrt(0.5) / 2, abs=1e-6)
    assert m["frac_reward_zero_std"] == 0.5
    assert m["rewards/a/mean"] == pytest.approx(0.75)
    assert m["rewards/b/mean"] == pytest.approx(0.5)  # only where it applies
    assert m["rewards/a/frac_zero_std"] == 0.5  # group 1 is all ones
    assert m["rewards/b/frac_zero_std"] == 0.0  # its only group has spread
    assert m["rewards/b/std"] == pytest.approx(math.sqrt(0.5))


def test_completion_metrics():
    m = completion_metrics([3, 5, 10], [False, False, True])
    assert m["completions/mean_length"] == 6.0
    assert m["completions/clipped_ratio"] == pytest.approx(1 / 3)
    assert (m["completions/min_length"], m["completions/max_length"]) == (3.0, 10.0)
    # TRL's terminated lengths: over the completions that ended with a stop token (3 and 5)
    assert (m["completions/mean_terminated_length"], m["completions/min_terminated_length"],
            m["completions/max_terminated_length"]) == (4.0, 3.0, 5.0)
    none_ended = completion_metrics([8, 8], [True, True])
    assert none_ended["completions/mean_terminated_length"] == 0.0  # TRL logs 0 then


def test_tokens_seen_counts_prompts_and_completions():
    from mrtpo.harness.metrics import tokens_seen

    assert tokens_seen(0, [10, 12], [3, 5]) == 30
    assert tokens_seen(30, [10, 12], [1, 1]) == 54


def test_top_share_known_answers():
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
    q = torch.zeros(2, 3, 6)
    q[0, 0] = torch.tensor([0.0, 9.0, 0.0, 1.0, 0.0, 99.0])  # 1 token of 5 holds 90% (padding ignored)
    q[0, 1] = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 0.0])  # uniform: 4 of 5 tokens for 80%
    # row 0 reward 2 all zero: NaN (nothing to locate)
    q[1, 0] = torch.tensor([4.0, 4.0, 1.0, 1.0, 0.0, 0.0])  # 8 of 10 in two tokens -> 2/6
    s = top_share(q, mask)
    assert s[0, 0].item() == pytest.approx(1 / 5)
    assert s[0, 1].item() == pytest.approx(4 / 5)
    assert math.isnan(s[0, 2].item())
    assert s[1, 0].item() == pytest.approx(2 / 6)
    m = mrtpo_metrics(q, mask, ["a", "b", "c"])
    assert m["mrtpo/a/top80_token_share"] == pytest.approx((1 / 5 + 2 / 6) / 2)
    assert m["mrtpo/b/top80_token_share"] == pytest.approx(4 / 5)  # row 1's b is all zero
    assert "mrtpo/c/top80_token_share" not in m


def test_jsonl_log_truncates_after_a_step(tmp_path):
    log = JsonlLog(tmp_path / "m.jsonl")
    log.write([{"step": s, "x": float(s)} for s in (1, 2, 3)])
    log.truncate_after(2)
    assert [r["step"] for r in log.read()] == [1, 2]
    with pytest.raises(ValueError):  # NaN must be cleaned first: lines stay strict JSON
        log.write([{"step": 4, "x": float("nan")}])
    log.truncate_after(3)
    log.write([clean({"step": 4, "x": float("nan")})])
    assert json.loads((tmp_path / "m.jsonl").read_text().splitlines()[-1]) == {"step": 4, "x": None}


def test_prompt_order_is_a_function_of_step_and_seed():
    n, b = 5, 2
    steps = [prompts_for_step(n, s, b, seed=3) for s in range(5)]  # 10 picks = 2 epochs
    flat = [i for s in steps for i in s]
    assert sorted(flat[:5]) == list(range(5)) and sorted(flat[5:]) == list(range(5))
    assert prompts_for_step(n, 3, b, seed=3) == steps[3]  # no state: resume picks the same
    assert [prompts_for_step(n, s, b, seed=4) for s in range(5)] != steps
