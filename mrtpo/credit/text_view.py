"""`mrtpo credit` for a file or a pipe: the text view (`--plain`, its plain layout), and one
JSON document (`--json`).

The terminal view (credit/terminal.py) shades tokens in a table sized to the terminal; piped
into a file it is cut to 80 columns and its token column wraps every few characters. The
plain layout writes lines that read in a file, whatever their length: per completion a
heading, the response once (line breaks shown as marks), then one line per reward (score,
credit, top-80 share, its heaviest tokens with their weights, its block in full), and the
summary as fixed-width columns. `mrtpo credit` picks it when stdout is not a terminal.

`--json` prints one object (schema "mrtpo.credit/1"):

    {"schema": "mrtpo.credit/1", "heading": str, "note": str, "task": str | null, "model": str | null,
     "records": [CreditRecord as a dict: example_id, tokens, response_ids, reward_names, scores,
                 credit, blocks, advantage, offset, feedback, distances, token_weights,
                 token_advantages, prompt, response, step, group, sample, source, name],
     "summary": [{"name", "responses", "located", "mean_score", "mean_credit", "share_mean",
                  "share_min", "share_max", "paper"}]}

(`records` are those shown, none with --quiet; `summary` is over the records read, as in the view.)
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Sequence, TextIO

from mrtpo.credit.records import CreditRecord
from mrtpo.statistics import SHARE, paper_figure, percent, response_top_share, summarize, top_tokens
from mrtpo.credit.terminal import concentration_notes, shown
from mrtpo.textio import strict_json

SCHEMA = "mrtpo.credit/1"


def _fmt(x: float | None, signed: bool = False) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def heaviest(rec: CreditRecord, k: int, n: int = 5) -> str:
    """Reward k's `n` heaviest tokens with their weights, or why there are none."""
    if rec.token_weights is None or rec.distances is None:
        return "(MRTPO off: every token carries the response's advantage)"
    if not any(rec.distances[k]):
        return "(nothing located: credit spread evenly)"
    w = rec.token_weights[k]
    return ", ".join(f"{shown(rec.tokens[t])!r} {w[t]:.2f}" for t in top_tokens(w, n))


def render(out: TextIO, records: Sequence[CreditRecord], *, summary_of: Sequence[CreditRecord] | None = None,
           task: str | None = None, model: str | None = None, heading: str = "", note: str = "") -> None:
    """The plain layout of `records`, then the summary of `summary_of` (default: the same)."""
    def line(text: str = "") -> None:
        out.write(text + "\n")

    if heading:
        line(heading)
    if note:
        line(f"note: {note}")
    names = [n for rec in records for n in rec.reward_names]
    width = max([len(n) for n in names] + [6])
    for rec in records:
        line()
        line(rec.label())
        line(f"response ({rec.num_tokens} tokens): {''.join(shown(t) for t in rec.tokens)}")
        line(f"{'reward':<{width}}  {'score':>6}  {'credit':>7}  {'top80':>6}  heaviest tokens | block")
        for k, name in enumerate(rec.reward_names):
            share = None if rec.distances is None else response_top_share(rec.distances[k])
            block = " ".join(rec.blocks[k].split()) or "(empty)"
            line(f"{name:<{width}}  {_fmt(rec.scores[k]):>6}  {_fmt(rec.credit[k], True):>7}  "
                 f"{percent(share):>6}  {heaviest(rec, k)} | {block}")
    line()
    rows = summarize(records if summary_of is None else summary_of, SHARE)
    line(f"where credit lands: top-{round(100 * SHARE)} token share per reward")
    w = max([len(r.name) for r in rows] + [6])
    line(f"{'reward':<{w}}  {'responses':>9}  {'located':>7}  {'mean score':>10}  {'mean credit':>11}  "
         f"{'top80 share':>11}  {'range':>13}  paper")
    for r in rows:
        rng = "-" if r.share_min is None else f"{percent(r.share_min)}-{percent(r.share_max)}"
        line(f"{r.name:<{w}}  {r.responses:>9}  {r.located:>7}  {_fmt(r.mean_score):>10}  "
             f"{_fmt(r.mean_credit, True):>11}  {percent(r.share_mean):>11}  {rng:>13}  {paper_figure(task, r.name) or ''}")
    for text in concentration_notes(model):
        line(text.plain)


def document(records: Sequence[CreditRecord], *, summary_of: Sequence[CreditRecord] | None = None,
             task: str | None = None, model: str | None = None, heading: str = "", note: str = "") -> dict:
    """The `--json` object (see the module docstring)."""
    rows = summarize(records if summary_of is None else summary_of, SHARE)
    return {"schema": SCHEMA, "heading": heading, "note": note, "task": task, "model": model,
            "records": [r.to_dict() for r in records],
            "summary": [{**asdict(r), "paper": paper_figure(task, r.name)} for r in rows]}


def dumps(doc: dict) -> str:
    """Strict JSON (NaN -> null), one line."""
    return strict_json(doc)
