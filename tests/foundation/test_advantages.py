"""GRPO / GDPO / SAW credit, MRTPO placement and the JS distance against plain formulas."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mrtpo.advantages import Credit, estimate, gdpo, grpo, place, saw_weights, token_weights
from mrtpo.replay import js_distance

EPS = 1e-4


# ---------- plain reference formulas (loops over groups, numpy) --------------------------------

def ref_grpo(s, g, w, scale="group"):
    s = np.nan_to_num(np.asarray(s, dtype=np.float64), nan=0.0)
    r = (s * w).sum(1)
    out = np.zeros_like(r)
    for i in range(0, len(r), g):
        grp = r[i:i + g]
        if scale == "group":
            std = grp.std(ddof=1) if g > 1 else 0.0
        elif scale == "batch":
            std = r.std(ddof=1) if len(r) > 1 else 0.0
        else:
            std = 1.0 - EPS
        out[i:i + g] = (grp - grp.mean()) / (std + EPS)
    return out


def ref_gdpo(s, g, w):
    s = np.asarray(s, dtype=np.float64)
    n, k = s.shape
    z = np.zeros_like(s)
    for i in range(0, n, g):
        for j in range(k):
            col = s[i:i + g, j]
            vals = col[~np.isnan(col)]
            if len(vals) == 0:
                continue
            std = vals.std(ddof=1) if len(vals) > 1 else 0.0
            z[i:i + g, j] = np.where(np.isnan(col), 0.0, (col - vals.mean()) / (std + EPS))
    pre = (z * w).sum(1)
    seen = ~np.isnan(s).all(1)  # rows where no reward applies: out of the batch statistics, 0
    std = pre[seen].std(ddof=1) if seen.sum() > 1 else 0.0
    return np.where(seen, (pre - (pre[seen].mean() if seen.any() else 0.0)) / (std + EPS), 0.0)


# ---------- golden numbers ----------------------------------------------------------------------

def test_grpo_golden_group_of_four():
    # r = [1, 2, 0, 1]; mean 1; unbiased std sqrt((0 + 1 + 1 + 0) / 3) = sqrt(2/3) = 0.81650
    # A = (r - 1) / (0.81650 + 1e-4) = [0, 1.22459, -1.22459, 0]
    # reward 0 centred [.5, .5, -.5, -.5] -> +-0.61229; reward 1 centred [-.5, .5, -.5, .5]
    s = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [0.0, 1.0]])
    c = grpo(s, group_size=4)
    d = math.sqrt(2 / 3) + EPS
    assert torch.allclose(c.total, torch.tensor([0.0, 1 / d, -1 / d, 0.0]), atol=1e-6)
    assert torch.allclose(c.per_reward[:, 0], torch.tensor([0.5, 0.5, -0.5, -0.5]) / d, atol=1e-6)
    assert torch.allclose(c.per_reward[:, 1], torch.tensor([-0.5, 0.5, -0.5, 0.5]) / d, atol=1e-6)
    assert torch.all(c.offset == 0)


def test_gdpo_golden_two_groups():
    # group A: (0,0),(0,1); group B: (0,0),(1,1). Per-reward z in a group of two values {0,1}:
    # mean .5, unbiased std .70711 -> z = +-0.5 / (0.70711 + 1e-4) = +-0.70701; constant -> 0.
    # pre = [-.70701, .70701, -1.41402, 1.41402]; batch mean 0; unbiased std of pre:
    # sqrt((2 * .70701^2 + 2 * 1.41402^2) / 3) = 1.29077 -> A = pre / (1.29077 + 1e-4)
    s = torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, 0.0], [1.0, 1.0]])
    c = gdpo(s, group_size=2)
    z = 0.5 / (math.sqrt(0.5) + EPS)
    pre = np.array([-z, z, -2 * z, 2 * z])
    expect = pre / (pre.std(ddof=1) + EPS)
    assert np.allclose(c.total.numpy(), expect, atol=1e-6)
    assert np.allclose(expect, [-0.54769, 0.54769, -1.09538, 1.09538], atol=1e-4)


def test_gdpo_separates_combinations_grpo_collapses():
    # The GDPO paper's point: GRPO gives "one reward more" and "two rewards more" the same
    # advantage, because it normalises the sum inside each group; GDPO keeps them apart.
    s = torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, 0.0], [1.0, 1.0]])
    a_grpo = grpo(s, 2).total
    a_gdpo = gdpo(s, 2).total
    assert torch.isclose(a_grpo[1], a_grpo[3], atol=1e-3)  # equal up to the 1e-4 eps
    assert a_gdpo[3] > a_gdpo[1] + 0.5


def test_gdpo_with_one_reward_follows_trl_not_grpo():
    # TRL's normalize_then_sum batch-normalises the group z-score for every K
    torch.manual_seed(0)
    s = torch.randint(0, 3, (12, 1)).float()
    z = grpo(s, 4).total  # the group z-score
    want = (z - z.mean()) / (z.std() + EPS)
    assert torch.allclose(gdpo(s, 4).total, want, atol=1e-6)
    assert not torch.allclose(gdpo(s, 4).total, z, atol=1e-3)


def test_gdpo_equals_trls_normalize_then_sum_code():
    """TRL 1.16's normalize_then_sum lines (GRPOTrainer._generate_and_score_completions), run
    with TRL's own nanstd, on scores with absent rewards and an unscorable row, K = 1 and 3."""
    trl_utils = pytest.importorskip("trl.trainer.utils")
    torch.manual_seed(1)
    for k in (1, 3):
        scores = torch.randint(0, 4, (12, k)).float()
        scores[torch.rand(12, k) < 0.2] = float("nan")
        scores[5] = float("nan")  # every reward None: unscorable
        w = torch.rand(k) + 0.5
        grouped = scores.view(-1, 4, k)
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = trl_utils.nanstd(grouped, dim=1, keepdim=True)
        reward_k = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, k)
        rewards = (reward_k * w.unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(scores).all(dim=1)] = torch.nan
        std_rewards = trl_utils.nanstd(rewards).expand_as(rewards)
        trl = torch.nan_to_num((rewards - torch.nanmean(rewards)) / (std_rewards + 1e-4), nan=0.0)
        assert torch.allclose(gdpo(scores, 4, w).total, trl, atol=1e-5), k


