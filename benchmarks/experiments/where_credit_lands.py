"""Where does each reward's credit land on the policy's own samples, and is it that reward's?

The paired one-step test found MRTPO's update no better than GDPO's, while shuffling its
weights made the update worse. This script measures why, on the completions an MRTPO run
trained on (its completions log: every token's distance and weight per reward), before any
change to the method:

- **by kind of token**: each reward's share of its weight (weights average 1 per response, so
  the share of the weight is the share of the distance) on each kind of token, beside the kind's
  share of the tokens, and their ratio (the lift: 1 = no preference). text2sql's kinds are the
  fence, SQL keywords, names (tables, columns, aliases), literals, punctuation and operators, and
  text outside the fence; toolcall's are the tags, the JSON keys, the function name, argument
  names, argument values, punctuation, and text outside the tags. Style and format tokens
  taking every reward's weight would be RLCSD's finding (arXiv 2606.11709);
- **overlap between rewards**: the mean, over responses, of the Pearson correlation of two
  rewards' distances over the tokens. Near 1: the rewards' credit lands on the same tokens, so
  placement cannot be reward-specific whatever the blocks say;
- **collapse** (ARCA, arXiv 2606.00257): the weights' Gini coefficient and effective-token
  ratio per reward (near-even weights, or a few tokens);
- **scale**: each reward's mean raw distance beside the largest reward's. Mean-1 normalisation
  gives a reward with tiny distances a full response's worth of weight wherever they peak;
  a tiny scale that overlaps another reward's is weight placed on that reward's signal.

It trains the run itself (`mrtpo train --lora` through the CLI, MRTPO, every completion logged:
a step that logs replays every reward on every completion, credited or not, so a reward rarely
credited, like text2sql's `result`, is measured too) unless --run names one:

    python -m benchmarks.experiments.where_credit_lands --model smollm2-135m --task text2sql \\
        -o demo=true -o questions=single-table --steps 6 --threads 1 \\
        --json benchmarks/results/where-credit-lands-text2sql-smollm2-135m.json

The results file is a `mrtpo.table/1` table for the results page (section "one-step").
Nothing is asserted: these are measured figures.
"""
from __future__ import annotations

import argparse
import math
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.lib.results import command, declared, write_result

# ------------------------------------------------------------------------------ kinds of token
SQL_KEYWORDS = frozenset("""
select from where and or not in is null like between group by order having limit offset as on join
inner left right outer cross natural distinct count sum avg min max asc desc union all intersect except
case when then else end exists cast coalesce ifnull lower upper length substr round abs date strftime
""".split())
TEXT2SQL_KINDS = ("fence", "keyword", "name", "literal", "punct", "outside")
TOOLCALL_KINDS = ("tags", "json key", "function", "argument name", "argument value", "punct", "outside")
KINDS = {"text2sql": TEXT2SQL_KINDS, "toolcall": TOOLCALL_KINDS}

_FENCE = re.compile(r"```[a-zA-Z]*\n?|```")
_SQL_TOKEN = re.compile(r"'(?:[^']|'')*'?|\"[^\"]*\"?|\d+(?:\.\d+)?|[A-Za-z_][A-Za-z_0-9]*|\S")
_TAG = re.compile(r"</?tool_call>")
_JSON_TOKEN = re.compile(r"\"(?:[^\"\\]|\\.)*\"?|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|true|false|null|\S")


