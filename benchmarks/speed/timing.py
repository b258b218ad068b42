"""Timing helpers the speed benchmarks share: a phase's seconds with the accelerator's queued
work included (`timed`, `sync`), the update's forward and backward (`timed_update`), and the
replay's parts outside the model body (`time_head_and_js`, its parts, the prefixes).

The setting they time in (config, task, policy with adapter, the loop's sampler) is
benchmarks.lib.setting's; results are written by benchmarks.lib.results."""
from __future__ import annotations

import time

import torch

from mrtpo.replay import decoder_of, head_and_js, head_of, plan_item, replay_groups
from mrtpo.replay.js import js_against_first, js_chunk_bytes, js_distance_log_probs


def _random_hidden(model, items):
    """(plans, hidden [C, T, H] per item): random hidden states at each item's response
    positions under each distinct context (the head costs the same on any values; the JS
    step does not quite: its elementwise functions are slower on some ranges)."""
    width, param = model.config.hidden_size, next(model.parameters())
    g = torch.Generator(device=param.device).manual_seed(0)
    plans = [plan_item(item, n) for n, item in enumerate(items)]
    hidden = [torch.randn(len(p.contexts), len(it.response_ids), width, generator=g, device=param.device,
                          dtype=param.dtype) for p, it in zip(plans, items)]  # [C, T, H] each
    return plans, hidden


def replay_hidden(model, items):
    """(plans, hidden [C, T, H] per item): the model's own hidden states at each item's
    response positions under each distinct context (one full forward per context), so that
    the head and the JS step are timed on the distributions the replay really compares
    (P_all and P_without_k are close at most positions)."""
    decoder, device = decoder_of(model), next(model.parameters()).device
    plans = [plan_item(item, n) for n, item in enumerate(items)]
    hidden = []
    with torch.no_grad():
        for plan, item in zip(plans, items):
            rows = []
            for ctx in plan.contexts:
                ids = torch.as_tensor(list(ctx) + list(item.response_ids[:-1]), dtype=torch.long, device=device)[None]
                rows.append(decoder(input_ids=ids).last_hidden_state[0, len(ctx) - 1:])  # [T, H]
            hidden.append(torch.stack(rows))  # [C, T, H]
    return plans, hidden


def sync(device=None) -> None:
    """Wait for the accelerator's queued work (a GPU's kernels run after Python moves on):
    `device`'s, or, with none given, the GPU's if one is in use."""
    if (device.type == "cuda") if device is not None else (torch.cuda.is_available() and torch.cuda.is_initialized()):
        torch.cuda.synchronize()


def time_head_and_js(model, items, chunk_tokens: int = 256, temperature: float = 1.0, states=None) -> float:
    """Seconds of the replay's work outside the model body (`mrtpo.replay.head_and_js`: the
    vocabulary head and the JS step) on as many positions as `distances` computes: each
    item's distinct contexts x its response tokens, from `states` ((plans, hidden), e.g.
    `replay_hidden`'s) or random hidden states."""
    plans, hidden = states or _random_hidden(model, items)
    param = next(model.parameters())
    k = max(it.num_rewards for it in items)
    q = torch.zeros(len(items), k, max(len(it.response_ids) for it in items), device=param.device)  # [N, K, T]
    t = time.perf_counter()
    with torch.no_grad():
        for n, (plan, h) in enumerate(zip(plans, hidden)):
            head_and_js(q, n, plan, h, head_of(model), temperature, chunk_tokens)
    sync(param.device)
    return time.perf_counter() - t


def time_head_and_js_parts(model, items, chunk_tokens: int = 256, temperature: float = 1.0,
                           states=None) -> dict[str, float]:
    """The parts of `time_head_and_js`, each timed on its own over the same chunks as
    `head_and_js` cuts: "head" (the vocabulary head), "log_softmax" (each context's, in
    fp32), "js" (P_all against each P_without_k: `js_against_first`, the landed step) and
    "js_pairwise" (the same distances by one `js_distance_log_probs` call per comparison,
    the step as it was before each context's probabilities were shared) -> seconds. `states`
    as in `time_head_and_js`."""
    plans, hidden = states or _random_hidden(model, items)
    head, device = head_of(model), next(model.parameters()).device
    out = dict.fromkeys(("head", "log_softmax", "js", "js_pairwise"), 0.0)

    def add_time(part, fn):
        sync(device)
        t = time.perf_counter()
        result = fn()
        sync(device)
        out[part] += time.perf_counter() - t
        return result

    with torch.no_grad():
        for plan, h in zip(plans, hidden):
            others = [j for j in plan.which if j is not None]
            step = max(1, chunk_tokens // h.shape[0])
            for t0 in range(0, h.shape[1], step):
                x = h[:, t0:t0 + step]  # [C, c, H]
                logits = add_time("head", lambda: head(x.reshape(-1, x.shape[-1])).view(x.shape[0], x.shape[1], -1))
                lp = add_time("log_softmax", lambda: torch.log_softmax(
                    logits.float() if temperature == 1.0 else logits.float() / temperature, -1))  # [C, c, V]
                del logits
                chunk = js_chunk_bytes(lp.device)
                add_time("js", lambda: js_against_first(lp, others, chunk_bytes=chunk))
                add_time("js_pairwise", lambda: [js_distance_log_probs(lp[0], lp[j], chunk_bytes=chunk) for j in others])
    return out


def time_prefixes(model, items) -> tuple[float, int]:
    """(seconds, tokens) of encoding each replay group's common prefix once, as the shared
    replay does first: the part of the model body's time that is the prompts' prefixes."""
    decoder, device = decoder_of(model), next(model.parameters()).device
    seconds, tokens = 0.0, 0
    with torch.no_grad():
        for group in replay_groups(items, True):
            if not group.prefix:
                continue
            ids = torch.as_tensor(group.prefix, dtype=torch.long, device=device)[None]  # [1, L]
            sync(device)
            t = time.perf_counter()
            decoder(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
            sync(device)
            seconds += time.perf_counter() - t
            tokens += len(group.prefix)
    return seconds, tokens


def timed(fn):
    """(fn(), seconds it took), the accelerator's queued work included."""
    sync()
    t = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - t


def timed_update(policy, batch, temperature: float, weights=None, **paths):
    """((log-probs [N, T], entropy), forward seconds, backward seconds) of one update's forward
    and backward on `batch` as the trainer runs them (`harness.forward.token_logps`, each
    prompt encoded once for its group; `paths`: its fast-path switches), in train mode from
    zeroed gradients, with the loss sum(logp x response mask x `weights` [T]) (None: 1 at every
    position): a loss that weighs positions differently when `weights` do. The gradients are
    left on the adapter."""
    from mrtpo.harness.forward import token_logps

    t = batch.response_mask.shape[1]
    policy.model.train()
    policy.model.zero_grad(set_to_none=True)
    (logp, entropy), fwd = timed(lambda: token_logps(policy.model, batch.input_ids, batch.attention_mask,
                                                     batch.position_ids, t, temperature, share_prompts=True,
                                                     **paths))
    _, bwd = timed(lambda: (logp * batch.response_mask if weights is None
                            else logp * batch.response_mask * weights).sum().backward())
    return (logp, entropy), fwd, bwd
