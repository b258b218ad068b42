"""One training step's time with the fast paths off and on, side by side in one run.

The step is the trainer's: sample B x G completions (`rollout.sample`), score them, replay
them (MRTPO's distances), then the update's forward and backward (`forward.token_logps` with each
prompt encoded once for its group). Two settings, alternated for `--repeats` rounds on the same
policy and batch:

- plain: the paths before issue 38 (a dynamic KV cache while decoding, which copies itself
  whole at every new token; each prompt encoded on its own; the replay's suffixes shared one
  level deep; the update's responses as rows padded to the longest; key/value heads copied once per
  query head that reads them; every row reading its prompt's keys and values while decoding;
  decoding's head re-packed by MKL at every token; decoding through `generate`; the update's
  log-probs from [N, T, V] logits);
- fast: a static KV cache written in place, the beginning every prompt shares (system
  text, worked example) encoded once for all of them, in the rollout, the replay
  (`ReplayOptions.common`) and the update, grouped key/value heads read in place
  (`harness.attention`), decoding without `generate` (`harness.decode`: the model's own
  weights with Llama's arithmetic called directly, each prompt's keys and values kept once), decoding's attention
  reading each prompt's keys and values once for its G rows (`harness.cascade`), decoding's
  vocabulary head with its weight packed once (for MKL on Intel CPUs, oneDNN on others) and, on the lean path, each layer's
  projections of one input stacked into one product packed once per rollout
  (`harness.packed`; where oneDNN packs them, a stopped row leaves the products), the replay's context suffixes nested by the beginnings they share
  (`ReplayOptions.trunks`), the replay taking the rollout's encoding of the beginning
  its prompts share instead of encoding it again (`Rollout.prompt_start`, while the weights
  stand), the update's responses fed as one token trie per prompt
  (`forward.response_trie_hidden`: no padding, a shared beginning once), and the update's
  vocabulary head a slice of words at a time (`harness.head_logps`), once per trie node
  rather than once per [N, T] position (`forward.ResponseStates`).

Both settings start each round from the same seed, and the script checks that they give the
same results: the same completions, distances, log-probs and LoRA gradients to float rounding (it prints the
largest differences; `tests/harness` and `tests/replay` assert them on tiny models). The
scoring does not change with the setting; it is timed once per round and added to both totals.
Medians over rounds; the ratio is fast over plain.

    python -m benchmarks.speed.step [--model smollm2-135m] [--task text2sql] [-o demo=true]
        [--repeats 3] [--threads 2] [--json benchmarks/results/speed-step-smollm2-135m.json]
"""
from __future__ import annotations

import dataclasses
import statistics
import sys

import torch

from benchmarks.lib.results import command, cpu_name, write_result
from benchmarks.lib.setting import (adapted_policy, parse_step_args, sample_batch, step_parser, step_settings,
                                    train_setup)
from benchmarks.speed.timing import timed, timed_update

SETTINGS = {"plain": dict(static_cache=False, common_prefix=False, grouped=False, sliced_head=False, packed=False,
                          cascade=False, trunks=False, response_tries=False, lean=False),
            "fast": dict(static_cache=True, common_prefix=True, grouped=True, sliced_head=True, packed=True,
                         cascade=True, trunks=True, response_tries=True, lean=True)}  # `common_prefix` also switches the replay's