def sql_kinds(text: str) -> list[str]:
    """The kind of each character of a text2sql response (whitespace: '' ): the fence markers,
    and inside the fence keywords, names, literals and punctuation; everything outside the
    first fenced block is 'outside'."""
    kinds = ["outside"] * len(text)
    fences = list(_FENCE.finditer(text))
    if not fences:
        return [k if not c.isspace() else "" for k, c in zip(kinds, text)]
    start = fences[0].end()
    end = fences[1].start() if len(fences) > 1 else len(text)
    for m in fences[:2]:
        kinds[m.start():m.end()] = ["fence"] * (m.end() - m.start())
    for m in _SQL_TOKEN.finditer(text, start, end):
        word = m.group()
        if word[0] in "'\"" or word[0].isdigit():
            kind = "literal"
        elif word[0].isalpha() or word[0] == "_":
            kind = "keyword" if word.lower() in SQL_KEYWORDS else "name"
        else:
            kind = "punct"
        kinds[m.start():m.end()] = [kind] * (m.end() - m.start())
    return [k if not c.isspace() else "" for k, c in zip(kinds, text)]


def toolcall_kinds(text: str) -> list[str]:
    """The kind of each character of a toolcall response (whitespace: ''): the <tool_call> tags,
    and between them JSON keys ("name", "arguments"), the function name, argument names and
    values, and punctuation; everything outside the tags is 'outside'."""
    kinds = ["outside"] * len(text)
    tags = list(_TAG.finditer(text))
    for m in tags:
        kinds[m.start():m.end()] = ["tags"] * (m.end() - m.start())
    start = tags[0].end() if tags else len(text)
    end = tags[1].start() if len(tags) > 1 else len(text)
    depth, in_args, last_key = 0, False, None
    for m in _JSON_TOKEN.finditer(text, start, end):
        tok = m.group()
        after = text[m.end():end].lstrip()[:1]
        if tok in "{[":
            depth += 1
            kind = "punct"
        elif tok in "}]":
            depth -= 1
            if depth <= 1:
                in_args = False
            kind = "punct"
        elif tok[0] == '"' and after == ":":  # a key
            key = tok.strip('"')
            if depth >= 2 and in_args:
                kind = "argument name"
            else:
                kind, last_key = "json key", key
                in_args = key in ("arguments", "parameters")
        elif len(tok) == 1 and not tok.isalnum():
            kind = "punct"
        else:  # a value
            kind = "argument value" if in_args and depth >= 2 else "function" if last_key == "name" else "argument value"
        kinds[m.start():m.end()] = [kind] * (m.end() - m.start())
    return [k if not c.isspace() else "" for k, c in zip(kinds, text)]


CHAR_KINDS = {"text2sql": sql_kinds, "toolcall": toolcall_kinds}


def token_kinds(tokens: list[str], char_kinds: list[str]) -> list[str]:
    """The kind of each token: that of its first character that is not whitespace ('space' for
    a token of whitespace only). `tokens` decoded one by one, in order, concatenate to the
    text `char_kinds` describes (a token that does not line up is 'outside')."""
    kinds, at = [], 0
    for tok in tokens:
        span = char_kinds[at:at + len(tok)]
        at += len(tok)
        first = next((k for k in span if k), None)
        kinds.append(first if first is not None else ("space" if tok and not tok.strip() else "outside"))
    return kinds


# ------------------------------------------------------------------------------ figures
def _pearson(a: list[float], b: list[float]) -> float | None:
    n = len(a)
    if n < 2:
        return None
    ma, mb = sum(a) / n, sum(b) / n
    va = sum((x - ma) ** 2 for x in a)
    vb = sum((y - mb) ** 2 for y in b)
    if va <= 0 or vb <= 0:
        return None
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / math.sqrt(va * vb)


def _concentration(q: list[float]) -> tuple[float | None, float | None]:
    """(Gini, effective-token ratio) of one response's distances for one reward, as the trainer
    logs them (mrtpo.statistics); None where they are all zero."""
    import torch

    from mrtpo.statistics import effective_token_ratio, gini

    d, mask = torch.tensor([[q]], dtype=torch.float64), torch.ones(1, len(q))  # [1, 1, T], [1, T]
    g, e = gini(d, mask)[0, 0].item(), effective_token_ratio(d, mask)[0, 0].item()
    return (None if math.isnan(g) else g), (None if math.isnan(e) else e)


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(xs) / len(xs) if xs else None


