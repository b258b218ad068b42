"""`mrtpo credit`: where each reward's credit lands on a response's tokens.

statistics.py (pure: concentration of a reward's distance on few tokens, summaries),
records.py (credit records from a run's completions log, or computed fresh through the
replay engine), terminal.py (rich view: tokens shaded by each reward's weight), text_view.py
(plain lines for a file or a pipe, and the `--json` document), html.py (one self-contained
page), png.py (a matplotlib heatmap; the optional `plot` extra).

Nothing heavy is imported here: the trainer's metrics import `statistics` on every step.
"""
