"""The update's vocabulary head once per distinct hidden state against once per position.

The update feeds each prompt's responses as one token trie (`forward.response_trie_hidden`), so
responses that begin alike share the trie's first nodes, and every position past a
response's end reads the same zero state. `head_logps.chosen_logps(rows=)` sends each
distinct state through the head (a slice of the vocabulary at a time) once and sums the
positions' gradients into it; before, the [N, T] positions each went through it. This script
samples one batch as the trainer does, takes its states (`forward.shared_prompt_hidden`), and
times the head's forward and backward (with the entropy, as the update's first pass asks,
and a loss that weighs every position differently) both ways, alternated for `--repeats`
rounds (the order reversed every other round). It prints medians, the paired saving with its
95% interval, and the largest differences of the log-probs and of the states' gradients.

    python -m benchmarks.speed.update_head [--model smollm2-135m] [--task text2sql] [-o demo=true]
        [--repeats 12] [--threads 2] [--json benchmarks/results/speed-update-head-smollm2-135m.json]
"""
from __future__ import annotations

import statistics
import sys

import torch

from benchmarks.lib.results import command, cpu_name, current_commit, write_result
from benchmarks.lib.setting import (adapted_policy, parse_step_args, sample_batch, step_parser, step_settings,
                                    train_setup)
from benchmarks.lib.stats import t_interval
from benchmarks.speed.timing import timed

SETTINGS = ("positions", "states")


def main(argv: list[str] | None = None) -> dict:
    args, load = parse_step_args(step_parser(__doc__, repeats=12), argv)
    from mrtpo.harness.fast.head_logps import chosen_logps
    from mrtpo.harness.forward import shared_prompt_hidden
    from mrtpo.models.builtin import builtin_name
    from mrtpo.replay.plumbing import plain_linear_head

    cfg, task, task_args, examples = train_setup(args.model, args.task, args.options)
    policy = adapted_policy(args.model, cfg, args.seed)
    rollout = sample_batch(policy, task, examples, cfg, args.seed)
    batch = rollout.batch(policy.pad_id, policy.device)
    t = batch.response_mask.shape[1]
    with torch.no_grad():
        shared = shared_prompt_hidden(policy.model, batch.input_ids, batch.attention_mask, batch.position_ids, t)
    if shared is None:
        raise SystemExit(f"{args.task}'s batch shares no prompt, so the update keeps a row per position: "
                         "nothing to compare")
    weight = plain_linear_head(policy.model)  # [V, H]
    if weight is None:
        raise SystemExit(f"{args.model}'s head is not a plain linear one; the update does not slice it")
    targets = batch.input_ids[:, -t:]  # [N, T]
    upstream = torch.linspace(-1.0, 1.0, t) * batch.response_mask  # [N, T]

    def one(name: str):
        states = shared.states.clone().requires_grad_(True)  # [M, H]

        def run():
            if name == "states":
                logp, _ = chosen_logps(states, weight, targets, cfg.temperature, with_entropy=True, rows=shared.index)
            else:
                logp, _ = chosen_logps(states[shared.index], weight, targets, cfg.temperature, with_entropy=True)
            (logp * upstream).sum().backward()
            return logp.detach()

        logp, seconds = timed(run)
        return seconds, logp, states.grad

    rounds, results = [], {}
    for r in range(args.repeats):
        out = {}
        for name in (SETTINGS if r % 2 == 0 else SETTINGS[::-1]):
            out[name], *results[name] = one(name)
        rounds.append(out)
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.3f} s" for k, v in out.items()), flush=True)
    mask = batch.response_mask.bool()
    logp_diff = float((results["states"][0] - results["positions"][0])[mask].abs().max())
    grad_diff = float((results["states"][1] - results["positions"][1]).abs().max())
    med = {k: statistics.median(x[k] for x in rounds) for k in SETTINGS}
    mean, low, high = t_interval([x["positions"] - x["states"] for x in rounds])  # 95%
    commit = current_commit()
    name = builtin_name(args.model) or args.model
    counts = {"positions": targets.numel(), "states": shared.states.shape[0]}
    rows = [[s, counts[s], round(med[s], 3), round(med[s] / med["positions"], 2)] for s in SETTINGS]
    print(f"the update's head on {args.task}, {name}: {counts['positions']} positions "
          f"({int(batch.response_mask.sum())} response tokens), {counts['states']} distinct states; "
          f"{torch.get_num_threads()} threads, medians of {args.repeats} rounds")
    for row in rows:
        print(f"{row[0]:<10} rows {row[1]:>5}  forward and backward {row[2]:>6.3f} s  / positions' {row[3]:.2f}")
    print(f"paired saving: {mean:.3f} s, 95% interval [{low:.3f}, {high:.3f}]; largest |log-prob difference| "
          f"{logp_diff:.1e}, largest |state gradient difference| {grad_diff:.1e}")
    doc = {"section": "speed", "model": name,
           "title": f"the update's vocabulary head once per position against once per distinct state, {args.task}, "
                    f"{cfg.batch_prompts} x {cfg.num_generations}, {torch.get_num_threads()} threads",
           "command": command("benchmarks.speed.update_head", sys.argv[1:] if argv is None else argv),
           "columns": ["head rows", "rows", "forward and backward s", "/ positions'"], "rows": rows,
           "notes": [f"medians of {args.repeats} rounds, the two alternated on the same states; "
                     f"{int(batch.response_mask.sum())} of the positions are response tokens; {cpu_name()}, "
                     f"load average {load:.2f} before the run",
                     f"paired saving: {mean:.3f} s per update (mean of {len(rounds)} rounds, 95% interval "
                     f"[{low:.3f}, {high:.3f}] s)",
                     f"largest |log-prob difference| {logp_diff:.1e} (response tokens), largest |gradient "
                     f"difference| of the states {grad_diff:.1e}"],
           "settings": step_settings(cfg, task_args), "logp_difference": logp_diff, "gradient_difference": grad_diff,
           "rounds": rounds, "commit": commit}
    return write_result(args.json, "table", doc)


if __name__ == "__main__":
    main()
