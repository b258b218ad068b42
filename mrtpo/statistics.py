"""How concentrated each reward's credit is: pure functions over distances, no I/O.

The headline number is the top-80 token share: per response and reward, the smallest share
of the response's tokens whose JS distances add up to 80% of the reward's total distance
(tokens taken largest first). 1/T means one token carries it all; 0.8 is a perfectly even
spread. MRTPO's weights are the distances divided by their mean, so the same tokens carry
80% of the reward's credit. A reward whose distances are all zero on a response (an empty
block: nothing to locate) has no share there and is left out of the means.

The trainer logs `mrtpo/<reward>/top80_token_share` with `top_share` below (one
implementation for both), and `mrtpo credit` prints the same figure per reward and per task.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import torch

SHARE = 0.8

#: the paper's figures for the top-80 share (its models, its data), shown next to ours
PAPER_TOP80 = {
    "text2sql": "26-29%",
    "toolcall": "13-15%",
    "instruct:startend:end_checker": "40% of its distance on 4%",  # the paper's only figure for it
}
PAPER_NOTE = ("The paper reports 26-29% of tokens carrying 80% for text-to-SQL, 13-15% for tool "
              "calling, and 40% of an end-phrase constraint's distance on 4% of the tokens; those come "
              "from its models and data.")


def top_share(distances: torch.Tensor, mask: torch.Tensor, share: float = SHARE) -> torch.Tensor:
    """Per response and reward: the fraction of tokens holding `share` of the distance -> [N, K].

    `distances` is [N, K, T], `mask` [N, T] marks each response's own tokens (padding is left
    out of both the count and the sum). NaN where the reward's distances are all zero on that
    response. Sums run in float64 and the target carries a relative tolerance, so an even
    spread of 5 tokens needs exactly 4 of them for 80%, whatever the rounding.
    """
    if not 0.0 < share <= 1.0:
        raise ValueError(f"share must be in (0, 1], got {share}")
    if distances.dim() != 3 or mask.dim() != 2 or distances.shape[0] != mask.shape[0] \
            or distances.shape[-1] != mask.shape[-1]:
        raise ValueError(f"distances must be [N, K, T] and mask [N, T]; got {tuple(distances.shape)} "
                         f"and {tuple(mask.shape)}")
    q = distances.double().clamp(min=0.0) * mask.unsqueeze(1).double()  # [N, K, T]
    n_tok = mask.double().sum(-1).clamp(min=1).unsqueeze(-1)  # [N, 1]
    total = q.sum(-1)  # [N, K]
    sorted_q, _ = q.sort(-1, descending=True)  # [N, K, T]
    cum = sorted_q.cumsum(-1)  # [N, K, T]
    target = (share * total * (1.0 - 1e-9)).unsqueeze(-1)  # [N, K, 1]
    need = (cum < target).sum(-1).double() + 1.0  # [N, K] 1 + prefixes still short of the target
    frac = (need / n_tok).float()  # [N, K]
    return torch.where(total > 0, frac, torch.full_like(frac, float("nan")))


def credited_top_share(distances: torch.Tensor, mask: torch.Tensor, credit: torch.Tensor | None = None) -> torch.Tensor:
    """`top_share`, NaN also where `credit` [N, K] is 0: the pairs the replay skips unless asked
    (`--replay-zero-credit`), left out whatever the flag so the metric means the same either way."""
    shares = top_share(distances, mask)  # [N, K]
    if credit is None:
        return shares
    return torch.where(credit.to(shares.device) != 0, shares, torch.full_like(shares, float("nan")))


def gini(distances: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per response and reward, the Gini coefficient of the distances over the response's own
    tokens -> [N, K]: 0 for an even spread (MRTPO's weights all 1), (T - 1) / T when one token
    holds everything. NaN where the distances are all zero. Scale-free, so it is also the
    Gini of MRTPO's weights (the distances over their mean). ARCA (arXiv 2606.00257) logs it to
    see weights collapse under LoRA (toward even, or onto a few tokens)."""
    q = distances.double().clamp(min=0.0) * mask.unsqueeze(1).double()  # [N, K, T]
    n_tok = mask.double().sum(-1).clamp(min=1).unsqueeze(-1)  # [N, 1]
    total = q.sum(-1)  # [N, K]
    # padding sorts first (0), so the i-th smallest real token has rank i - (T - n_tok)
    sorted_q, _ = q.sort(-1)  # [N, K, T] ascending
    t = q.shape[-1]
    rank = torch.arange(1, t + 1, dtype=torch.float64) - (t - n_tok).unsqueeze(-1)  # [N, 1, T]
    g = (2.0 * (rank * sorted_q).sum(-1) / (n_tok * total.clamp(min=1e-300))) - (n_tok + 1.0) / n_tok  # [N, K]
    return torch.where(total > 0, g, torch.full_like(g, float("nan"))).float()


