"""The terminal view: per completion, one line per reward with its tokens shaded by weight.

Each reward's line shows its score, its credit (its share of the response's advantage), the
response's tokens with a background as strong as the token's weight for that reward (its
largest weight = full colour; green where the credit is positive, red where negative, blue
where it is zero), the top-80 share, the block and the three heaviest tokens. The last
column repeats the shading in words, so a terminal without colour (or a pipe) loses
nothing but the picture. A summary table closes the view.
"""
from __future__ import annotations

from typing import Sequence

from rich.console import Console, Group
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from mrtpo.credit.records import CreditRecord
from mrtpo.statistics import (ALL, PAPER_NOTE, SHARE, paper_figure, percent, response_top_share,
                                     summarize, top_tokens)

# five shades per sign of credit, light to strong (ColorBrewer Greens / Reds / Blues)
SHADES = {
    1: ["#e5f5e0", "#c7e9c0", "#74c476", "#31a354", "#006d2c"],
    -1: ["#fee0d2", "#fcbba1", "#fb6a4a", "#de2d26", "#a50f15"],
    0: ["#deebf7", "#c6dbef", "#6baed6", "#3182bd", "#08519c"],
}
BLOCK_WIDTH = 40


_MARKS = {"\r": "\u240d", "\n": "\u21b5", "\t": "\u2192"}


def shown(token: str) -> str:
    """A token as one line shows it: line breaks and tabs as visible marks, other control
    characters escaped (a sampled byte can be one; a terminal would obey it), empty as a dot."""
    if token == "":
        return "\u00b7"
    return "".join(_char(c) for c in token)


def _char(c: str) -> str:
    if c in _MARKS:
        return _MARKS[c]
    if c.isprintable():
        return c
    return f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}"


def sign(x: float, eps: float = 1e-9) -> int:
    return 0 if abs(x) <= eps else (1 if x > 0 else -1)


EVEN = 0.2  # the shade of a reward with nothing located: its credit is spread evenly


def intensities(weights: Sequence[float]) -> list[float]:
    """Each token's weight as a share of the reward's largest weight on this response, in [0, 1]."""
    top = max(weights, default=0.0)
    return [max(0.0, w) / top if top > 0 else 0.0 for w in weights]


def levels(rec: CreditRecord, k: int) -> list[float]:
    """How strongly to shade each token for reward k, in [0, 1]: its weight relative to the
    heaviest token; a light even tint where the distances are all zero (an empty block: the
    credit is spread evenly); nothing when the record has no weights (MRTPO off)."""
    if rec.token_weights is None:
        return [0.0] * rec.num_tokens
    if rec.distances is not None and not any(rec.distances[k]):
        return [EVEN] * rec.num_tokens
    return intensities(rec.token_weights[k])


def shade_style(level: float, credit_sign: int) -> str:
    """A rich style for a token at `level` in [0, 1]: none below 5%, then five steps of colour."""
    if level < 0.05:
        return ""
    i = min(4, int(level * 5))
    fg = "white" if i >= 3 else "black"
    return f"{fg} on {SHADES[credit_sign][i]}"


def token_line(rec: CreditRecord, k: int) -> Text:
    """The response's tokens, each shaded by its weight for reward k."""
    text = Text()
    s = sign(rec.credit[k])
    for tok, level in zip(rec.tokens, levels(rec, k)):
        text.append(shown(tok), style=shade_style(level, s))
    return text


def _fmt(x: float | None, signed: bool = False) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def _one_line(text: str, width: int = BLOCK_WIDTH) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[:width - 1] + "\u2026"


def top_words(rec: CreditRecord, k: int, n: int = 3) -> str:
    """The `n` heaviest tokens of reward k with their weights ("" when nothing is located)."""
    if rec.token_weights is None or rec.distances is None or not any(rec.distances[k]):
        return ""
    w = rec.token_weights[k]
    return ", ".join(f"{shown(rec.tokens[t])!r} {w[t]:.1f}" for t in top_tokens(w, n))


def record_table(rec: CreditRecord) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, expand=True, header_style="bold")
    table.add_column("reward", no_wrap=True)
    table.add_column("score", justify="right", no_wrap=True)
    table.add_column("credit", justify="right", no_wrap=True)
    table.add_column("top80", justify="right", no_wrap=True)
    table.add_column("response, shaded by weight", ratio=1, overflow="fold")
    table.add_column("block / heaviest tokens", width=BLOCK_WIDTH)
    for k, name in enumerate(rec.reward_names):
        share = None if rec.distances is None else response_top_share(rec.distances[k])
        block = _one_line(rec.blocks[k]) if rec.blocks[k].strip() else "(empty)"
        heavy = top_words(rec, k)
        side = Text(block, style="dim" if not rec.blocks[k].strip() else "", no_wrap=True, overflow="ellipsis")
        if heavy:
            side.append("\n" + heavy, style="italic")
        table.add_row(name, _fmt(rec.scores[k]), _fmt(rec.credit[k], signed=True), percent(share),
                      token_line(rec, k), side)
    return table


def summary_table(records: Sequence[CreditRecord], task: str | None = None, share: float = SHARE) -> Table:
    rows = summarize(records, share)
    title = f"where credit lands: top-{round(100 * share)} token share per reward"
    table = Table(title=title, box=None, pad_edge=False, header_style="bold", title_justify="left")
    for col, just in (("reward", "left"), ("responses", "right"), ("located", "right"),
                      ("mean score", "right"), ("mean credit", "right"), ("top80 share", "right"),
                      ("range", "right"), ("paper", "right")):
        table.add_column(col, justify=just, no_wrap=True)
    for r in rows:
        rng = "-" if r.share_min is None else f"{percent(r.share_min)}-{percent(r.share_max)}"
        table.add_row(r.name if r.name != ALL else f"[bold]{ALL}[/bold]", str(r.responses), str(r.located),
                      _fmt(r.mean_score), _fmt(r.mean_credit, signed=True), percent(r.share_mean), rng,
                      paper_figure(task, r.name) or "")
    return table


def render(console: Console, records: Sequence[CreditRecord], *, summary_of: Sequence[CreditRecord] | None = None,
           task: str | None = None, model: str | None = None, heading: str = "", note: str = "") -> None:
    """Print every record (one line per reward), then the summary table of `summary_of`
    (default: the same records)."""
    if heading:  # model paths and task names: printed as they are, not read as markup
        console.print(heading, style="bold", highlight=False, markup=False)
    if note:
        console.print(note, style="yellow", highlight=False, markup=False)
    for rec in records:
        console.print(Rule(rec.label(), align="left", style="dim"))
        console.print(record_table(rec))
    console.print()
    console.print(summary_table(records if summary_of is None else summary_of, task))
    console.print(Group(*concentration_notes(model)), style="dim", highlight=False)


def concentration_notes(model: str | None) -> list[Text]:
    what = Text(f"top80 share: the smallest share of a response's tokens that carries {round(100 * SHARE)}% of "
                "the reward's JS distance (and so of its credit), averaged over the responses where the "
                "distance is not all zero ('located'); 'range' is its smallest and largest value.")
    ours = Text(f"These figures were measured with {model or 'our model'} on these completions; they "
                f"are not the paper's. {PAPER_NOTE}")
    return [what, ours]