def one_round(policy, task, examples, cfg, seed: int) -> dict:
    """Each setting's rollout, replay and update seconds, and what scoring takes: the trainer's
    pieces (the loop's sampler, `Scorer`, `token_credit.replay_distances`, `forward.token_logps`)
    with the setting's paths switched."""
    from mrtpo.harness.fast.attention import grouped_attention
    from mrtpo.harness.scoring import Scorer
    from mrtpo.harness.token_credit import policy_replayer, replay_distances
    from mrtpo.replay import ReplayOptions

    out, rollouts = {}, {}
    for name, flags in SETTINGS.items():
        torch.manual_seed(seed)
        with grouped_attention(flags["grouped"]):
            rollouts[name], out[f"{name}_rollout"] = timed(lambda: sample_batch(
                policy, task, examples, cfg, seed, static_cache=flags["static_cache"],
                common_prefix=flags["common_prefix"], packed=flags["packed"], cascade=flags["cascade"],
                lean=flags["lean"]))
    rollout = rollouts["plain"]
    out["same_completions"] = sum(a == b for a, b in zip(rollout.response_ids, rollouts["fast"].response_ids))
    out["completions"] = len(rollout)
    scored, out["score"] = timed(lambda: Scorer(task, 0).score(rollout.examples, rollout.responses))
    replayer, qs = policy_replayer(policy), {}
    with torch.no_grad(), policy.merged():  # as the trainer: LoRA folded once, before the replay's timing
        for name, flags in SETTINGS.items():
            options = ReplayOptions(common=flags["common_prefix"], trunks=flags["trunks"])
            # the same completions (the plain rollout's) with this setting's encoded beginning
            # (plain: None, no common beginning encoded), through the trainer's replay
            replayed = dataclasses.replace(rollout, prompt_start=rollouts[name].prompt_start)
            with grouped_attention(flags["grouped"]):
                (qs[name], _), out[f"{name}_replay"] = timed(lambda: replay_distances(
                    replayer, task, replayed, scored, cfg.temperature, options=options))  # [N, K, T]
    out["max_distance_difference"] = float((qs["fast"] - qs["plain"]).abs().max())
    batch = rollout.batch(policy.pad_id, policy.device)
    params = policy.trainable_parameters()
    weights = torch.linspace(-1.0, 1.0, batch.response_mask.shape[1])  # [T]: each position weighed differently
    results = {}
    for name, flags in SETTINGS.items():
        with grouped_attention(flags["grouped"]):
            (logp, _), fwd, bwd = timed_update(policy, batch, cfg.temperature, weights,
                                               common_prefix=flags["common_prefix"], sliced_head=flags["sliced_head"],
                                               response_tries=flags["response_tries"])
        out[f"{name}_forward"], out[f"{name}_backward"] = fwd, bwd
        results[name] = (logp.detach(), torch.cat([p.grad.flatten() for p in params]))
    policy.model.zero_grad(set_to_none=True)
    mask = batch.response_mask.bool()
    (lp0, g0), (lp1, g1) = results["plain"], results["fast"]
    out["max_logp_difference"] = float((lp1 - lp0)[mask].abs().max())
    out["gradient_relative_difference"] = float((g1 - g0).norm() / g0.norm().clamp(min=1e-30))
    for name in SETTINGS:
        out[f"{name}_total"] = (out[f"{name}_rollout"] + out["score"] + out[f"{name}_replay"]
                                + out[f"{name}_forward"] + out[f"{name}_backward"])
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = step_parser(__doc__, repeats=3)
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: the model's train setting")
    args, load = parse_step_args(ap, argv)
    from mrtpo.models.builtin import builtin_name

    cfg, task, task_args, examples = train_setup(args.model, args.task, args.options, args.max_new_tokens)
    policy = adapted_policy(args.model, cfg, args.seed)  # the same policy in every run, its gradients all non-trivial
    rounds = [one_round(policy, task, examples, cfg, args.seed + r) for r in range(args.repeats)]
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    phases = ("rollout", "replay", "forward", "backward", "total")
    rows = [{"phase": ph, "plain": med[f"plain_{ph}"], "fast": med[f"fast_{ph}"],
             "ratio": med[f"fast_{ph}"] / med[f"plain_{ph}"]} for ph in phases]
    name = builtin_name(args.model) or args.model
    print(f"one step of {args.task} on {name}, {cfg.batch_prompts} x {cfg.num_generations}, "
          f"{cfg.max_new_tokens} new tokens, {torch.get_num_threads()} threads, medians of {args.repeats} rounds")
    print(f"{'phase':<10} {'plain s':>8} {'fast s':>8} {'fast/plain':>10}")
    for r in rows:
        print(f"{r['phase']:<10} {r['plain']:>8.2f} {r['fast']:>8.2f} {r['ratio']:>10.2f}")
    print(f"scoring {med['score']:.2f} s in both totals")
    same = sum(r["same_completions"] for r in rounds)
    total = sum(r["completions"] for r in rounds)
    worst_logp = max(r["max_logp_difference"] for r in rounds)
    worst_grad = max(r["gradient_relative_difference"] for r in rounds)
    worst_q = max(r["max_distance_difference"] for r in rounds)
    print(f"same completions {same}/{total}; largest |distance difference| {worst_q:.1e}; largest "
          f"|log-prob difference| {worst_logp:.1e}; largest relative gradient difference {worst_grad:.1e}")
    doc = {"model": name, "task": args.task,
           "settings": step_settings(cfg, task_args),
           "threads": torch.get_num_threads(), "load_average": load, "cpu": cpu_name(), "repeats": args.repeats,
           "rows": rows,
           "score_seconds": med["score"], "same_completions": same, "completions": total,
           "max_distance_difference": worst_q, "max_logp_difference": worst_logp,
           "gradient_relative_difference": worst_grad, "rounds": rounds,
           "command": command("benchmarks.speed.step", sys.argv[1:] if argv is None else argv)}
    return write_result(args.json, "speed-step", doc)


if __name__ == "__main__":
    main()
