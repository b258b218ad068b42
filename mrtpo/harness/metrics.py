"""Per-step metrics with TRL's names, MRTPO's concentration metric, and the phase timer.

The JSONL files they are written to are `run.files.JsonlLog`'s.

Names (one `metrics.jsonl` line per step):
- `reward`: mean over completions of the weighted sum of rewards (absent rewards count 0);
  `reward_std`: mean over groups of that sum's std; `frac_reward_zero_std`: share of groups
  whose summed reward has std 0 (their advantage is 0: nothing to learn from them).
- `rewards/<name>/mean`, `rewards/<name>/std` (over the rows where the reward applies) and
  `rewards/<name>/frac_zero_std` (share of its groups with no spread: GDPO gives them 0).
- `rewards/<name>/timeout_frac`: share of the rows where the reward applies whose verifier ran
  out of time (scored the floor, "timed out" in the feedback; mrtpo.harness.scoring.timed_out);
  the trainer also says so on the console when it reaches TIMEOUT_WARN_FRAC.
- `completions/mean_length|min_length|max_length|clipped_ratio` (clipped = truncated) and
  `completions/mean|min|max_terminated_length` (over the completions that ended with a stop
  token; 0 when none did, as TRL logs it).
- `num_tokens`: prompt + completion tokens of every step so far (TRL's `num_input_tokens_seen`:
  unpadded prompts and completions of the whole batch, carried across --resume).
- `mrtpo/<name>/top80_token_share`: per response, the smallest share of its tokens that holds
  80% of the reward's total JS distance, averaged over the responses whose credit for the
  reward is not 0 (the others are not replayed, see `--replay-zero-credit`) and whose
  distance is not all zero; 1.0 would be uniform spread, small values mean the reward points
  at few tokens.
- `eval/reward`, `eval/rewards/<name>/mean|std`, `eval/completions/...`: the names above, on
  the held-out examples' greedy responses, at the steps that measure them (every --eval-every
  and the last; mrtpo.harness.loop.held_out_rewards).
- `time/generate|verify|replay|update|eval|step` in seconds (`time/step` leaves out
  `time/compile` and `time/eval`); `loss`, `grad_norm`, `kl`,
  `entropy`, `clip_ratio/*`, `learning_rate` come from the update. `clip_ratio/low_mean`,
  `high_mean`, `region_mean` are shares of the batch's tokens; `clip_ratio/low_min` is the
  smallest share of one sequence's tokens clipped at 1 - epsilon (A < 0), `clip_ratio/high_max`
  the largest clipped at 1 + epsilon_high (A > 0), as TRL defines them (averaged over
  --num-iterations; TRL takes them per micro-batch, which is the same with --grad-accum 1).
"""
from __future__ import annotations

from typing import Any

import torch

# the concentration metric has one implementation, shared with `mrtpo credit`
from mrtpo.statistics import concentration


