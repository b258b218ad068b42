"""A ceiling for MRTPO's placement: each reward's credit on the tokens that reward is about.

MRTPO places reward k's credit on a response's tokens in proportion to a distance the policy
computes (removing block k). Whether that helps learning depends on two things: whether the
distance lands where reward k is decided (`mrtpo probe` measures that), and whether credit
that lands there helps at all in this setting. This benchmark answers the second question on
toolcall, without the policy: it replaces the replay's distances by indicators of the
response's own structure, read off the text,

- `format`: everything outside the function names, argument names and argument values (the
  tags, the JSON punctuation and keys, any text around the call);
- `schema`: each call's function name and its argument names;
- `correct`: the argument values,

and trains with them exactly as `mrtpo train` trains MRTPO (on GDPO, same settings and seeds
as `benchmarks/learning/learning.py`), so its curves sit beside the stored GRPO / GDPO / MRTPO runs of
that script's output directory. A response with nothing in a reward's spans (no call could be
found) gets that reward's credit uniformly, as MRTPO does for an all-zero distance.

This is a diagnostic, not a method: the spans are hand-written for toolcall's JSON calls. During
the span runs the trainer's replay step (`mrtpo.harness.loop.replay_distances`) is swapped for
`span_distances`, which has its signature; everything else is `mrtpo train` unchanged.

    python benchmarks/experiments/span_placement.py [--seeds 0,1,2] [--lambdas 1] [--threads 1]
        [--out benchmarks/out/learning] [--compare gdpo,mrtpo] [--steps N] [--json PATH]

Runs go to <out>/runs/toolcall/mrtpo-spans[-lambda<L>]/seed<k>/ (resumable, locked, as in
learning.py); the summary compares them with the `--compare` methods' runs found there (or
trains those too when they are missing).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learning"))

import learning  # noqa: E402  (benchmarks/learning/learning.py)

Span = tuple[int, int]

_NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ARGS = re.compile(r'"arguments"\s*:\s*\{')
# one argument: "key": value, where value is a string, number, literal, list or flat object
_ARG = re.compile(r'\s*,?\s*"((?:[^"\\]|\\.)*)"\s*:\s*'
                  r'("(?:[^"\\]|\\.)*"|-?\d[\d.eE+-]*|true|false|null|\[[^\]]*\]|\{[^{}]*\})')


def toolcall_spans(text: str) -> dict[str, list[Span]]:
    """Character spans of `text` that each toolcall reward is about (see the module doc)."""
    schema: list[Span] = []
    correct: list[Span] = []
    for m in _NAME.finditer(text):
        schema.append(m.span(1))
    for m in _ARGS.finditer(text):
        pos = m.end()
        while True:
            a = _ARG.match(text, pos)
            if a is None:
                break
            schema.append(a.span(1))
            correct.append(a.span(2))
            pos = a.end()
    schema.sort()
    taken = sorted(schema + correct)
    fmt: list[Span] = []
    at = 0
    for s, e in taken:
        if s > at:
            fmt.append((at, s))
        at = max(at, e)
    if at < len(text):
        fmt.append((at, len(text)))
    return {"format": fmt, "schema": schema, "correct": correct}


def token_offsets(tokenizer, ids: list[int]) -> list[Span]:
    """Each token's character range in the decoded response (special tokens decode to '')."""
    out, prev = [], 0
    for i in range(len(ids)):
        n = len(tokenizer.decode(ids[: i + 1], skip_special_tokens=True))
        out.append((prev, max(prev, n)))
        prev = max(prev, n)
    return out


def span_distances(policy, task, rollout, scored, temperature: float, credit=None):
    """A stand-in for `mrtpo.harness.distances.replay_distances` with its signature:
    q [N, K, T] = 1 on the tokens of each reward's spans, 0 elsewhere; no forward pass."""
    import torch

    from mrtpo.credit.probe import span_token_mask
    from mrtpo.harness.distances import blocks_for

    t = max(1, rollout.max_length)
    q = torch.zeros(len(rollout.response_ids), len(scored.names), t)  # [N, K, T]
    for i, (ids, text) in enumerate(zip(rollout.response_ids, rollout.responses)):
        offsets = token_offsets(policy.tokenizer, ids)
        empty = [a == b for a, b in offsets]  # decodes to nothing (the end of turn): the format's
        for name, ranges in toolcall_spans(text).items():
            if name not in scored.names:
                continue
            masks = [span_token_mask(offsets, span) for span in ranges]
            hit = [name == "format" if e else any(m[j] for m in masks) for j, e in enumerate(empty)]
            q[i, scored.column(name), :len(hit)] = torch.tensor(hit, dtype=torch.float32)  # [T_i]
    return q, blocks_for(task, rollout, scored)


