"""The update's LoRA dropout: torch's (peft's `nn.Dropout`) against the sparse draw, side by side.

`mrtpo train` keeps TRL's LoRA dropout of 0.05, so every update's forward draws a mask for the
input of each of the 210 LoRA projections of SmolLM2. On CPU the policy now draws only the
dropped positions (`mrtpo.harness.fast.dropout.SparseDropout`: the same distribution, other masks).
This script times one update's forward and backward (`forward.token_logps` with the fast paths,
as the trainer runs it; a loss that weighs every position differently) on the same rollout
with three copies of the same policy: dropout off, peft's dropout, the sparse one; alternated
for `--repeats` rounds (the order reversed every other round), medians. The dropout itself
does not change what is compared, only its masks: the rows' gradients differ by their masks
whichever module draws them, so no gradient is compared here (tests/harness/fast/test_dropout.py
tests the distribution).

    python -m benchmarks.speed.dropout [--model smollm2-135m] [--task text2sql] [-o demo=true]
        [--repeats 6] [--threads 2] [--json benchmarks/results/speed-dropout-smollm2-135m.json]
"""
from __future__ import annotations

import statistics
import sys

import torch

from benchmarks.lib.results import command, cpu_name, current_commit, write_result
from benchmarks.lib.setting import (adapted_policy, parse_step_args, sample_batch, step_parser, step_settings,
                                    train_setup)
from benchmarks.lib.stats import t_interval
from benchmarks.speed.timing import timed_update

SETTINGS = ("off", "torch", "sparse")


def main(argv: list[str] | None = None) -> dict:
    args, load = parse_step_args(step_parser(__doc__, repeats=6), argv)
    from mrtpo.models.builtin import builtin_name

    cfg, task, task_args, examples = train_setup(args.model, args.task, args.options)
    rate = cfg.lora_dropout if cfg.lora_dropout > 0 else 0.05
    policies = {}
    for name in SETTINGS:  # the same policy three times (the same seed's adapter)
        policies[name] = adapted_policy(args.model, cfg, args.seed, lora_dropout=0.0 if name == "off" else rate,
                                        sparse_dropout=name != "torch")
    base = policies["off"]
    kinds = {name: sorted({type(m).__name__ for m in pol.model.modules()
                           if type(m).__name__ in ("Dropout", "SparseDropout", "Identity")})
             for name, pol in policies.items()}
    torch.manual_seed(args.seed)
    rollout = sample_batch(base, task, examples, cfg, args.seed)
    batch = rollout.batch(base.pad_id, base.device)
    weights = torch.linspace(-1.0, 1.0, batch.response_mask.shape[1])  # [T]

    def one(policy) -> tuple[float, float]:
        _, fwd, bwd = timed_update(policy, batch, cfg.temperature, weights)
        policy.model.zero_grad(set_to_none=True)
        return fwd, bwd

    rounds = []
    for r in range(args.repeats):
        out = {}
        for name in (SETTINGS if r % 2 == 0 else SETTINGS[::-1]):
            out[f"{name}_forward"], out[f"{name}_backward"] = one(policies[name])
            out[f"{name}_total"] = out[f"{name}_forward"] + out[f"{name}_backward"]
        rounds.append(out)
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in out.items()), flush=True)
    med = {k: statistics.median(x[k] for x in rounds) for k in rounds[0]}
    saved = [x["torch_total"] - x["sparse_total"] for x in rounds]  # per round, paired
    mean, low, high = t_interval(saved)  # 95%
    commit = current_commit()
    name = builtin_name(args.model) or args.model
    tokens = int(batch.attention_mask.sum())
    rows = [[s, round(med[f"{s}_forward"], 2), round(med[f"{s}_backward"], 2), round(med[f"{s}_total"], 2),
             round(med[f"{s}_total"] / med["torch_total"], 2)] for s in SETTINGS]
    print(f"one update of {args.task} on {name} ({tokens} tokens in the batch, dropout {rate}), "
          f"{torch.get_num_threads()} threads, medians of {args.repeats} rounds")
    for row in rows:
        print(f"{row[0]:<8} forward {row[1]:>6.2f}  backward {row[2]:>6.2f}  total {row[3]:>6.2f}  "
              f"/ torch's {row[4]:.2f}")
    print(f"paired saving of the sparse dropout: {mean:.2f} s per update, 95% interval [{low:.2f}, {high:.2f}]")
    doc = {"section": "speed", "model": name,
           "title": f"the update's LoRA dropout ({rate}): torch's against the sparse draw, {args.task}, "
                    f"{cfg.batch_prompts} x {cfg.num_generations}, {torch.get_num_threads()} threads",
           "command": command("benchmarks.speed.dropout", sys.argv[1:] if argv is None else argv),
           "columns": ["dropout", "forward s", "backward s", "update s", "/ torch's"], "rows": rows,
           "notes": [f"medians of {args.repeats} rounds, the three settings alternated on the same policy and "
                     f"rollout ({tokens} prompt and completion tokens in its rows); {cpu_name()}, load average {load:.2f} before the run",
                     f"paired saving of the sparse draw against torch's: {mean:.2f} s per update "
                     f"(mean of {len(saved)} rounds, 95% interval [{low:.2f}, {high:.2f}] s)",
                     "the masks differ (another random stream), their distribution does not: "
                     "tests/harness/fast/test_dropout.py"],
           "settings": step_settings(cfg, task_args), "modules": kinds, "rounds": rounds, "commit": commit}
    return write_result(args.json, "table", doc)


if __name__ == "__main__":
    main()