def test_equal_scores_give_zero_not_nan():
    s = torch.ones(8, 3)
    for c in (grpo(s, 4), gdpo(s, 4), grpo(s, 4, scale="batch"), estimate(s, 4, saw="advantage")):
        assert torch.isfinite(c.per_reward).all() and torch.isfinite(c.offset).all()
        assert torch.allclose(c.total, torch.zeros(8))


def test_group_trading_rewards_gets_no_credit_under_grpo():
    # (1, 0) and (0, 1): the totals are equal, so GRPO's advantage is 0 and its std is 0. The
    # linear split would be +-0.5 / 1e-4 = +-5000 per reward; it must be 0, or MRTPO would put
    # huge opposite credits on different tokens.
    s = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    c = grpo(s, 2)
    assert torch.all(c.per_reward[:2] == 0) and torch.all(c.total[:2] == 0)
    assert torch.all(c.per_reward[2:].abs() > 0.1)
    # constant weighted rewards whose float mean is not exact still centre to exactly 0
    s = torch.tensor([[0.0], [0.5], [0.0], [1.0], [1.0], [1.0]])
    for c in (grpo(s, 3, [1.5251453]), gdpo(torch.cat([s, s], 1), 3, [1.5251453, 0.3])):
        assert torch.all(c.total[3:] == c.total[3]) and abs(c.total[3].item()) < 1e-3