def figures(records: list, task: str) -> dict:
    """Per reward: responses, mean raw distance, Gini, effective-token ratio and the weight's
    share per kind of token; per kind, its share of the tokens; per pair of rewards, the mean
    correlation of their distances over a response's tokens. A (response, reward) whose
    distances are all 0 (an empty block: text2sql's `executes` has one only for a query that
    fails) is left out."""
    kinds = KINDS.get(task, ()) + ("space",)
    names = list(records[0].reward_names) if records else []
    per = {k: {"responses": 0, "scale": [], "gini": [], "effective": [], "share": {c: [] for c in kinds}}
           for k in names}
    token_share = {c: [] for c in kinds}
    pairs = {(a, b): [] for i, a in enumerate(names) for b in names[i + 1:]}
    for rec in records:
        if not rec.distances or not rec.tokens:
            continue
        text_kinds = CHAR_KINDS[task]("".join(rec.tokens)) if task in CHAR_KINDS else None
        tk = token_kinds(rec.tokens, text_kinds) if text_kinds is not None else ["outside"] * len(rec.tokens)
        t = len(tk)
        for c in kinds:
            token_share[c].append(sum(1 for x in tk if x == c) / t)
        live = {}
        for name, q in zip(rec.reward_names, rec.distances):
            q = [max(0.0, float(x)) for x in q[:t]]
            total = sum(q)
            if total <= 0:
                continue
            live[name] = q
            f = per[name]
            f["responses"] += 1
            f["scale"].append(total / t)
            g, e = _concentration(q)
            f["gini"].append(g)
            f["effective"].append(e)
            for c in kinds:
                f["share"][c].append(sum(x for x, kind in zip(q, tk) if kind == c) / total)
        for (a, b), rs in pairs.items():
            if a in live and b in live:
                rs.append(_pearson(live[a], live[b]))
    tokens = {c: _mean(v) for c, v in token_share.items()}
    rewards = []
    for name, f in per.items():
        shares = {c: _mean(v) for c, v in f["share"].items()}
        rewards.append({"reward": name, "responses": f["responses"], "scale": _mean(f["scale"]),
                        "gini": _mean(f["gini"]), "effective_token_ratio": _mean(f["effective"]),
                        "share": shares,
                        "lift": {c: (shares[c] / tokens[c]) if shares[c] is not None and tokens[c] else None
                                 for c in kinds}})
    return {"kinds": list(kinds), "token_share": tokens, "rewards": rewards,
            "correlation": [{"a": a, "b": b, "mean": _mean(rs), "responses": len([r for r in rs if r is not None])}
                            for (a, b), rs in pairs.items()],
            "responses": sum(1 for r in records if r.distances)}


def table_doc(fig: dict, task: str, model: str, command: str, steps: list[int]) -> dict:
    """The figures as a `mrtpo.table/1` file: a row per reward (and one for the tokens)."""
    kinds = [c for c in fig["kinds"] if (fig["token_share"].get(c) or 0) > 0]
    pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"  # noqa: E731
    rows = [["(tokens)", "", "", "", ""] + [pct(fig["token_share"][c]) for c in kinds]]
    largest = max((r["scale"] or 0 for r in fig["rewards"]), default=0) or 1.0
    for r in fig["rewards"]:
        cells = [f"{pct(r['share'][c])} ({r['lift'][c]:.1f}x)" if r["lift"][c] is not None else "-" for c in kinds]
        rows.append([r["reward"], r["responses"],
                     "-" if r["scale"] is None else f"{r['scale']:.3f} ({r['scale'] / largest:.2f})",
                     "-" if r["gini"] is None else f"{r['gini']:.2f}",
                     "-" if r["effective_token_ratio"] is None else f"{r['effective_token_ratio']:.2f}"] + cells)
    corr = "; ".join(f"{c['a']}-{c['b']} {c['mean']:+.2f}" for c in fig["correlation"] if c["mean"] is not None)
    return declared("table", {"section": "one-step",
            "title": f"Where each reward's weight lands on the policy's own samples, {task}",
            "model": model, "command": command,
            "columns": ["reward", "responses", "mean distance (of largest)", "Gini", "effective tokens"]
                       + [f"{c}: weight (lift)" for c in kinds],
            "rows": rows,
            "notes": [f"{fig['responses']} completions an MRTPO run trained on (steps {min(steps)}-{max(steps)}), "
                      "each reward's weight share per kind of token beside the kind's share of the tokens; lift = "
                      "weight share / token share (1: no preference)",
                      f"correlation of two rewards' distances over a response's tokens (mean over responses): {corr}"],
            "figures": fig})


