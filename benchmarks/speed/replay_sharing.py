"""What each kind of sharing buys the replay on completions the policy really samples.

The shared-prefix replay (`mrtpo.replay`) feeds each prompt's common prefix once, and then
three further kinds of sharing, each exact:

- suffixes: context suffixes that begin alike (toolcall: P_without_schema edits P0's tool
  list, the other three contexts keep all of P0) share that beginning (`ReplayOptions.suffixes`);
- tries: the responses that follow one context suffix, and the rows whose context suffix is
  theirs alone (a response-dependent block), are fed as token tries with a tree attention
  mask, a beginning they share once (`ReplayOptions.tries`; off: a row per sequence);
- copies: positions whose distances an item with the same contexts and the same beginning
  already has are copied, not sent through the head and the JS step (`ReplayOptions.copies`);
- trunks (on by default) in place of the one-level suffixes: all items in one group, every
  context suffix nested by the beginnings it shares with others, each encoded once where
  that saves enough tokens (`ReplayOptions.trunks`, `planning.TRUNK_MIN_SAVED`), the rest
  fed as tries.

This samples `--prompts` prompts x `--group-size` completions of the built-in policy (or
`--model`) on `--task`, then times `replay.distances` on them with the sharing switched on
one kind at a time (`settings()`: `ReplayOptions`), alternated in one process, and prints the
tokens fed, the median times, each setting's time against the first one's, and the largest difference in q against the
full-forward method (one forward per context). The last line is the whole change: all sharing
against none of the three. In every setting the prompt's common prefix is fed once and a
row's last token (whose output predicts nothing) not at all.

    python -m benchmarks.speed.replay_sharing [--task toolcall] [--model smollm2-135m] [--prompts 4]
        [--group-size 8] [--max-new-tokens 160] [--temperature 1.0] [-o KEY=VALUE ...]
        [--repeats 6] [--threads 1]

The line after the table splits the replay with all sharing on into its parts: the tokens
fed through the model body (the prompts' common prefixes, timed on their own by
`timing.time_prefixes`, then the context suffixes and the response tokens), and the
vocabulary head and the JS step, timed on their own on as many positions
(`timing.time_head_and_js`: each response token under each distinct context, on the model's
own hidden states there, `timing.replay_hidden`), with the share of the replay each takes, and split into the head, the log-softmax and the JS comparisons
(`timing.time_head_and_js_parts`). The next line times the JS comparisons side by side with
the step as it was before each context's probabilities were shared (one
`js_distance_log_probs` call per comparison) and says what the replay would take with it. The last line but one gives the process's peak resident
memory with the model and the rollout, after one shared replay of the batch (run first) and
after the full-forward method's: what one batch's replay adds on top. On SmolLM2-135M-Instruct (its calls need the task's worked example):

    python -m benchmarks.speed.replay_sharing --model smollm2-135m -o demo=true --prompts 2 \
        --group-size 4 --max-new-tokens 64 --temperature 0.7 --repeats 4
"""
from __future__ import annotations

import argparse
import resource
import statistics
import time

from benchmarks.speed.timing import replay_hidden, time_head_and_js, time_head_and_js_parts, time_prefixes


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="toolcall")
    ap.add_argument("--model", default="smollm2-135m", help="policy (default: the default built-in one)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling and replay temperature")
    ap.add_argument("-o", "--task-option", action="append", default=[], metavar="KEY=VALUE",
                    help="the task's option (repeatable), e.g. -o demo=true")
    ap.add_argument("--repeats", type=int, default=6, help="timed runs of each setting, alternated")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    return ap


def settings() -> dict:
    """Setting name -> the `ReplayOptions` that switch the three kinds of sharing on or off, and
    the last: the defaults, suffixes nested by what they share instead of one level."""
    from mrtpo.replay import ReplayOptions

    return {
        "none of the three": ReplayOptions(suffixes=False, tries=False, copies=False, trunks=False),
        "suffixes": ReplayOptions(suffixes=True, tries=False, copies=False, trunks=False),
        "suffixes + tries": ReplayOptions(suffixes=True, tries=True, copies=False, trunks=False),
        "suffixes + tries + copies": ReplayOptions(suffixes=True, tries=True, copies=True, trunks=False),
        "nested trunks + tries + copies": ReplayOptions(tries=True, copies=True, trunks=True),
    }