def test_batch_trading_rewards_gets_no_credit_under_gdpo():
    # One group trades two rewards, (1, 0) and (0, 1); the other group is flat: every total is
    # 0, so the batch std is 0 and GDPO's advantage is 0. The linear split would be +-0.87 /
    # 1e-4 per reward (instruct's MRTPO took such steps at gradient norms over 2,000); it must
    # be 0 with MRTPO's placement too. A batch with spread elsewhere keeps its credit.
    trade = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]
    s = torch.tensor(trade + [[1.0, 1.0]] * 4)
    for c in (gdpo(s, 4), estimate(s, 4, estimator="gdpo", saw="advantage")):
        assert torch.all(c.per_reward == 0) and torch.all(c.offset == 0)
        q = torch.rand(8, 2, 5, generator=torch.Generator().manual_seed(0))  # [N, K, T]
        assert torch.all(place(c, q, torch.ones(8, 5, dtype=torch.bool)) == 0)
    # rewards in tenths and their mirrors (s, 1 - s) at G = 8: the totals cancel up to float
    # rounding of the 2.5-sized z-scores (about 1e-6), which a tolerance on the totals alone
    # missed (credit of 16,000); every credit must still be 0
    tenths = torch.tensor([[1, 8, 7], [7, 5, 6], [6, 2, 6], [6, 5, 8], [6, 8, 8], [8, 0, 1], [10, 1, 1],
                           [2, 1, 8]]) / 10
    s = torch.cat([torch.cat([tenths, 1 - tenths], 1), torch.full((8, 6), 0.5)])  # [16, 6]
    c = gdpo(s, 8)
    assert torch.all(c.per_reward == 0) and torch.all(c.offset == 0)
    c = gdpo(torch.tensor(trade + [[1.0, 1.0], [0.0, 1.0], [1.0, 1.0], [1.0, 1.0]]), 4)
    assert c.per_reward[:4].abs().min() > 0.1 and c.per_reward[:4].abs().max() < 10
    assert torch.allclose(c.total[:4], torch.zeros(4), atol=1e-6)


def test_absent_rewards_get_zero_credit():
    s = torch.tensor([[1.0, float("nan")], [0.0, float("nan")], [1.0, 1.0], [0.0, 0.0]])
    for c in (grpo(s, 2), gdpo(s, 2)):
        assert torch.all(c.per_reward[:2, 1] == 0)
        assert torch.isfinite(c.total).all()


def test_saw_weights_golden():
    # reward 0: [0, 1, 0, 1] mean .5, std(ddof=1) .57735 -> CV 1.15470
    # reward 1: [1, 1, 1, 0] mean .75, std .5 -> CV .66667; w = 2 CV / sum CV
    s = torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    w = saw_weights(s)
    cv = np.array([math.sqrt(1 / 3) / 0.5, 0.5 / 0.75])
    assert np.allclose(w.numpy(), 2 * cv / cv.sum(), atol=1e-5)
    # a floor shifts the scores before the CV: floor -1 on reward 1 -> values [2, 2, 2, 1]
    w2 = saw_weights(s, floors=[0.0, -1.0])
    cv2 = np.array([cv[0], 0.5 / 1.75])
    assert np.allclose(w2.numpy(), 2 * cv2 / cv2.sum(), atol=1e-5)


def test_saw_saturated_reward_weight_zero():
    s = torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    assert saw_weights(s)[0].item() == pytest.approx(0.0, abs=1e-6)


def test_estimate_saw_levels_multiply_weights():
    torch.manual_seed(1)
    s = torch.randint(0, 2, (8, 3)).float()
    w = saw_weights(s)
    assert torch.allclose(estimate(s, 4, "grpo", saw="reward").total, grpo(s, 4, w).total)
    assert torch.allclose(estimate(s, 4, "gdpo", saw="advantage").total, gdpo(s, 4, w).total)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="whole groups"):
        grpo(torch.zeros(5, 2), 2)
    with pytest.raises(ValueError, match="weights"):
        gdpo(torch.zeros(4, 2), 2, weights=[1.0])
    with pytest.raises(ValueError, match="inf"):
        grpo(torch.tensor([[float("inf")], [0.0]]), 2)
    with pytest.raises(ValueError, match="scale"):
        grpo(torch.zeros(4, 1), 2, scale="bogus")


# ---------- hypothesis: random shapes, NaN patterns, masks ---------------------------------------

@st.composite
def score_batches(draw):
    g = draw(st.integers(1, 5))
    n_groups = draw(st.integers(1, 4))
    k = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 10_000))
    rng = np.random.default_rng(seed)
    s = rng.integers(0, 3, size=(n_groups * g, k)).astype(np.float64) / 2
    for i in range(n_groups):  # whole-group absence, as per-prompt K varies
        for j in range(k):
            if k > 1 and rng.random() < 0.2:
                s[i * g:(i + 1) * g, j] = np.nan
    w = rng.uniform(0.5, 2.0, size=k)
    return s, g, w