# ------------------------------------------------------------------------------ main
def train_run(args, run_dir: Path) -> None:
    """An MRTPO run with every completion logged, through the CLI (a fresh process)."""
    cmd = [sys.executable, "-m", "mrtpo", "train", "--lora", "--mrtpo", "--model", args.model, "--task", args.task,
           "--steps", str(args.steps), "--seed", str(args.seed), "--log-completions-every", "1",
           "--output-dir", str(run_dir)]
    for opt in args.options:
        cmd += ["-o", opt]
    from mrtpo.harness.config import field_default
    from mrtpo.models.builtin import EXPERIMENT_DEFAULTS, builtin_name

    # a built-in policy trains as the recorded experiments had it, not with the first command's
    # defaults (mrtpo train's for it): those settings are passed, and the trainer's held-out count
    pinned = EXPERIMENT_DEFAULTS.get(builtin_name(args.model) or "", {})
    for flag, key, value in (("--lr", "lr", args.lr), ("--batch-prompts", "batch_prompts", args.batch_prompts),
                             ("--num-generations", "num_generations", args.num_generations),
                             ("--max-new-tokens", "max_new_tokens", args.max_new_tokens),
                             ("--temperature", "temperature", None)):
        value = value if value is not None else pinned.get(key)
        if value is not None:
            cmd += [flag, str(value)]
    if pinned:
        cmd += ["--heldout", str(field_default("heldout"))]
    env = None
    if args.threads:
        import os

        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    print("running:", shlex.join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", default=None, help="an MRTPO run with its completions logged (default: train one)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--task", default="text2sql")
    ap.add_argument("-o", "--task-option", dest="options", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=None, help="(default: the model's settings in the recorded experiments)")
    ap.add_argument("--batch-prompts", type=int, default=None)
    ap.add_argument("--num-generations", type=int, default=None)
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default="benchmarks/out/where-credit-lands")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from mrtpo.credit.records import read_run
    t0 = time.perf_counter()
    run_dir = Path(args.run) if args.run else Path(args.out) / args.task / f"seed{args.seed}"
    if args.run is None and not (run_dir / "completions.jsonl").is_file():
        train_run(args, run_dir)
    view = read_run(run_dir)
    records = [r for s in view.steps for r in read_run(run_dir, step=s).records]
    task = view.task or args.task
    if not view.mrtpo or not any(r.distances for r in records):
        raise SystemExit(f"{run_dir}: the run logged no distances (train it with MRTPO on)")
    fig = figures(records, task)
    doc = table_doc(fig, task, view.model or args.model,
                    command("benchmarks.experiments.where_credit_lands", sys.argv[1:] if argv is None else argv,
                            quoted=True), view.steps)
    print(f"\n== {doc['title']} ({fig['responses']} completions)")
    for row in [doc["columns"], *doc["rows"]]:
        print(" | ".join(str(c) for c in row))
    print(doc["notes"][1])
    out = Path(args.json) if args.json else Path(args.out) / f"where-credit-lands-{task}.json"
    doc = write_result(out, "table", doc, strict=True)
    print(f"results: {out}; {time.perf_counter() - t0:.0f} s")
    return doc


if __name__ == "__main__":
    main()
