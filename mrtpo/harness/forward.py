"""The policy's forward passes for the update: per-token log-probs of sampled responses.

`token_logps` runs the model over prompt + response rows and returns the log-probability (and,
without gradient, the entropy) of each response token at the sampling temperature. The fast
paths it takes are exact (tested equal to the plain forward to float rounding): each distinct
prompt is encoded once and its responses reuse the cache (`shared_prompt_hidden`), a prompt's
responses run as one token trie (`response_trie_hidden`, `ResponseStates`), and the vocabulary
head runs a slice at a time (`fast.head_logps`). The loss on these log-probs is `loss.py`'s.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

#: the most nodes of one response trie in the update (`response_trie_hidden`): a prompt's
#: responses beyond it start another trie (one response longer than this is a trie of its own)
TRIE_NODES = 1024


@dataclass(frozen=True)
class ResponseStates:
    """The hidden states at the positions that predict response tokens, each distinct one
    once: `states` [M, H], and `index` [N, T], the row of `states` that row n's position t
    reads. Positions in one trie node (responses that begin alike) or past a response's end
    (the zero state) share a row, so the vocabulary head runs once for each
    (`head_logps.chosen_logps(rows=)`)."""

    states: torch.Tensor  # [M, H]
    index: torch.Tensor  # [N, T] long

    @classmethod
    def of_rows(cls, hidden: torch.Tensor) -> "ResponseStates":
        """One row of states per position of hidden [N, T, H]."""
        n, t, h = hidden.shape
        return cls(hidden.reshape(n * t, h), torch.arange(n * t, device=hidden.device).view(n, t))

    def dense(self) -> torch.Tensor:
        """[N, T, H]: each position's hidden state."""
        n, t = self.index.shape
        return self.states.index_select(0, self.index.view(-1)).view(n, t, -1)