@settings(max_examples=60, deadline=None)
@given(score_batches(), st.sampled_from(["group", "batch", "none"]))
def test_grpo_matches_formula(batch, scale):
    s, g, w = batch
    c = grpo(torch.tensor(s), g, w, scale=scale)
    assert np.allclose(c.total.double().numpy(), ref_grpo(s, g, w, scale), atol=1e-3)
    assert torch.all(c.per_reward[torch.isnan(torch.tensor(s))] == 0)


@settings(max_examples=60, deadline=None)
@given(score_batches())
def test_gdpo_matches_formula(batch):
    s, g, w = batch
    c = gdpo(torch.tensor(s), g, w)
    n = s.shape[0]
    if n > 1:
        assert np.allclose(c.total.double().numpy(), ref_gdpo(s, g, w), atol=1e-3)
    assert torch.isfinite(c.total).all()


@st.composite
def placements(draw):
    n = draw(st.integers(1, 4))
    k = draw(st.integers(1, 3))
    t = draw(st.integers(1, 9))
    seed = draw(st.integers(0, 10_000))
    gen = torch.Generator().manual_seed(seed)
    q = torch.rand(n, k, t, generator=gen)  # [N, K, T]
    q[torch.rand(n, k, 1, generator=gen).expand(n, k, t) < 0.25] = 0.0  # some all-zero rewards
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    left = draw(st.booleans())
    ar = torch.arange(t).unsqueeze(0)
    mask = (ar >= t - lengths.unsqueeze(1)) if left else (ar < lengths.unsqueeze(1))  # [N, T]
    credit = Credit(torch.randn(n, k, generator=gen), torch.randn(n, generator=gen))
    lam = draw(st.sampled_from([1.0, 0.5, 0.0]))
    return q, mask, credit, lam


@settings(max_examples=80, deadline=None)
@given(placements())
def test_weights_average_one_and_mean_advantage_is_response_advantage(case):
    q, mask, credit, lam = case
    w = token_weights(q, mask, lam)  # [N, K, T]
    m = mask.float()
    mean_w = (w * m.unsqueeze(1)).sum(-1) / m.sum(-1, keepdim=True)
    assert torch.allclose(mean_w, torch.ones_like(mean_w), atol=1e-5)
    assert torch.all(w[~mask.unsqueeze(1).expand_as(w)] == 0)
    a = place(credit, q, mask, lam)  # [N, T]
    mean_a = (a * m).sum(-1) / m.sum(-1)
    assert torch.allclose(mean_a, credit.total, atol=1e-5)
    assert torch.all(a[~mask] == 0)


def test_place_without_distances_is_response_level():
    credit = Credit(torch.tensor([[1.0, 2.0], [0.5, -1.0]]), torch.tensor([0.25, 0.0]))
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    a = place(credit, None, mask)
    assert torch.allclose(a, torch.tensor([[3.25, 3.25, 0.0], [-0.5, -0.5, -0.5]]))
    ones = torch.zeros(2, 2, 3)  # all-zero distances -> weight 1 -> same as no replay
    assert torch.allclose(place(credit, ones, mask), a)


