"""The Jensen-Shannon distance between next-token distributions, and the replay's JS step.

`js_distance` (logits) and `js_distance_log_probs` (log-probabilities) are the reference
implementation; `mrtpo.advantages` re-exports `js_distance` with the other pure-torch
functions. `fill` and `head_and_js` are the replay's last step: each distinct context's
log-softmax once, then P_all against each P_without_k, a chunk of positions at a time
(`js_against_first`: the same formula with each context's probabilities exponentiated once,
tested equal to the reference).
"""
from __future__ import annotations

import math

import torch

def js_distance(logits_a: torch.Tensor, logits_b: torch.Tensor, temperature: float = 1.0,
                chunk_bytes: int = 64 * 2**20) -> torch.Tensor:
    """Jensen-Shannon distance (base 2, in [0, 1]) between two next-token distributions.

    Shapes `[..., V]` -> `[...]`. Computed in fp32 from log-softmax, over chunks of rows:
    each fp32 `[rows, V]` buffer is at most `chunk_bytes`, and about ten are alive at once,
    so peak extra memory is ~10 * chunk_bytes whatever the leading dimensions (chunks of
    0.5-2 MB stay in cache and are fastest on CPU).
    JSD = (KL(p||m) + KL(q||m)) / 2 with m = (p + q) / 2, written as a sum of non-negative
    terms, sum_v m_v * KL(Bern(x_v) || Bern(1/2)) with x_v = p_v / (p_v + q_v), so that nearly
    equal distributions do not cancel to rounding noise (the square root would turn 1e-8 of
    noise into a distance of 1e-4); identical logits give exactly 0. Tokens of probability 0
    in both (-inf logits) contribute 0.
    """
    if logits_a.shape != logits_b.shape:
        raise ValueError(f"logits shapes differ: {tuple(logits_a.shape)} vs {tuple(logits_b.shape)}")
    return _by_chunks(logits_a, logits_b, chunk_bytes, lambda a, b: _js_rows(a, b, temperature))


def js_distance_log_probs(logp_a: torch.Tensor, logp_b: torch.Tensor,
                          chunk_bytes: int = 64 * 2**20) -> torch.Tensor:
    """`js_distance` for inputs already normalised: fp32 log-probabilities `[..., V]` (log-softmax
    of logits / temperature) -> `[...]`. A caller comparing one distribution with several (the
    replay: P_all against each P_without_k) normalises each once. Same numerics and chunking.
    """
    if logp_a.shape != logp_b.shape:
        raise ValueError(f"log-prob shapes differ: {tuple(logp_a.shape)} vs {tuple(logp_b.shape)}")
    return _by_chunks(logp_a, logp_b, chunk_bytes, lambda a, b: _js_log_probs(a.float(), b.float()))


