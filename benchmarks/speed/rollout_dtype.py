"""The rollout from float32 weights against the rollout from their bfloat16 copy
(`mrtpo train --rollout-dtype bfloat16`), side by side in one run.

Both sample the same B x G completions' worth of prompts with the trainer's row-seeded
sampling, alternated for `--repeats` rounds (the first order flips each round) after one
warm-up round of each (the bf16 copy is made then). What changes is the rollout only: the
replay and the update run in float32 either way, so the rest of the step (scoring, replay,
the update's forward and backward, with the fast paths) is timed once per round on the
float32 rollout, and the step ratio is (bf16 rollout + rest) / (float32 rollout + rest).

How far bf16 sampling is from the weights: each bf16-sampled token's log-prob under the copy
against the float32 weights' (what the update computes), the importance ratios of TRL's
default correction (sequence_mask, C_max 3.0: the completions it drops), and how many
completions came out the same. Written as a `mrtpo.table/1` file for the results page.

    python -m benchmarks.speed.rollout_dtype [--model smollm2-135m] [--task text2sql] [-o demo=true]
        [--repeats 3] [--threads 2] [--json benchmarks/results/speed-rollout-dtype-smollm2-135m.json]
"""
from __future__ import annotations

import statistics
import sys

import torch

from benchmarks.lib.results import command, cpu_name, print_table, write_result
from benchmarks.lib.setting import (adapted_policy, parse_step_args, sample_batch, step_parser, step_settings,
                                    train_setup)
from benchmarks.speed.timing import timed, timed_update

DTYPES = {"float32": None, "bfloat16": torch.bfloat16}


def rollouts(policy, task, examples, cfg, seed: int, order: list[str]) -> dict:
    """{dtype name: (rollout, seconds)} sampled in `order` from the same seed."""
    out = {}
    for name in order:
        out[name] = timed(lambda: sample_batch(policy, task, examples, cfg, seed, record_logps=True,
                                               dtype=DTYPES[name]))
    return out


def gaps(policy, rollout, temperature: float) -> dict:
    """The recorded log-probs against the float32 weights' on the same tokens, and TRL's
    default correction on them."""
    from mrtpo.harness.forward import token_logps
    from mrtpo.harness.loss import sampling_correction

    batch = rollout.batch(policy.pad_id, policy.device)
    with torch.no_grad(), policy.merged() as model:
        old, _ = token_logps(model, batch.input_ids, batch.attention_mask, batch.position_ids,
                             batch.response_mask.shape[1], temperature, share_prompts=True)  # [N, T]
    mask = batch.response_mask.bool()  # [N, T]
    recorded = rollout.sampling_logp_matrix()  # [N, T]
    d = (old - recorded)[mask].abs()
    seq = sampling_correction(old, recorded, batch.response_mask, "sequence_mask", 3.0)[:, 0]  # [N]
    token = torch.exp(old - recorded)[mask]
    return {"mean": float(d.mean()), "p99": float(d.quantile(0.99)), "max": float(d.max()),
            "dropped": int((seq == 0).sum()), "token_ratio_min": float(token.min()),
            "token_ratio_max": float(token.max()), "tokens": int(mask.sum())}


def rest_of_step(policy, task, rollout, cfg) -> float:
    """Seconds of scoring, the replay and the update's forward and backward on `rollout`, each
    the trainer's own piece (`Scorer`, `token_credit.replay_distances` with the LoRA folded in,
    `forward.token_logps` with the fast paths)."""
    from mrtpo.harness.scoring import Scorer
    from mrtpo.harness.token_credit import policy_replayer, replay_distances

    scored, score = timed(lambda: Scorer(task, 0).score(rollout.examples, rollout.responses))
    _, replay = timed(lambda: replay_distances(policy_replayer(policy), task, rollout, scored, cfg.temperature))
    batch = rollout.batch(policy.pad_id, policy.device)
    _, fwd, bwd = timed_update(policy, batch, cfg.temperature)
    policy.model.zero_grad(set_to_none=True)
    return score + replay + fwd + bwd


