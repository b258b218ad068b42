"""Replay cost on text-to-SQL-shaped inputs: one forward per context vs the shared prefix.

Shape: a schema prompt of about 600 tokens, 3 blocks of about 30 tokens (the format
rule and the reference query, response-independent; the response's SQLite error,
response-dependent), G = 8 responses of about 120 tokens, a random-initialised Qwen2 (4
layers, 256 wide, vocabulary about 8,000) with a byte-level BPE tokenizer trained here, so
nothing is downloaded. Both methods replay the same `ReplayItem`s built by mrtpo.contexts;
the full-forward one pads every row on the left and keeps the last T + 1 logits, as trainers do.

    python -m benchmarks.speed.replay [--quick] [--repeats N] [--groups B] [--threads N]
        [--device cuda] [--dtype bfloat16]

Last line: `replay speedup S.SSx over one-forward-per-context (ideal I.IIx from token counts),
max |dq| D`, where ideal is the ratio of tokens fed through the model (padding excluded) and
D the largest difference between the two methods' distances. On a shared machine, compare
runs by the load average printed with them.

The line before it splits the time: both methods also run the vocabulary head and the JS
step on the same positions (each response token under each distinct context), work that
sharing a prefix cannot reduce. It is timed on its own (`mrtpo.replay.head_and_js` on as
many positions) and taken off both totals, which gives the speedup of the
model body alone against the same ideal.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import torch

from benchmarks.speed.timing import time_head_and_js
from mrtpo.contexts import build_item
from mrtpo.models.tiny import build_model, train_tokenizer
from mrtpo.replay import distances, replay_tokens
from mrtpo.tasks.base import Example, Reward, Task, Verdict

WORDS = ("singer concert stadium album track artist genre invoice customer employee order product "
         "supplier category region country city address payment shipment warehouse course student "
         "teacher department salary project budget flight airport airline ticket booking hotel room "
         "guest review rating movie director actor studio award season episode player team match "
         "score league coach injury contract transfer").split()
TYPES = ["INTEGER", "TEXT", "REAL", "DATE", "VARCHAR(255)", "NUMERIC(10, 2)"]
FORMAT_RULE = "Format: exactly one SQL statement in one ```sql code block, with nothing after it."


def _vocabulary(rng: random.Random, n: int) -> list[str]:
    """Made-up identifiers (syllable strings), so the tokenizer learns a realistic-size vocabulary."""
    syll = [a + b for a in "bcdfghklmnprstvz" for b in "aeiou"]
    return sorted({"".join(rng.choice(syll) for _ in range(rng.randint(2, 4))) for _ in range(n)})


def _schema(rng: random.Random, n_tables: int) -> str:
    tables = []
    for _ in range(n_tables):
        name = rng.choice(WORDS)
        cols = [f"  {name}_id INTEGER PRIMARY KEY"]
        cols += [f"  {rng.choice(WORDS)}_{rng.choice(WORDS)} {rng.choice(TYPES)}" for _ in range(rng.randint(4, 7))]
        other = rng.choice(WORDS)
        cols.append(f"  FOREIGN KEY ({other}_id) REFERENCES {other}({other}_id)")
        tables.append(f"CREATE TABLE {name} (\n" + ",\n".join(cols) + "\n);")
    return "\n\n".join(tables)


def _query(rng: random.Random, n_terms: int) -> str:
    a, b = rng.choice(WORDS), rng.choice(WORDS)
    conds = " AND ".join(f"{a}.{rng.choice(WORDS)}_{rng.choice(WORDS)} > {rng.randint(1, 999)}" for _ in range(n_terms))
    return (f"SELECT {a}.{rng.choice(WORDS)}_{rng.choice(WORDS)}, count(*) FROM {a} JOIN {b} ON "
            f"{a}.{b}_id = {b}.{b}_id WHERE {conds} GROUP BY {a}.{a}_id ORDER BY 2 DESC LIMIT 10")


def _gold(rng: random.Random) -> str:
    a = rng.choice(WORDS)
    return f"SELECT count(*) FROM {a} WHERE {a}.{rng.choice(WORDS)}_{rng.choice(WORDS)} > {rng.randint(1, 99)}"


class BenchSQLTask(Task):
    """Text-to-SQL-shaped task: format rule, reference query and SQLite error as blocks."""

    name = "bench-sql"
    placement = "append"

    def rewards(self, example: Example) -> list[Reward]:
        return [
            Reward("format", lambda e, r: Verdict(0.0), lambda e, v: FORMAT_RULE),
            Reward("reference", lambda e, r: Verdict(0.0),
                   lambda e, v: "A correct query: " + e.data["gold"]),
            Reward("execution", lambda e, r: Verdict(0.0, r), lambda e, v: f"SQLite error: {v.feedback}",
                   response_dependent=True),
        ]


def build_inputs(groups: int, group_size: int, seed: int = 0):
    rng = random.Random(seed)
    made_up = _vocabulary(rng, 6000)
    corpus = [_schema(rng, 6) for _ in range(300)] + [_query(rng, 3) for _ in range(600)]
    corpus += [" ".join(rng.sample(WORDS, 12)) for _ in range(400)]
    corpus += [" ".join(made_up[i:i + 20]) for i in range(0, len(made_up), 20)]
    tokenizer = train_tokenizer(corpus, vocab_size=8000, min_frequency=1)
    model = build_model(tokenizer, arch="qwen2", hidden_size=256, num_layers=4, num_heads=4,
                        num_kv_heads=2, intermediate_size=1024, seed=seed)
    # weights of std 0.05 (not 0.02): the contexts then move the next-token distributions as
    # much as in a trained model (q around 0.05-0.15), so max |dq| is measured where it matters
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    task = BenchSQLTask()
    items = []
    for g in range(groups):
        schema = _schema(rng, 6)
        question = f"How many {rng.choice(WORDS)} records have a {rng.choice(WORDS)} above the average?"
        prompt = f"Database schema:\n\n{schema}\n\nQuestion: {question}\n\n{FORMAT_RULE}"
        ex = Example(id=f"bench-{g}", prompt=prompt, system="You are a careful SQL assistant.",
                     data={"gold": _gold(rng)})
        for _ in range(group_size):
            text = "```sql\n" + "\n".join(_query(rng, 2) for _ in range(3)) + "\n```"
            response = tokenizer(text, add_special_tokens=False)["input_ids"][:rng.randint(110, 130)]
            error = f"no such column: {rng.choice(WORDS)}_{rng.choice(WORDS)} near line {rng.randint(1, 9)}"
            items.append(build_item(task, tokenizer, ex, response, [Verdict(0.0), Verdict(0.0), Verdict(0.0, error)]))
    return tokenizer, model, items


def _time_pair(fn_a, fn_b, repeats: int):
    """Alternate the two methods and keep each one's fastest run: on a shared machine the
    minimum is the run least disturbed by other processes. Also returns the medians."""
    times_a, times_b, out_a, out_b = [], [], None, None
    for _ in range(repeats):
        t = time.perf_counter()
        out_a = fn_a()
        times_a.append(time.perf_counter() - t)
        t = time.perf_counter()
        out_b = fn_b()
        times_b.append(time.perf_counter() - t)
    return (min(times_a), statistics.median(times_a), out_a), (min(times_b), statistics.median(times_b), out_b)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two timed runs per method (< 40 s on 2 cores)")
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per method (fastest reported)")
    ap.add_argument("--groups", type=int, default=1, help="prompts, each with G responses")
    ap.add_argument("--group-size", type=int, default=8, help="G, responses per prompt")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads (0: torch's default, or 1 when other processes keep the CPUs "
                         "busy: two OpenMP threads sharing busy cores wait on each other at every op)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 ...")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--batch-tokens", type=int, default=4096,
                    help="padded tokens per forward, both methods (4096: the full-forward method's fastest "
                         "on a 2-core CPU among 1k-16k)")
    return ap


def main() -> None:
    ap = parser()
    args = ap.parse_args()
    busy = os.getloadavg()[0]
    if args.threads:
        torch.set_num_threads(args.threads)
    elif busy >= 1.0 and torch.get_num_threads() > 1:
        torch.set_num_threads(1)
        print(f"load average {busy:.2f} before the run: using 1 torch thread (pass --threads N to override)")
    repeats = 2 if args.quick else args.repeats
    t0 = time.perf_counter()
    tokenizer, model, items = build_inputs(args.groups, args.group_size)
    model = model.to(args.device, getattr(torch, args.dtype))
    setup = time.perf_counter() - t0
    ctx = [len(c) for it in items for c in it.context_ids]
    resp = [len(it.response_ids) for it in items]
    print(f"inputs: {len(items)} responses x {len(items[0].context_ids)} contexts, context tokens "
          f"{min(ctx)}-{max(ctx)}, response tokens {min(resp)}-{max(resp)}, vocabulary {len(tokenizer)}, "
          f"setup {setup:.1f} s")
    print(f"machine: {args.device} ({args.dtype}), {torch.get_num_threads()} torch threads, load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    bt = args.batch_tokens
    tok_full = replay_tokens(items, shared_prefix=False)
    tok_shared = replay_tokens(items, shared_prefix=True, batch_tokens=bt, model=model)  # as distances feeds it
    def synced(**kw):
        def run():
            q = distances(model, items, batch_tokens=bt, **kw)
            if q.is_cuda:
                torch.cuda.synchronize()
            return q
        return run

    full_fn = synced(shared_prefix=False, padding_side="left")
    shared_fn = synced(shared_prefix=True)
    shared_fn()  # warm-up (allocator, kernels), not timed
    (t_full, med_full, q_full), (t_shared, med_shared, q_shared) = _time_pair(full_fn, shared_fn, repeats)
    d = (q_full - q_shared).abs().max().item()
    ideal = tok_full / tok_shared
    t_fixed = min(time_head_and_js(model, items) for _ in range(repeats))
    print(f"full:   {t_full:.3f} s (median {med_full:.3f} s of {repeats}), {tok_full} tokens")
    print(f"shared: {t_shared:.3f} s (median {med_shared:.3f} s of {repeats}), {tok_shared} tokens")
    print(f"q: mean {q_full.mean().item():.4f}, max {q_full.max().item():.4f}; "
          f"{100 * t_full / t_shared / ideal:.0f}% of ideal; load average now "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    body = (t_full - t_fixed) / max(1e-9, t_shared - t_fixed)
    print(f"head + JS step (the same work in both): {t_fixed:.3f} s; model body alone: full "
          f"{t_full - t_fixed:.3f} s, shared {t_shared - t_fixed:.3f} s, speedup {body:.2f}x = "
          f"{100 * body / ideal:.0f}% of ideal")
    print(f"replay speedup {t_full / t_shared:.2f}x over one-forward-per-context "
          f"(ideal {ideal:.2f}x from token counts), max |dq| {d:.1e}")


if __name__ == "__main__":
    main()