def _by_chunks(x_a: torch.Tensor, x_b: torch.Tensor, chunk_bytes: int, js_rows) -> torch.Tensor:
    """`js_rows` ([r, V], [r, V] -> [r]) over chunks of the rows of `[..., V]` inputs, each
    fp32 chunk at most `chunk_bytes` -> `[...]`."""
    lead, v = x_a.shape[:-1], x_a.shape[-1]
    a = x_a.reshape(-1, v)  # [M, V]
    b = x_b.reshape(-1, v)  # [M, V]
    rows = max(1, chunk_bytes // (4 * v))
    out = torch.empty(a.shape[0], dtype=torch.float32, device=a.device)  # [M]
    for i in range(0, a.shape[0], rows):
        out[i:i + rows] = js_rows(a[i:i + rows], b[i:i + rows])
    return out.view(lead)


def _js_rows(a: torch.Tensor, b: torch.Tensor, temperature: float) -> torch.Tensor:
    return _js_log_probs(_log_probs(a, temperature), _log_probs(b, temperature))


def _log_probs(x: torch.Tensor, temperature: float) -> torch.Tensor:
    x = x.float()
    return torch.log_softmax(x if temperature == 1.0 else x / temperature, -1)


def _js_log_probs(la: torch.Tensor, lb: torch.Tensor) -> torch.Tensor:
    """[r, V] log-probs -> [r] JS distance.

    Per token, with a = |log p - log q|, p + q = 2m and x = p / (p + q), the token's share of
    the divergence is m * KL(Bern(x) || Bern(1/2)) = m * g(a) with
    g(a) = -log1p(expm1(-a) / 2) - a * sigmoid(-a). Each of the two terms is computed to a
    few ulps of itself and both are O(a), so the rounding error of g is O(eps * a) and that of
    the distance at most a few eps, whatever the distributions: nearly equal ones do not
    cancel to noise that the square root would amplify (1e-8 of noise is a distance of
    1e-4), identical ones give exactly 0, one-hot against one-hot gives exactly 1. Tokens of
    probability 0 in both (-inf) give a = 0; in one of them, a = 160, where g = log 2.
    """
    na = torch.sub(la, lb).abs_().neg_().nan_to_num_(nan=0.0, neginf=-160.0)  # [r, V] -a
    h = torch.expm1(na).mul_(0.5).log1p_()  # [r, V] log((1 + e^-a) / 2) = -(first term)
    h.sub_(torch.sigmoid(na).mul_(na))  # [r, V] -g(a) <= 0
    m = la.exp().add_(lb.exp())  # [r, V] twice the mixture
    jsd = torch.linalg.vecdot(m, h) * (-0.5 / math.log(2.0))  # [r] in bits, in [0, 1]
    return jsd.clamp_(0.0, 1.0).sqrt_()


def fill(q: torch.Tensor, n: int, plan, logits: torch.Tensor, temperature: float, t0: int = 0,
         rows: int = 64) -> None:
    """q[n, k, t0:t0 + c] from logits [C, c, V] of item n's distinct contexts (0 = P_all;
    `plan` an `ItemPlan`), `rows` positions at a time: each context's log-softmax once, then
    P_all against each (`js_against_first`)."""
    ks = [k for k, j in enumerate(plan.which) if j is not None]
    if not ks:
        return
    others = [plan.which[k] for k in ks]
    for r0 in range(0, logits.shape[1], rows):
        x = logits[:, r0:r0 + rows].float()  # [C, r, V]
        lp = torch.log_softmax(x if temperature == 1.0 else x / temperature, -1)  # [C, r, V]
        del x
        d = js_against_first(lp, others, chunk_bytes=js_chunk_bytes(lp.device))  # [len(ks), r]
        q[n, ks, t0 + r0:t0 + r0 + lp.shape[1]] = d


def js_against_first(lp: torch.Tensor, others, chunk_bytes: int = 2**20) -> torch.Tensor:
    """JS distances of context 0 against each context in `others`, from fp32 log-probs
    [C, r, V] -> [len(others), r]; equal to `js_distance_log_probs(lp[0], lp[j])` for each j
    (same formula, same rounding bound). Faster than those calls because each context's
    probabilities are exponentiated once per chunk of rows, not once per comparison, and
    g(a)'s second term is taken from them (`_js_from_probs`): per comparison no sigmoid and no exp."""
    v = lp.shape[-1]
    step = max(1, chunk_bytes // (4 * v))
    used = sorted({0, *others})
    out = torch.empty(len(others), lp.shape[1], dtype=torch.float32, device=lp.device)  # [K', r]
    for i in range(0, lp.shape[1], step):
        la = {c: lp[c, i:i + step] for c in used}  # [s, V] each
        pr = {c: x.exp() for c, x in la.items()}  # [s, V] each
        for o, j in enumerate(others):
            out[o, i:i + step] = _js_from_probs(la[0], la[j], pr[0], pr[j])
    return out


def _js_from_probs(la: torch.Tensor, lb: torch.Tensor, pa: torch.Tensor, pb: torch.Tensor) -> torch.Tensor:
    """[r, V] log-probs and their exps -> [r] JS distance: `_js_log_probs`'s per-token share
    m * g(a), with m * a * sigmoid(-a) = a * min(p, q) / 2 (sigmoid(-a) = min(p, q) / (p + q)),
    so the share is a difference of two O(a) terms per token as there: the same rounding
    bound, exactly 0 for identical inputs and exactly 1 for one-hot against one-hot."""
    na = torch.sub(la, lb).abs_().neg_().nan_to_num_(nan=0.0, neginf=-160.0)  # [r, V] -a
    h = torch.expm1(na).mul_(0.5).log1p_()  # [r, V] log((1 + e^-a) / 2) = -(first term)
    h.mul_(pa + pb)  # [r, V] -(twice the mixture) * first term
    h.addcmul_(na, torch.minimum(pa, pb), value=-1.0)  # [r, V] -(p + q) g(a) <= 0
    jsd = h.sum(-1).mul_(-0.5 / math.log(2.0))  # [r] in bits, in [0, 1]
    return jsd.clamp_(0.0, 1.0).sqrt_()


def js_chunk_bytes(device: torch.device) -> int:
    """fp32 buffers of the JS step: ~1 MB stays in a CPU core's cache; a GPU wants fewer,
    larger ones (each chunk is a handful of kernel launches)."""
    return 2**20 if device.type == "cpu" else 2**26


def head_and_js(q: torch.Tensor, n: int, plan, hidden: torch.Tensor, head, temperature: float,
                chunk_tokens: int, t0: int = 0) -> None:
    """q[n, :, t0:t0 + T] from the hidden states [C, T, H] of item n's distinct contexts at its
    response positions t0.. : the vocabulary head, `chunk_tokens` positions (of all contexts)
    at a time, then the JS step. The full-forward method does the same work inside its forward."""
    n_ctx = hidden.shape[0]
    step = max(1, chunk_tokens // n_ctx)
    for t in range(0, hidden.shape[1], step):
        x = hidden[:, t:t + step]  # [C, c, H]
        logits = head(x.reshape(-1, x.shape[-1])).view(n_ctx, x.shape[1], -1)  # [C, c, V]
        fill(q, n, plan, logits, temperature, t0 + t, rows=step)