def paired_changes(curves: dict, base: str, steps: int) -> dict[str, dict[str, list[float]]]:
    """method -> reward -> per seed, (last tenth - first tenth) minus the same of `base` on
    that seed (a seed's first batch is the same for every method, so pairs share a start)."""
    tenth = max(1, steps // 10)

    def change(s: list[float]) -> float:
        v = learning.present(s)
        return learning.nanmean(v[-tenth:]) - learning.nanmean(v[:tenth])

    out: dict[str, dict[str, list[float]]] = {}
    for method, by_key in curves.items():
        if method == base:
            continue
        out[method] = {}
        for key, runs in by_key.items():
            if key == "reward":
                continue
            label = "mean over rewards" if key == "rewards/mean" else key.removeprefix("rewards/").removesuffix("/mean")
            out[method][label] = [change(a) - change(b) for a, b in zip(runs, curves[base][key])]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--lambdas", default="1", help="MRTPO's lambda for the span runs, comma-separated")
    ap.add_argument("--compare", default="gdpo,mrtpo",
                    help="methods of learning.py shown beside; the first is the baseline of the paired differences")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default="benchmarks/out/learning")
    ap.add_argument("--json", default=None, help="also write the summary rows here")
    args = ap.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    import mrtpo.harness.loop as loop
    from mrtpo.models.default import DEFAULT_MODEL, TRAIN_DEFAULTS, resolve_model

    settings = dict(TRAIN_DEFAULTS.get(DEFAULT_MODEL, {}))
    settings.pop("task", None)
    if args.steps:
        settings["steps"] = args.steps
    settings.setdefault("steps", 40)
    settings.update(model=resolve_model(DEFAULT_MODEL), lora=True, save_every=0,
                    log_completions_every=0, eval_every=0)
    seeds = [int(s) for s in args.seeds.split(",")]
    span_methods = []
    for lam in [float(x) for x in args.lambdas.split(",")]:
        name = "mrtpo-spans" if lam == 1 else f"mrtpo-spans-lambda{lam:g}"
        learning.ALL_METHODS[name] = {"advantage": "gdpo", "saw": "off", "mrtpo": True, "mrtpo_lambda": lam}
        span_methods.append(name)
    out = Path(args.out)
    print(f"settings {settings}; seeds {seeds}; load average {os.getloadavg()[0]:.1f}", flush=True)
    t0 = time.perf_counter()
    histories = {m: [learning.run_one(out, "toolcall", m, s, settings) for s in seeds]
                 for m in args.compare.split(",") if m}
    real = loop.replay_distances
    loop.replay_distances = span_distances  # the span runs only
    try:
        histories.update({m: [learning.run_one(out, "toolcall", m, s, settings) for s in seeds]
                          for m in span_methods})
    finally:
        loop.replay_distances = real
    keys = learning.reward_keys([h for hs in histories.values() for h in hs])
    curves = {m: {k: [learning.series(h, k) for h in hs] for k in keys} for m, hs in histories.items()}
    rows = learning.summarise("toolcall", curves, settings["steps"], 0.5)
    base = args.compare.split(",")[0]
    paired = paired_changes(curves, base, settings["steps"]) if base in curves else {}
    for method, by_key in paired.items():
        print(f"\nchange minus {base}'s, per seed ({method}):")
        for key, diffs in by_key.items():
            mean = sum(diffs) / len(diffs)
            print(f"  {key:<18} mean {mean:+.3f}; seeds " + " ".join(f"{d:+.3f}" for d in diffs))
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": settings, "seeds": seeds, "rows": rows,
                                               "paired_change_minus_" + base: paired}, indent=1) + "\n")
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