def token_logps(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor, num_response: int, temperature: float = 1.0,
                with_entropy: bool = False, share_prompts: bool = False, common_prefix: bool = True,
                sliced_head: bool = True, response_tries: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities of the last `num_response` tokens under `model` -> ([N, T], entropy [N, T]).

    Logits are divided by the sampling temperature (the distribution the tokens were drawn
    from) and taken only at the T positions that predict response tokens. The entropy (no
    gradient) is computed a few rows at a time, so it adds no [N, T, V] temporaries.

    `share_prompts`: rows whose prompt columns are identical (the G completions of a prompt)
    run the prompt through the model once and reuse its KV cache for their responses
    (`shared_prompt_hidden`): the same log-probs and gradients as the full forward, to float
    rounding (tested), for about 1/G of the prompt's compute; with `common_prefix`, the
    beginning all the prompts share (system text, worked example) is encoded once for all;
    with `response_tries`, each prompt's responses run on its cache as one token trie
    (`response_trie_hidden`: no padding, a beginning they share once). Positions past a
    response's end (padding) then get a zero hidden state: their log-probs are finite and
    carry no gradient, and the loss masks them as it always does.
    `sliced_head`: a bias-free linear head goes through `head_logps.chosen_logps`, a slice of
    the vocabulary at a time, instead of materializing [N, T, V] logits, and once for each
    distinct hidden state (a trie node several responses share, the zero state of padding)
    rather than once per position (the same values and gradients to float rounding, tested;
    benchmarks switch it off to measure it).
    """
    from mrtpo.harness.fast.head_logps import chosen_logps
    from mrtpo.replay.plumbing import decoder_of, head_of, plain_linear_head

    t = num_response
    targets = input_ids[:, -t:]  # [N, T]
    shared = (shared_prompt_hidden(model, input_ids, attention_mask, position_ids, t, common_prefix,
                                   response_tries) if share_prompts else None)  # ResponseStates or None
    weight = plain_linear_head(model) if sliced_head else None  # [V, H]
    if weight is not None:
        if shared is None:
            hidden = decoder_of(model)(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                       use_cache=False).last_hidden_state[:, -t - 1:-1]  # [N, T, H]
            return chosen_logps(hidden, weight, targets, temperature, with_entropy)
        return chosen_logps(shared.states, weight, targets, temperature, with_entropy, rows=shared.index)
    if shared is not None:
        logits = head_of(model)(shared.dense())  # [N, T, V]
    else:
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    logits_to_keep=t + 1, use_cache=False)
        logits = out.logits[:, :-1]  # [N, T, V]
    logits = logits.float()  # [N, T, V]
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, -1)  # [N, T]
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logz  # [N, T]
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = torch.empty_like(logz)  # [N, T]
            rows = max(1, 2**24 // max(1, logits.shape[1] * logits.shape[2]))  # ~64 MB of fp32 at a time
            for i in range(0, logits.shape[0], rows):
                lp = logits[i:i + rows] - logz[i:i + rows].unsqueeze(-1)  # [r, T, V]
                entropy[i:i + rows] = -(lp.exp() * lp).sum(-1)  # [r, T]
    return logp, entropy


def shared_prompt_hidden(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         position_ids: torch.Tensor, num_response: int, common_prefix: bool = True,
                         response_tries: bool = True) -> ResponseStates | None:
    """Hidden states (`ResponseStates`: [N, T] positions) at the positions predicting the last
    T tokens, each distinct prompt encoded once; None when no two rows share a prompt or a
    beginning (or sharing is not possible).

    The batch is left-padded prompts then responses (rollout.Batch). Its columns before the
    last prompt column are the prefix: the G rows of one prompt hold the same prefix ids and
    mask, hence (causal attention) the same keys and values there. The distinct prefixes go
    through the decoder once (`prefix.encode_prompts`: with `common_prefix`, the beginning
    every prompt shares, such as the system text and a worked example, once for all of them),
    their KV cache is indexed out to every row (autograd flows back through the indexing,
    summing the rows' gradients, which is what the full forward's copies add up to), and the
    rest (the last prompt token, which predicts the first response token, and the response)
    runs on top. LoRA dropout, in training mode, then draws one mask per prefix rather than
    one per row. Not used under gradient checkpointing, which turns the KV cache off in training.
    """
    from mrtpo.harness.fast.prefix import encode_prompts
    from mrtpo.replay.planning import common_prefix as shared_beginning
    from mrtpo.replay.planning import takes_tree_mask
    from mrtpo.replay.plumbing import cache_kwarg, decoder_of, select_rows

    n, t = input_ids.shape[0], num_response
    cut = input_ids.shape[1] - t - 1  # prefix columns
    if cut < 1 or n < 2 or (model.training and _checkpointing(model)):
        return None
    key = torch.cat([input_ids[:, :cut], attention_mask[:, :cut]], 1)  # [N, 2 * cut]
    uniq, inverse = torch.unique(key, dim=0, return_inverse=True)  # [U, 2 * cut], [N]
    u = uniq.shape[0]
    prompts = [row[:cut][row[cut:].bool()].tolist() for row in uniq]  # U prefixes, real tokens only
    if not any(prompts) or (u == n and not (common_prefix and u > 1 and shared_beginning(prompts))):
        return None
    decoder = decoder_of(model)
    arg = cache_kwarg(decoder)
    enc = encode_prompts(decoder, prompts, input_ids.device, arg, share_common=common_prefix)
    # tries need a response token somewhere: with none, the padded rows below keep the graph
    # (the log-probs of an all-empty micro-batch still backpropagate, to zero)
    if response_tries and takes_tree_mask(model.config) and bool(attention_mask[:, cut + 1:].any()):
        return response_trie_hidden(model, decoder, arg, enc, input_ids, attention_mask, position_ids, inverse, t)
    select_rows(enc.cache, inverse)  # [U, ...] -> [N, ...]
    mask = torch.cat([enc.mask[inverse], attention_mask[:, cut:]], 1)  # [N, width + T + 1]
    hidden = decoder(input_ids=input_ids[:, cut:], attention_mask=mask, position_ids=position_ids[:, cut:],
                     use_cache=True, **{arg: enc.cache}).last_hidden_state  # [N, T + 1, H]
    return ResponseStates.of_rows(hidden[:, :t])  # [N, T] positions


def response_trie_hidden(model, decoder, cache_arg: str, enc, input_ids: torch.Tensor,
                         attention_mask: torch.Tensor, position_ids: torch.Tensor, inverse: torch.Tensor,
                         t: int) -> ResponseStates:
    """Hidden states ([N, T] positions) at the positions predicting each row's response tokens, with
    each distinct prompt's rows fed on its cache (`enc`, U rows: `prefix.encode_prompts`) as
    one token trie: row r feeds its last prompt token and its response but the last token
    (the positions that predict a response token), the rows of one prompt share at least that
    first node and often the response's first words, and no row is padded. A tree mask lets
    each node see its prompt and its own ancestors only, so every node computes what it
    computes in its own row (causal attention): the same hidden states, to float rounding, and
    autograd sums a shared node's gradient over the rows that read it, as the rows' copies
    would add up; the states keep each node once, and positions past a row's end read a zero
    state (no gradient). LoRA dropout, in
    training mode, draws one mask per node, so rows share it where they share a beginning (as
    they share their prompt's), and a seeded run draws other masks than the padded rows did.
    `inverse` [N]: each row's prompt; `t`: T, the response columns at the batch's end."""
    from mrtpo.replay.planning import build_tries
    from mrtpo.replay.plumbing import select_rows
    from mrtpo.replay.shared import tree_attention_mask, tree_mask

    n, cut = input_ids.shape[0], input_ids.shape[1] - t - 1
    device, dtype = input_ids.device, next(model.parameters()).dtype
    lengths = attention_mask[:, cut + 1:].sum(-1).tolist()  # [N] response tokens per row
    ids_cpu = input_ids[:, cut:].tolist()
    u = int(inverse.max()) + 1
    by_prompt: list[list] = [[] for _ in range(u)]
    for r, (p, length) in enumerate(zip(inverse.tolist(), lengths)):
        if length:
            by_prompt[p].append((r, ids_cpu[r][:length]))  # last prompt token + response[:-1]
    # one trie per prompt, of at most TRIE_NODES nodes: its attention is dense ([W, W] per head)
    tries = [build_tries(seqs, TRIE_NODES) for seqs in by_prompt]
    rows = [(p, tree) for p, ts in enumerate(tries) for tree in ts]  # one forward row per trie
    width = max(len(tree.tokens) for _, tree in rows)  # some row has a response (the caller's condition)
    ids = torch.zeros(len(rows), width, dtype=torch.long)  # [R, W]
    pos = torch.zeros(len(rows), width, dtype=torch.long)  # [R, W]
    tmask = torch.zeros(len(rows), width, width, dtype=torch.bool)  # [R, W, W]
    first_pos = position_ids[:, cut].tolist()  # [N] the last prompt token's position
    start = {p: first_pos[r] for p, seqs in enumerate(by_prompt) for r, _ in seqs[:1]}
    for i, (p, tree) in enumerate(rows):
        ids[i, :len(tree.tokens)] = torch.as_tensor(tree.tokens)
        pos[i, :len(tree.tokens)] = start[p] + torch.as_tensor(tree.depth)
        tmask[i] = tree_mask(tree.depth, width)
    which = torch.tensor([p for p, _ in rows], device=device)  # [R] each trie's prompt
    if len(rows) != u or bool((which != torch.arange(u, device=device)).any()):
        select_rows(enc.cache, which)  # [U, ...] -> [R, ...]
    mask = tree_attention_mask(enc.mask[which].bool(), tmask.to(device), model.config, dtype)  # [R, 1, W, width + W]
    hidden = decoder(input_ids=ids.to(device), attention_mask=mask, position_ids=pos.to(device), use_cache=True,
                     **{cache_arg: enc.cache}).last_hidden_state  # [R, W, H]
    flat = torch.cat([hidden.reshape(-1, hidden.shape[-1]), hidden.new_zeros(1, hidden.shape[-1])])  # [R*W + 1, H]
    index = torch.full((n, t), len(rows) * width, dtype=torch.long)  # [N, T] the zero row by default
    for i, (_, tree) in enumerate(rows):
        for r, path in zip(tree.members, tree.paths):
            index[r, :len(path)] = i * width + torch.as_tensor(path)
    used = torch.unique(index)  # [M] the nodes some position reads (no trie's padding), sorted
    return ResponseStates(flat.index_select(0, used.to(device)),
                          torch.searchsorted(used, index).to(device))  # [M, H], [N, T]


def _checkpointing(model) -> bool:
    """Whether the model recomputes activations in backward (transformers renamed the flag in v5)."""
    flag = getattr(model, "is_activation_checkpointing", None)
    return bool(flag if flag is not None else getattr(model, "is_gradient_checkpointing", False))
