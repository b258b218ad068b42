"""A heatmap figure of one completion: rewards down, tokens across, colour = token weight.

Needs matplotlib (`pip install 'mrtpo[plot]'`). Long responses are cut into panels of
`per_panel` tokens stacked top to bottom, so token labels stay readable; at most `MAX_TOKENS`
tokens are drawn (a 200,000-token completion would take minutes and gigabytes: issue 40,
item 7), and the title says how many were left out. Drawn on a plain
`Figure` with the Agg canvas: no pyplot state, no display needed.
"""
from __future__ import annotations

from pathlib import Path

from mrtpo.credit.records import CreditError, CreditRecord
from mrtpo.credit.terminal import shown


def _matplotlib():
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise CreditError("--png needs matplotlib: pip install 'mrtpo[plot]' (or pip install matplotlib)") from None
    return Figure, FigureCanvasAgg


def _label(token: str) -> str:
    """A token as a tick label: visible line breaks, and `$` escaped (matplotlib reads $..$ as math)."""
    return shown(token).replace("$", r"\$")


#: tokens one heatmap draws at most (22 panels of 48)
MAX_TOKENS = 1056


def heatmap(rec: CreditRecord, path: str | Path, per_panel: int = 48, dpi: int = 120) -> Path:
    """Write the heatmap of `rec`'s token weights [K, T] to `path` (format from its suffix): its
    first MAX_TOKENS tokens, the title saying what was cut."""
    if rec.token_weights is None:
        raise CreditError(f"example {rec.example_id}: this completion has no token weights (the run had "
                          "MRTPO off); there is nothing to draw")
    import numpy as np

    Figure, Canvas = _matplotlib()
    total = len(rec.tokens)
    w = np.asarray([row[:MAX_TOKENS] for row in rec.token_weights], dtype=float)  # [K, T]
    if w.ndim != 2 or w.shape[1] == 0:
        raise CreditError(f"example {rec.example_id}: the response has no tokens; there is nothing to draw")
    k, t = w.shape
    panels = max(1, -(-t // per_panel))
    width = min(t, per_panel)
    fig = Figure(figsize=(3.2 + 0.26 * width, 0.9 + panels * (0.9 + 0.32 * k)), dpi=dpi)
    Canvas(fig)
    axes = fig.subplots(panels, 1, squeeze=False)[:, 0]
    vmax = max(float(w.max()), 1e-9)
    labels = [_label(f"{name}  (score {rec.scores[i]:.2f}, credit {rec.credit[i]:+.2f})")
              for i, name in enumerate(rec.reward_names)]
    image = None
    for p, ax in enumerate(axes):
        lo, hi = p * per_panel, min(t, (p + 1) * per_panel)
        block = np.full((k, per_panel), np.nan)  # [K, per_panel]; the last panel's tail left blank
        block[:, :hi - lo] = w[:, lo:hi]
        image = ax.imshow(block, aspect="auto", cmap="viridis", vmin=0.0, vmax=vmax, interpolation="nearest")
        ax.set_yticks(range(k), labels, fontsize=8)
        ax.set_xticks(range(hi - lo), [_label(tok) for tok in rec.tokens[lo:hi]], rotation=90, fontsize=7)
        ax.set_xlim(-0.5, per_panel - 0.5 if panels > 1 else hi - lo - 0.5)
        ax.tick_params(length=0)
    cut = f"  (the first {t:,} of {total:,} tokens)" if total > t else ""
    axes[0].set_title(_label(rec.label() + cut), fontsize=9, loc="left")
    fig.colorbar(image, ax=list(axes), label="token weight (q / mean q; mean 1)", fraction=0.025, pad=0.01)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    return path
