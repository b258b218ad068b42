"""Progress for long commands: a rich bar on a terminal, plain lines in a log.

Piped output (nohup, Slurm, CI) shows nothing of a rich bar until the end, so when stderr is
not a terminal the commands print plain lines instead, as TRL and transformers do: one when a
phase starts, then at most one every `MRTPO_PROGRESS_SECONDS` seconds (default 10) and one at
the end of the phase, each with the count, the rate, the ETA and a note (the rewards, the loss):

    train: step 3/40 | 9.41 s/step | ETA 5m48s | reward 1.234 | format 0.50 | schema 0.61

`lines_wanted(console)` is the switch (rich's `is_terminal`, which also honours
FORCE_TERMINAL / TTY_COMPATIBLE); `PlainProgress` prints the lines.
"""
from __future__ import annotations

import os
import sys
import time
from typing import TextIO


def lines_wanted(console=None) -> bool:
    """True when progress should be plain lines: stderr (or `console`) is not a terminal."""
    if console is not None:
        return not console.is_terminal
    from rich.console import Console

    return not Console(stderr=True).is_terminal


def interval() -> float:
    try:
        return max(0.0, float(os.environ.get("MRTPO_PROGRESS_SECONDS", "10")))
    except ValueError:
        return 10.0


def eta(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


class PlainProgress:
    """Plain progress lines for one phase of `total` units (steps, responses, batches).

    `update(done, note)` prints when the phase starts, at most once per `every` seconds, and
    when `done` reaches `total`. Rate and ETA count from the first update (so a resumed run's
    earlier steps, or a load before it, do not skew them).
    """

    def __init__(self, label: str, total: int, unit: str = "step", every: float | None = None,
                 stream: TextIO | None = None, clock=time.monotonic):
        self.label, self.total, self.unit = label, total, unit
        self.every = interval() if every is None else every
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self._start: tuple[float, int] | None = None  # (time, done) at the first update
        self._last_print = -float("inf")

    def line(self, text: str) -> None:
        print(f"{self.label}: {text}", file=self.stream, flush=True)

    def update(self, done: int, note: str = "") -> None:
        now = self.clock()
        if self._start is None:
            self._start = (now, done)
        elif done < self.total and now - self._last_print < self.every:
            return
        self._last_print = now
        t0, d0 = self._start
        parts = [f"{self.unit} {done}/{self.total}"]
        if done > d0:
            rate = (now - t0) / (done - d0)
            parts += [f"{rate:.2f} s/{self.unit}", f"ETA {eta(rate * (self.total - done))}"]
        if note:
            parts.append(note)
        self.line(" | ".join(parts))