def test_place_moves_credit_to_relevant_tokens():
    # reward 0 only "looks at" token 0: all its credit lands there (3 tokens -> weight 3).
    q = torch.tensor([[[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]])
    credit = Credit(torch.tensor([[-1.0, 0.5]]), torch.tensor([0.0]))
    a = place(credit, q, torch.ones(1, 3, dtype=torch.bool))
    assert torch.allclose(a, torch.tensor([[-3.0 + 0.5, 0.5, 0.5]]))


@pytest.mark.parametrize("estimator, saw, scale", [
    ("grpo", "off", "group"), ("grpo", "off", "batch"), ("grpo", "off", "none"), ("grpo", "reward", "group"),
    ("gdpo", "off", "group"), ("gdpo", "advantage", "group"),
])
@pytest.mark.parametrize("lam", [1.0, 0.5])
def test_zero_credit_pairs_need_no_distances(estimator, saw, scale, lam):
    """What lets the trainer skip the replay of (completion, reward) pairs with zero credit:
    whatever their distances are (here: replaced by 0, as the skipped replay leaves them), the
    token advantages are exactly the same. The scores have groups that score a reward alike,
    absent rewards (NaN) and a reward that is constant over the batch (SAW weight 0)."""
    gen = torch.Generator().manual_seed(3)
    scores = torch.tensor([[1.0, 0.0, 1.0, 0.5], [1.0, 1.0, 0.0, 0.5], [1.0, 0.0, float("nan"), 0.5],
                           [1.0, 1.0, 1.0, 0.5], [0.0, 1.0, 1.0, 0.5], [1.0, 1.0, 1.0, 0.5],
                           [0.5, 1.0, 0.0, 0.5], [0.0, 1.0, 1.0, 0.5]])  # [8, 4], groups of 4
    credit = estimate(scores, 4, estimator, saw=saw, scale=scale)
    zero = credit.per_reward == 0  # [8, 4]
    assert zero.any() and not zero.all()
    q = torch.rand(8, 4, 6, generator=gen)  # [N, K, T]
    mask = torch.ones(8, 6, dtype=torch.bool)
    skipped = torch.where(zero.unsqueeze(-1), torch.zeros_like(q), q)  # [N, K, T]
    assert torch.equal(place(credit, skipped, mask, lam), place(credit, q, mask, lam))


# ---------- JS distance -------------------------------------------------------------------------

def ref_js(la, lb):
    p = np.exp(la - np.logaddexp.reduce(la))
    q = np.exp(lb - np.logaddexp.reduce(lb))
    m = (p + q) / 2
    def kl(a, b):
        nz = a > 0
        return (a[nz] * np.log2(a[nz] / b[nz])).sum()
    return math.sqrt(max(0.0, 0.5 * kl(p, m) + 0.5 * kl(q, m)))


def test_js_golden_values():
    # disjoint one-hot distributions: JSD = 1 bit -> distance 1
    a = torch.tensor([0.0, -float("inf")])
    b = torch.tensor([-float("inf"), 0.0])
    assert js_distance(a, b).item() == pytest.approx(1.0, abs=1e-6)
    # p = (1/2, 1/2), q = (1, 0): m = (3/4, 1/4);
    # KL(p||m) = .5 log2(2/3) + .5 log2(2) = .20752; KL(q||m) = log2(4/3) = .41504
    # JSD = .31128 -> distance .55793
    p = torch.tensor([0.0, 0.0])
    q = torch.tensor([0.0, -float("inf")])
    assert js_distance(p, q).item() == pytest.approx(0.55793, abs=1e-4)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 50), st.sampled_from([0.7, 1.0, 1.5]))
def test_js_properties(seed, v, temp):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(3, 4, v, generator=gen) * 3  # [3, 4, V]
    b = torch.randn(3, 4, v, generator=gen) * 3
    d = js_distance(a, b, temperature=temp)  # [3, 4]
    assert d.shape == (3, 4)
    assert torch.all((d >= 0) & (d <= 1))
    assert torch.allclose(d, js_distance(b, a, temperature=temp), atol=1e-6)
    assert torch.allclose(js_distance(a, a, temperature=temp), torch.zeros(3, 4), atol=1e-3)
    ref = np.array([ref_js(x.double().numpy() / temp, y.double().numpy() / temp)
                    for x, y in zip(a.reshape(-1, v), b.reshape(-1, v))]).reshape(3, 4)
    assert np.allclose(d.numpy(), ref, atol=1e-4)


def test_js_chunked_equals_unchunked():
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(5, 7, 1000, generator=gen)
    b = torch.randn(5, 7, 1000, generator=gen)
    whole = js_distance(a, b, chunk_bytes=2**30)
    tiny_chunks = js_distance(a, b, chunk_bytes=4 * 1000 * 3)  # 3 rows per chunk
    assert torch.equal(whole, tiny_chunks)
