"""Concentration statistics on hand-made distances whose answers are known by counting."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from mrtpo.statistics import (ALL, PAPER_TOP80, paper_figure, percent, response_top_share, summarize,
                                     top_share, top_tokens)


def test_top_share_counts_the_fewest_tokens_that_reach_80_percent():
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
    q = torch.zeros(2, 3, 6)
    q[0, 0] = torch.tensor([0.0, 9.0, 0.0, 1.0, 0.0, 99.0])  # padding's 99 ignored: 1 of 5 holds 90%
    q[0, 1] = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 0.0])  # even spread: 4 of 5 for exactly 80%
    q[1, 0] = torch.tensor([4.0, 4.0, 1.0, 1.0, 0.0, 0.0])  # 8 of 10 in two tokens: 2 of 6
    q[1, 1] = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 5.0])  # one token carries it all: 1 of 6
    s = top_share(q, mask)  # [2, 3]
    assert s[0, 0].item() == pytest.approx(1 / 5)
    assert s[0, 1].item() == pytest.approx(4 / 5)
    assert math.isnan(s[0, 2].item())  # all zero: nothing to locate
    assert s[1, 0].item() == pytest.approx(2 / 6)
    assert s[1, 1].item() == pytest.approx(1 / 6)
    assert s[1, 0].item() == pytest.approx(top_share(q, mask.bool())[1, 0].item())  # bool masks too


def test_top_share_is_exact_at_the_boundary_despite_rounding():
    # ten tokens of 0.1: float32 sums drift around 0.8, but 8 of 10 tokens hold exactly 80%
    assert response_top_share([0.1] * 10) == pytest.approx(0.8)
    assert response_top_share([0.7] * 7) == pytest.approx(6 / 7)  # 5.6 of 7 * 0.7 -> 6 tokens
    # a different share: half of [3, 1, 1, 1] is reached by the first token
    assert response_top_share([1.0, 3.0, 1.0, 1.0], share=0.5) == pytest.approx(1 / 4)
    assert response_top_share([1.0, 3.0, 1.0, 1.0], share=0.51) == pytest.approx(2 / 4)
    assert response_top_share([0.0, 0.0]) is None and response_top_share([]) is None
    with pytest.raises(ValueError, match="share"):
        response_top_share([1.0], share=0.0)
    with pytest.raises(ValueError, match=r"\[N, K, T\]"):
        top_share(torch.ones(2, 3), torch.ones(2, 3))


def test_top_tokens_largest_first_ties_earlier_first():
    assert top_tokens([0.5, 2.0, 0.0, 2.0, 1.0], 3) == [1, 3, 4]
    assert top_tokens([0.0, 0.0], 3) == []
    assert top_tokens([1.0], 3) == [0]


def _rec(names, scores, credit, distances):
    return SimpleNamespace(reward_names=names, scores=scores, credit=credit, distances=distances)


def test_summarize_per_reward_and_pooled():
    recs = [
        # a: one token of four carries it all; b: even over four, 80% (3.2) needs all four
        _rec(["a", "b"], [1.0, 0.0], [0.5, -0.5], [[0, 0, 4, 0], [1, 1, 1, 1]]),
        # a: two of four hold 8/10 -> 0.5; b: empty block, all zero -> not located
        _rec(["a", "b"], [0.0, 1.0], [-0.5, 0.5], [[4, 4, 1, 1], [0, 0, 0, 0]]),
        # c only here; MRTPO off -> counts for scores and credit, no share
        _rec(["c"], [0.25], [0.0], None),
    ]
    rows = {r.name: r for r in summarize(recs)}
    assert list(rows) == ["a", "b", "c", ALL]
    a, b, c, pooled = rows["a"], rows["b"], rows["c"], rows[ALL]
    assert (a.responses, a.located) == (2, 2)
    assert a.share_mean == pytest.approx((1 / 4 + 2 / 4) / 2)
    assert (a.share_min, a.share_max) == (pytest.approx(0.25), pytest.approx(0.5))
    assert a.mean_score == pytest.approx(0.5) and a.mean_credit == pytest.approx(0.0)
    assert (b.responses, b.located) == (2, 1) and b.share_mean == pytest.approx(1.0)
    assert (c.responses, c.located, c.share_mean) == (1, 0, None)
    assert c.mean_score == pytest.approx(0.25)
    assert (pooled.responses, pooled.located) == (5, 3)
    assert pooled.share_mean == pytest.approx((0.25 + 0.5 + 1.0) / 3)
    assert pooled.mean_score is None  # scores of different rewards are not averaged together
    assert summarize([]) == []


def test_paper_figures_only_where_the_paper_reports_one():
    assert paper_figure("text2sql", ALL) == PAPER_TOP80["text2sql"] == "26-29%"
    assert paper_figure("toolcall", ALL) == "13-15%"
    assert paper_figure("instruct", "startend:end_checker") == "40% of its distance on 4%"
    assert paper_figure("instruct", ALL) is None
    assert paper_figure("text2sql", "format") is None
    assert paper_figure(None, ALL) is None
    assert percent(0.2625) == "26.2%" and percent(None) == "-"


def test_gini_and_effective_token_ratio_read_the_spread():
    from mrtpo.statistics import effective_token_ratio, gini

    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0]])  # 4 and 2 tokens
    q = torch.tensor([[[0.3, 0.3, 0.3, 0.3, 9.0],    # even over its 4 tokens (padding ignored)
                       [0.0, 0.0, 0.7, 0.0, 0.0],    # one token of 4
                       [0.0, 0.0, 0.0, 0.0, 0.0]],   # nothing
                      [[1.0, 3.0, 5.0, 5.0, 5.0],    # 1 and 3 over 2 tokens
                       [2.0, 2.0, 0.0, 0.0, 0.0],
                       [0.0, 1.0, 0.0, 0.0, 0.0]]])
    g, e = gini(q, mask), effective_token_ratio(q, mask)
    assert g[0, 0] == pytest.approx(0.0, abs=1e-6) and e[0, 0] == pytest.approx(1.0)
    assert g[0, 1] == pytest.approx(3 / 4) and e[0, 1] == pytest.approx(1 / 4)
    assert torch.isnan(g[0, 2]) and torch.isnan(e[0, 2])
    # two tokens 1 and 3: mean abs difference 2 * 2 / 4 = 1, over twice the mean 4 -> 0.25
    assert g[1, 0] == pytest.approx(0.25) and e[1, 0] == pytest.approx(16 / (2 * 10))
    assert g[1, 2] == pytest.approx(0.5) and e[1, 2] == pytest.approx(0.5)
    # scale-free: the same figures for MRTPO's weights (q over its mean)
    assert torch.allclose(gini(q * 7.0, mask), g, equal_nan=True)


def test_the_trainer_logs_the_spread_of_credited_pairs():
    from mrtpo.harness.metrics import mrtpo_metrics

    q = torch.tensor([[[1.0, 0.0], [1.0, 1.0]], [[1.0, 1.0], [0.0, 1.0]]])  # [N=2, K=2, T=2]
    out = mrtpo_metrics(q, torch.ones(2, 2), ["a", "b"], credit=torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    assert out["mrtpo/a/gini"] == pytest.approx((0.5 + 0.0) / 2)
    assert out["mrtpo/b/gini"] == pytest.approx(0.5)  # the first row has no credit for b: left out
    assert out["mrtpo/a/effective_token_ratio"] == pytest.approx((0.5 + 1.0) / 2)
