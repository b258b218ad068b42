"""The completions log: `<run>/completions.jsonl`, one line per completion of a logged step.

Written every `--log-completions-every` steps (and read back by `mrtpo credit RUN_DIR`).
Each line is a JSON object with these fields; per-reward lists are in the order of
`reward_names`, per-token lists have one entry per id of `response_ids`:

- `step` (int): the training step (1-based) whose rollout this is.
- `example_id`, `source` (str): the dataset example and the file/row it came from.
- `group`, `sample` (int): the prompt's index in the step's batch, the completion's index in
  its group of G.
- `prompt` (str): P0 as the model saw it (chat template applied, generation prompt opened).
- `response` (str): the completion decoded without special tokens.
- `response_ids` (list[int]): the sampled token ids exactly (the stop token included when
  it was sampled); `tokens` (list[str]): each id decoded on its own.
- `truncated` (bool): no stop token within `max_new_tokens`.
- `reward_names` (list[str]): this example's rewards, in task order (K varies per example).
- `scores` (list[float]), `feedback` (list[str]): each reward's verdict (feedback longer than
  16,000 characters is cut, ending in " [... N more characters cut]", as blocks are).
- `blocks` (list[str]): each reward's block Z_k ("" = no information for this response).
- `reward_weights` (list[float]): each reward's weight in the estimator (task weight times
  the step's SAW weight when SAW is on).
- `advantage` (float): the response-level advantage (the estimator's);
  `credit` (list[float]) and `offset` (float): its split per reward,
  `advantage == sum(credit) + offset`.
- `distances` (list[list[float]] | null): per reward, the JS distance q[k, t] between the
  next-token distributions under P_all and P_without_k at each response token; null when
  the run has MRTPO off.
- `token_weights` (list[list[float]] | null): per reward, MRTPO's weight of each token
  (q / mean q over the response, blended by `--mrtpo-lambda`; averages 1 over the response);
  null when MRTPO is off.
- `token_advantages` (list[float]): the advantage the loss used on each token
  (sum_k token_weights[k][t] * credit[k] + offset; the response's advantage when MRTPO is off).
"""
from __future__ import annotations

from typing import Any

from mrtpo.contexts import cut_block

DIGITS = 6  # floats are rounded: the file is for reading and plotting, not for exact replays


def _r(x: float) -> float:
    return round(float(x), DIGITS)


def logged_feedback(text: str) -> str:
    """A verdict's feedback as the log holds it: cut past MAX_BLOCK_CHARS with a marker that
    says how much was cut, as blocks are, so one verifier's megabytes of feedback cannot make
    a line that `mrtpo credit RUN_DIR` refuses to read."""
    return cut_block(text) if isinstance(text, str) else text


def records(step: int, rollout, scored, placed, tokenizer) -> list[dict[str, Any]]:
    """One JSON-ready dict per completion (see the module docstring for the fields), from the
    step's credit (`placed`: mrtpo.harness.token_credit.TokenCredit, built by `mrtpo_step` with
    `logs=True`, so its blocks are there), whichever trainer ran the step.

    `placed.distances` and `placed.token_weights` are [N, K, T] over the batch's reward columns
    (`scored.names`); they are written per row in the row's own reward order.
    """
    credit, distances, token_w, token_adv = placed.credit, placed.distances, placed.token_weights, placed.advantages
    estimator_weights = credit.weights if credit.weights is not None else scored.weights  # [K]
    blocks = placed.blocks
    out = []
    g = rollout.group_size
    for i, ids in enumerate(rollout.response_ids):
        n_tok = len(ids)
        cols = [scored.column(name) for name in scored.row_names[i]]
        verdicts = scored.verdicts[i]
        row: dict[str, Any] = {
            "step": step,
            "example_id": rollout.examples[i].id,
            "source": rollout.examples[i].source,
            "group": i // g,
            "sample": i % g,
            "prompt": rollout.prompts[i],
            "response": rollout.responses[i],
            "response_ids": list(ids),
            "tokens": [tokenizer.decode([t]) for t in ids],
            "truncated": bool(rollout.truncated[i]),
            "reward_names": list(scored.row_names[i]),
            "scores": [_r(v.score) for v in verdicts],
            "feedback": [logged_feedback(v.feedback) for v in verdicts],
            "blocks": list(blocks[i]),
            "reward_weights": [_r(estimator_weights[c]) for c in cols],
            "advantage": _r(credit.total[i]),
            "credit": [_r(credit.per_reward[i, c]) for c in cols],
            "offset": _r(credit.offset[i]),
            "distances": None if distances is None else
            [[_r(x) for x in distances[i, c, :n_tok].tolist()] for c in cols],
            "token_weights": None if token_w is None else
            [[_r(x) for x in token_w[i, c, :n_tok].tolist()] for c in cols],
            "token_advantages": [_r(x) for x in token_adv[i, :n_tok].tolist()],
        }
        out.append(row)
    return out