def main() -> None:
    args = parser().parse_args()
    import torch

    import mrtpo.replay as replay
    from mrtpo.contexts import build_item
    from mrtpo.harness.policy import load_policy
    from mrtpo.harness.rollout import sample
    from mrtpo.models.builds import resolve_model
    from mrtpo.tasks import get_task
    from mrtpo.tasks.options import OptionSyntaxError, read_options

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    try:
        task = get_task(args.task, **read_options(args.task_option))
    except OptionSyntaxError as exc:
        raise SystemExit(f"-o {exc.item!r}: write KEY=VALUE, e.g. demo=true") from None
    policy = load_policy(resolve_model(args.model), lora=False)
    model = policy.model
    temp = args.temperature
    rollout = sample(policy, task, task.load()[:args.prompts], args.group_size, max_new_tokens=args.max_new_tokens,
                     temperature=temp)
    items = [build_item(task, policy.tokenizer, ex, ids, task.score(ex, text))
             for ex, ids, text in zip(rollout.examples, rollout.response_ids, rollout.responses)]
    options = settings()
    peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # noqa: E731 GB (kB on Linux)
    rss_before = peak()
    replay.distances(model, items, options=options[list(options)[-1]], temperature=temp)  # all sharing first
    rss_shared = peak()
    full = replay.distances(model, items, shared_prefix=False, temperature=temp)  # [N, K, T]
    rss_full = peak()

    def run(name: str):
        t0 = time.perf_counter()
        q = replay.distances(model, items, options=options[name], temperature=temp)  # [N, K, T]
        return (time.perf_counter() - t0, float((q - full).abs().max()),
                replay.replay_tokens(items, model=model, options=options[name]))

    names = list(options)
    results: dict[str, list] = {name: [] for name in names}
    for i in range(args.repeats):
        for name in (names if i % 2 == 0 else names[::-1]):
            results[name].append(run(name))
    n_resp = sum(len(it.response_ids) for it in items)
    print(f"{len(items)} {args.task} completions ({n_resp} response tokens), {args.threads} thread(s); "
          f"full-forward method: {replay.replay_tokens(items, shared_prefix=False)} tokens")
    base = statistics.median(r[0] for r in results[names[0]])
    for name in names:
        med = statistics.median(r[0] for r in results[name])
        print(f"{name:>26}: {results[name][0][2]:6d} tokens, median {med:.3f} s of {args.repeats} "
              f"({med / base:.2f}x), max |dq| vs full {max(r[1] for r in results[name]):.1e}")
    last = statistics.median(r[0] for r in results[names[-1]])
    states = replay_hidden(model, items)  # the model's own hidden states: real distributions for the JS step
    head_js = statistics.median(time_head_and_js(model, items, temperature=temp, states=states)
                                for _ in range(args.repeats))
    parts = [time_head_and_js_parts(model, items, temperature=temp, states=states) for _ in range(args.repeats)]
    part = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
    prefix_s, prefix_tokens = min(time_prefixes(model, items) for _ in range(args.repeats))
    fed = results[names[-1]][0][2]
    body = max(last - head_js, 0.0)
    positions = sum(len(replay.plan_item(it, n).contexts) * len(it.response_ids) for n, it in enumerate(items))
    print(f"parts, all sharing: model body {fed} tokens fed {body:.3f} s ({body / last:.0%}), of which the "
          f"prompts' common prefixes ({prefix_tokens} tokens) {prefix_s:.3f} s and the context suffixes and "
          f"response tries ({fed - prefix_tokens} tokens) {max(body - prefix_s, 0.0):.3f} s; vocabulary head + JS "
          f"step on {positions} positions (each of the {n_resp} response tokens under each distinct context) "
          f"{head_js:.3f} s ({head_js / last:.0%}): head {part['head']:.3f} s, log-softmax "
          f"{part['log_softmax']:.3f} s, JS {part['js']:.3f} s; vocabulary {model.config.vocab_size}")
    print(f"JS step, timed side by side: each context's probabilities once (landed) {part['js']:.3f} s, one "
          f"js_distance_log_probs call per comparison (before) {part['js_pairwise']:.3f} s "
          f"({part['js'] / part['js_pairwise']:.2f}x); the replay with all sharing {last:.3f} s would take "
          f"{last - part['js'] + part['js_pairwise']:.3f} s with the step as before "
          f"({last / (last - part['js'] + part['js_pairwise']):.2f}x)")
    print(f"peak RSS: {rss_before:.2f} GB with the model and the rollout; the shared replay (all sharing, run "
          f"first) raised it to {rss_shared:.2f} GB (+{rss_shared - rss_before:.2f}), the full-forward method then to "
          f"{rss_full:.2f} GB")
    print(f"all sharing / none of the three: {last / base:.2f}x time, "
          f"{results[names[-1]][0][2] / results[names[0]][0][2]:.2f}x tokens")


if __name__ == "__main__":
    main()