def main(argv: list[str] | None = None) -> dict:
    args, load = parse_step_args(step_parser(__doc__, repeats=3), argv)
    from mrtpo.models.builtin import builtin_name

    cfg, task, task_args, examples = train_setup(args.model, args.task, args.options)
    policy = adapted_policy(args.model, cfg, args.seed)  # the same policy in every run
    rollouts(policy, task, examples, cfg, args.seed, list(DTYPES))  # warm-up: the bf16 copy is made here
    rounds = []
    for r in range(args.repeats):
        order = list(DTYPES) if r % 2 == 0 else list(DTYPES)[::-1]
        got = rollouts(policy, task, examples, cfg, args.seed + r, order)
        (same, t32), (low, t16) = got["float32"], got["bfloat16"]
        rounds.append({"float32": t32, "bfloat16": t16, "rest": rest_of_step(policy, task, same, cfg),
                       "same_completions": sum(a == b for a, b in zip(same.response_ids, low.response_ids)),
                       "completions": len(same), "tokens_float32": sum(map(len, same.response_ids)),
                       "tokens_bfloat16": sum(map(len, low.response_ids)),
                       "bf16": gaps(policy, low, cfg.temperature), "fp32": gaps(policy, same, cfg.temperature)})
        print(f"round {r + 1}: rollout float32 {t32:.2f} s, bfloat16 {t16:.2f} s, rest of the step "
              f"{rounds[-1]['rest']:.2f} s", flush=True)
    med = {k: statistics.median(x[k] for x in rounds) for k in ("float32", "bfloat16", "rest")}
    step32, step16 = med["float32"] + med["rest"], med["bfloat16"] + med["rest"]
    rows = [["rollout", med["float32"], med["bfloat16"], med["bfloat16"] / med["float32"]],
            ["rest of the step (float32 either way)", med["rest"], med["rest"], 1.0],
            ["step", step32, step16, step16 / step32]]
    b = [x["bf16"] for x in rounds]
    name = builtin_name(args.model) or args.model
    notes = [
        f"bf16-sampled tokens' log-prob against the float32 weights': mean |difference| "
        f"{statistics.mean(x['mean'] for x in b):.3f}, 99th percentile {max(x['p99'] for x in b):.2f}, largest "
        f"{max(x['max'] for x in b):.2f} ({sum(x['tokens'] for x in b)} tokens over {args.repeats} rounds); per-token "
        f"ratios {min(x['token_ratio_min'] for x in b):.2f} to {max(x['token_ratio_max'] for x in b):.2f}",
        f"TRL's default correction (sequence_mask, C_max 3.0) drops {sum(x['dropped'] for x in b)} of "
        f"{sum(x['completions'] for x in rounds)} bf16 completions",
        f"same completions as the float32 rollout: {sum(x['same_completions'] for x in rounds)}/"
        f"{sum(x['completions'] for x in rounds)}; completion tokens float32 {sum(x['tokens_float32'] for x in rounds)}, "
        f"bfloat16 {sum(x['tokens_bfloat16'] for x in rounds)}",
        f"float32 rollout's recorded log-probs against the weights' (a check): largest |difference| "
        f"{max(x['fp32']['max'] for x in rounds):.1e}",
        f"{torch.get_num_threads()} threads of {cpu_name()}, 1-minute load average at the start {load:.1f}; medians of "
        f"{args.repeats} rounds after a warm-up round"]
    title = (f"one step of {args.task}, {cfg.batch_prompts} x {cfg.num_generations}, {cfg.max_new_tokens} new "
             f"tokens: sampling from the float32 weights against a bfloat16 copy (--rollout-dtype bfloat16), "
             f"{torch.get_num_threads()} thread{'' if torch.get_num_threads() == 1 else 's'}")
    doc = {"section": "speed-step", "title": title, "model": name,
           "columns": ["phase", "float32 s", "bfloat16 s", "bfloat16 / float32"], "rows": rows, "notes": notes,
           "settings": step_settings(cfg, task_args),
           "rounds": rounds,
           "command": command("benchmarks.speed.rollout_dtype", sys.argv[1:] if argv is None else argv)}
    print_table(doc)
    return write_result(args.json, "table", doc)


if __name__ == "__main__":
    main()