def effective_token_ratio(distances: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per response and reward, (sum q)^2 / (T sum q^2) over the response's T tokens -> [N, K]:
    the share of the tokens that effectively carry the weight (1 for an even spread, 1/T for
    one token). NaN where the distances are all zero."""
    q = distances.double().clamp(min=0.0) * mask.unsqueeze(1).double()  # [N, K, T]
    n_tok = mask.double().sum(-1).clamp(min=1).unsqueeze(-1)  # [N, 1]
    total = q.sum(-1)  # [N, K]
    ratio = total ** 2 / (n_tok * (q ** 2).sum(-1)).clamp(min=1e-300)  # [N, K]
    return torch.where(total > 0, ratio, torch.full_like(ratio, float("nan"))).float()


def concentration(distances: torch.Tensor, mask: torch.Tensor,
                  credit: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Per response and reward [N, K] each: `top80_token_share`, `gini` and
    `effective_token_ratio`; NaN where the distances are all zero, and where `credit` [N, K]
    is 0 (the pairs the replay skips unless asked, left out whatever the flag)."""
    figures = {"top80_token_share": top_share(distances, mask), "gini": gini(distances, mask),
               "effective_token_ratio": effective_token_ratio(distances, mask)}
    if credit is None:
        return figures
    kept = credit != 0  # [N, K]
    return {k: torch.where(kept.to(v.device), v, torch.full_like(v, float("nan"))) for k, v in figures.items()}


def response_top_share(q: Sequence[float], share: float = SHARE) -> float | None:
    """The top-`share` token share of one response's distances for one reward (None: all zero)."""
    if len(q) == 0:
        return None
    t = torch.tensor([list(q)], dtype=torch.float64).unsqueeze(0)  # [1, 1, T]
    value = float(top_share(t, torch.ones(1, len(q)), share)[0, 0])
    return None if math.isnan(value) else value


def top_tokens(weights: Sequence[float], n: int = 3) -> list[int]:
    """Indices of the `n` tokens with the largest positive weight, largest first (ties: earlier)."""
    order = sorted(range(len(weights)), key=lambda t: (-weights[t], t))
    return [t for t in order[:n] if weights[t] > 0]


@dataclass
class RewardSummary:
    """One reward over the records shown (or `name` = ALL: every reward of the task pooled)."""

    name: str
    responses: int  # records where the reward applies
    located: int  # of those, records with a non-zero distance somewhere (a share exists)
    mean_score: float | None
    mean_credit: float | None
    share_mean: float | None  # mean top-80 share over the located records
    share_min: float | None
    share_max: float | None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


ALL = "all rewards"


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(records: Iterable[Any], share: float = SHARE) -> list[RewardSummary]:
    """Per reward (first-seen order), then ALL pooled: counts, mean score and credit, top-80 share.

    A record is anything with `reward_names`, `scores`, `credit` (per reward) and `distances`
    ([K][T] lists, or None when MRTPO was off: such records count for scores and credit only).
    """
    names: list[str] = []
    scores: dict[str, list[float]] = {}
    credits: dict[str, list[float]] = {}
    shares: dict[str, list[float]] = {}
    for rec in records:
        for k, name in enumerate(rec.reward_names):
            if name not in scores:
                names.append(name)
                scores[name], credits[name], shares[name] = [], [], []
            scores[name].append(float(rec.scores[k]))
            credits[name].append(float(rec.credit[k]))
            if rec.distances is not None:
                s = response_top_share(rec.distances[k], share)
                if s is not None:
                    shares[name].append(s)

    def row(name: str, sc: list[float], cr: list[float], sh: list[float], pooled: bool) -> RewardSummary:
        return RewardSummary(name, len(sc), len(sh), None if pooled else _mean(sc), None if pooled else _mean(cr),
                             _mean(sh), min(sh, default=None), max(sh, default=None))

    out = [row(n, scores[n], credits[n], shares[n], False) for n in names]
    if names:
        pool = lambda d: [x for n in names for x in d[n]]  # noqa: E731
        out.append(row(ALL, pool(scores), pool(credits), pool(shares), True))
    return out


def paper_figure(task: str | None, reward: str) -> str | None:
    """The paper's top-80 share for this task (or this reward of it), when it reports one."""
    if not task:
        return None
    if f"{task}:{reward}" in PAPER_TOP80:
        return PAPER_TOP80[f"{task}:{reward}"]
    if reward == ALL:
        return PAPER_TOP80.get(task)
    return None


def percent(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"