def weighted_total(scores: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Each row's weighted sum of rewards, scores [N, K] (NaN = absent, counts 0) -> [N]."""
    return (torch.nan_to_num(scores, nan=0.0) * weights).sum(-1)


def reward_metrics(scores: torch.Tensor, names: list[str], weights: torch.Tensor,
                   group_size: int, prefix: str = "") -> dict[str, float]:
    """TRL's reward metrics from scores [N, K] (NaN = reward absent on that row)."""
    out: dict[str, float] = {}
    present = ~torch.isnan(scores)  # [N, K]
    total = weighted_total(scores, weights)  # [N]
    out[f"{prefix}reward"] = float(total.mean())
    if group_size > 1:
        grouped = total.view(-1, group_size)  # [N/G, G]
        std = grouped.std(1)  # [N/G]
        out[f"{prefix}reward_std"] = float(std.mean())
        out[f"{prefix}frac_reward_zero_std"] = float(torch.isclose(std, torch.zeros_like(std)).float().mean())
    for k, name in enumerate(names):
        col = scores[present[:, k], k]  # [n_k]
        out[f"{prefix}rewards/{name}/mean"] = float(col.mean()) if col.numel() else float("nan")
        out[f"{prefix}rewards/{name}/std"] = float(col.std()) if col.numel() > 1 else 0.0
        if group_size > 1:
            g = scores[:, k].view(-1, group_size)  # [N/G, G]
            here = ~torch.isnan(g).any(1)  # [N/G] groups where the reward applies
            if here.any():
                gstd = g[here].std(1)  # [n_groups]
                out[f"{prefix}rewards/{name}/frac_zero_std"] = float(
                    torch.isclose(gstd, torch.zeros_like(gstd)).float().mean())
    return out


TIMEOUT_WARN_FRAC = 0.5  # a reward timing out on this share of a step's completions is said


def timeout_metrics(scored, prefix: str = "") -> dict[str, float]:
    """`rewards/<name>/timeout_frac` for every reward column of `scored` (mrtpo.harness.scoring.Scored):
    the share of the rows where the reward applies whose verdict says it timed out."""
    from mrtpo.harness.scoring import timed_out

    seen = {name: 0 for name in scored.names}
    late = dict(seen)
    for names, verdicts in zip(scored.row_names, scored.verdicts):
        for name, verdict in zip(names, verdicts):
            seen[name] += 1
            late[name] += timed_out(verdict)
    return {f"{prefix}rewards/{name}/timeout_frac": late[name] / seen[name] for name in scored.names if seen[name]}


def timeout_warnings(record: dict[str, Any], already: set[str]) -> list[str]:
    """A line for each reward whose `timeout_frac` in this step's `record` is at least
    TIMEOUT_WARN_FRAC, once per reward (names in `already` are skipped and then added)."""
    lines = []
    for key, frac in record.items():
        if not (key.startswith("rewards/") and key.endswith("/timeout_frac")) or frac is None:
            continue
        name = key[len("rewards/"):-len("/timeout_frac")]
        if frac >= TIMEOUT_WARN_FRAC and name not in already:
            already.add(name)
            lines.append(f"step {record['step']}: reward {name!r} timed out on {frac:.0%} of the "
                         f"completions, which score its floor ({key} in metrics.jsonl follows it). "
                         "Its verifier is too slow for its time limit: raise --verify-timeout or the "
                         "task's own limit (e.g. -o timeout=...), or make the verifier faster.")
    return lines


def completion_metrics(lengths: list[int], truncated: list[bool], prefix: str = "") -> dict[str, float]:
    """TRL's completion-length metrics; `*_terminated_length` over the completions that ended
    with a stop token (TRL logs 0 for all three when none did)."""
    n = max(len(lengths), 1)
    ended = [n_tok for n_tok, cut in zip(lengths, truncated) if not cut] or [0]
    return {
        f"{prefix}completions/mean_length": sum(lengths) / n,
        f"{prefix}completions/min_length": float(min(lengths, default=0)),
        f"{prefix}completions/max_length": float(max(lengths, default=0)),
        f"{prefix}completions/clipped_ratio": sum(truncated) / n,
        f"{prefix}completions/mean_terminated_length": sum(ended) / len(ended),
        f"{prefix}completions/min_terminated_length": float(min(ended)),
        f"{prefix}completions/max_terminated_length": float(max(ended)),
    }


def mrtpo_metrics(distances: torch.Tensor, mask: torch.Tensor, names: list[str],
                  credit: torch.Tensor | None = None) -> dict[str, float]:
    """Per reward, means over the (completion, reward) pairs with credit of how concentrated
    the distances are: `top80_token_share` (mrtpo.statistics.top_share), `gini` and
    `effective_token_ratio` (whether the weights collapse toward even or onto a few tokens)."""
    out = {}
    for label, values in concentration(distances, mask, credit).items():  # [N, K] each
        for k, name in enumerate(names):
            col = values[:, k]
            col = col[~torch.isnan(col)]
            if col.numel():
                out[f"mrtpo/{name}/{label}"] = float(col.mean())
    return out


class PhaseTimer:
    """Wall-clock seconds per phase of a step: `with timer("generate"): ...`."""

    def __init__(self) -> None:
        import time

        self._clock = time.perf_counter
        self._start = self._clock()
        self.seconds: dict[str, float] = {}

    def __call__(self, phase: str):
        import contextlib

        @contextlib.contextmanager
        def span():
            t0 = self._clock()
            try:
                yield
            finally:
                key = f"time/{phase}"
                self.seconds[key] = self.seconds.get(key, 0.0) + self._clock() - t0

        return span()

    def move(self, phase: str, to: str) -> None:
        """Book `phase`'s seconds so far as `to` (a rollout that compiled a new shape: its
        generate time is the compile's)."""
        seconds = self.seconds.pop(f"time/{phase}", 0.0)
        self.seconds[f"time/{to}"] = self.seconds.get(f"time/{to}", 0.0) + seconds

    def totals(self) -> dict[str, float]:
        """Every phase's seconds and `time/step`, the step's wall clock less `time/compile` (a
        one-off per compiled shape) and `time/eval` (the held-out measurement, on some steps
        only): reported apart so that step times compare."""
        apart = self.seconds.get("time/compile", 0.0) + self.seconds.get("time/eval", 0.0)
        return {**self.seconds, "time/step": self._clock() - self._start - apart}


def tokens_seen(previous: int, prompt_lengths: list[int], completion_lengths: list[int]) -> int:
    """TRL's `num_tokens`: the running count of prompt + completion tokens trained on."""
    return int(previous) + sum(prompt_lengths) + sum(completion_lengths)
