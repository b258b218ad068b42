"""The replay with and without sharing the beginnings of context suffixes (`replay._clusters`).

On toolcall, P_without_schema edits P0's tool list, so the prefix that all four contexts of a
prompt share is short; the three contexts that keep all of P0 share it after that prefix,
and the replay encodes that part once. This samples completions of the built-in policy (or
`--model`) for `--prompts` toolcall prompts x `--group-size`, then times `replay.distances`
on them with the sharing on and off (off: every suffix alone, as before), alternated in one
process, and prints the tokens fed, the median times and the largest difference in q.

    python benchmarks/replay_clusters.py [--model mrtpo-tiny] [--prompts 4] [--group-size 8]
        [--repeats 6] [--threads 1]
"""
from __future__ import annotations

import argparse
import statistics
import time


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mrtpo-tiny", help="policy (default: the built-in one)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--repeats", type=int, default=6, help="timed runs of each, alternated")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    return ap


def main() -> None:
    args = parser().parse_args()
    import torch

    import mrtpo.replay as replay
    from mrtpo.contexts import build_item
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import sample
    from mrtpo.models.default import resolve_model
    from mrtpo.tasks import get_task

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    task = get_task("toolcall")
    policy = load_policy(resolve_model(args.model), lora=False)
    rollout = sample(policy, task, task.load()[:args.prompts], args.group_size, max_new_tokens=args.max_new_tokens)
    items = [build_item(task, policy.tokenizer, ex, ids, task.score(ex, text))
             for ex, ids, text in zip(rollout.examples, rollout.response_ids, rollout.responses)]
    shared = replay._clusters

    def alone(branches, min_shared: int = 16):
        return [([], [b]) for b in range(len(branches))]

    def run(on: bool):
        replay._clusters = shared if on else alone
        t0 = time.perf_counter()
        q = replay.distances(policy.model, items)  # [N, K, T]
        return time.perf_counter() - t0, q, replay.replay_tokens(items)

    results: dict[bool, list] = {True: [], False: []}
    for i in range(args.repeats):
        for on in ((True, False) if i % 2 == 0 else (False, True)):
            results[on].append(run(on))
    replay._clusters = shared
    print(f"{len(items)} toolcall completions ({sum(len(it.response_ids) for it in items)} response tokens), "
          f"{args.threads} thread(s)")
    for on in (True, False):
        print(f"suffix beginnings {'shared' if on else 'alone '}: {results[on][0][2]} tokens, "
              f"median {statistics.median(r[0] for r in results[on]):.3f} s of {args.repeats}")
    print(f"max |dq| {float((results[True][0][1] - results[False][0][1]).abs().max()):.1e}")


if __name__ == "__main__":
    main()
