"""Writing into a run directory without following links, and saying why a path cannot be written.

A run directory may be shared, copied or prepared by someone else, so any of its entries can be
a symbolic link (or a hard link) to a file elsewhere. Writing through one would overwrite that
file: `mrtpo train` must never do it. So:

- `check_run_dir` refuses, before a run writes anything, a run directory whose run files
  (`config.yaml`, `metrics.jsonl`, `completions.jsonl`, `heldout.json`, `.wandb_run_id`,
  `checkpoints/` and its `latest`, `run-id` and `step-*`; leftovers of an interrupted save are
  removed, not written) are links or of the wrong kind, naming the entry and what to do;
- `open_append` and `write_atomic` never follow a link at the moment they write (`O_NOFOLLOW`;
  a new temporary file is created with `O_EXCL`, then renamed over the target, which replaces
  a link instead of writing through it), so a link planted during a run is not followed either.

New files get the usual permissions (0666 less the umask), as `open` gives them, and
`new_temp_dir` makes a temporary directory with the usual 0777 less the umask (tempfile.mkdtemp
makes it 0700, which a directory renamed into place, a checkpoint or an export, would keep).
`unwritable(path, exc)` words an OSError about an output path for a one-line message.
`write_atomic`, `new_temp_dir` and `unwritable` live in `mrtpo.textio` (every command's output
files use them); the run's writers import them from there.
"""
from __future__ import annotations

import errno
import json
import logging
import math
import os
from pathlib import Path
from typing import Any, Iterable

import torch

from mrtpo import textio
from mrtpo.harness.errors import ConfigError
from mrtpo.textio import unwritable, write_atomic

log = logging.getLogger(__name__)

#: what `mrtpo train` writes into a run directory (files, then the checkpoints directory)
RUN_FILES = ("config.yaml", "metrics.jsonl", "completions.jsonl", "heldout.json", ".wandb_run_id")
CHECKPOINTS = "checkpoints"
CHECKPOINT_FILES = ("latest", "run-id")  # mrtpo.harness.run.checkpoints.LATEST, RUN_ID


class RunFileError(ConfigError):
    """A run directory entry that mrtpo will not write (a link, a directory for a file...)."""


def _link_message(path: Path) -> str:
    return (f"{path} is a symbolic link (to {os.readlink(path)}); mrtpo never writes through a "
            "link in a run directory, since that would overwrite the file it points to. Remove "
            "the link (or replace it with the file itself), or choose another --output-dir")


def check_entry(path: Path, kind: str = "file") -> None:
    """Raise RunFileError if `path` exists and is a symbolic link, or is not a `kind`
    ("file" or "directory"); a path that does not exist is fine (the run creates it)."""
    if path.is_symlink():
        raise RunFileError(_link_message(path))
    if not path.exists():
        return
    if kind == "file" and not path.is_file():
        raise RunFileError(f"{path} is not a regular file (a directory or a device); mrtpo writes "
                           "the run's own file there. Move it away, or choose another --output-dir")
    if kind == "directory" and not path.is_dir():
        raise RunFileError(f"{path} is not a directory; mrtpo keeps the run's checkpoints there. "
                           "Move it away, or choose another --output-dir")


def check_run_dir(run_dir: Path) -> None:
    """Refuse a run directory whose run files are links or of the wrong kind (see the module
    docstring), before the run writes into it."""
    run_dir = Path(run_dir)
    for name in RUN_FILES:
        check_entry(run_dir / name)
    root = run_dir / CHECKPOINTS
    check_entry(root, "directory")
    if root.is_dir():  # what a save writes: the pointer, the fingerprint, the step directories
        for entry in sorted(root.iterdir()):
            if entry.name in CHECKPOINT_FILES:
                check_entry(entry)
            elif entry.name.startswith("step-"):
                check_entry(entry, "directory")


def open_append(path: Path):
    """`open(path, "a")` (text, UTF-8) that refuses a symbolic link instead of following it."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RunFileError(_link_message(path)) from None
        raise RunFileError(f"cannot append to {path}: {unwritable(path, exc)}") from None
    return os.fdopen(fd, "a", encoding="utf-8")


class LogError(ConfigError):
    """A run log (metrics.jsonl, completions.jsonl) with a line that cannot be read back."""


class JsonlLog:
    """Append-only JSONL file with a `step` field; `truncate_after(step)` drops later lines.

    On resume the lines written after the checkpoint are dropped, so the file reads as if the
    run had never stopped. Every line must be a JSON object with an integer `step`; a bad line
    raises LogError naming the file and the line (a torn last line is dropped with a warning).
    Writes never follow a symbolic link (mrtpo.harness.run.files); `truncate_after` rewrites the
    file atomically.
    """

    def __init__(self, path: Path):
        self.path = Path(path)

    def truncate_after(self, step: int) -> None:
        if not self.path.exists():
            return
        keep = [line for line, row in self._rows() if row["step"] <= step]
        write_atomic(self.path, "".join(line + "\n" for line in keep))

    def write(self, rows: Iterable[dict[str, Any]]) -> None:
        with open_append(self.path) as f:
            for row in rows:
                f.write(json.dumps(row, allow_nan=False, default=_jsonable) + "\n")

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [row for _, row in self._rows()]

    def _rows(self) -> list[tuple[str, dict[str, Any]]]:
        """(line, parsed row) for every line. A last line that does not parse (a crash
        mid-append tore it) is dropped with a warning; a bad line before it, or a line that
        parses but is not an object with an integer step, is an error."""
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise LogError(f"{self.path}: cannot be read ({exc.strerror or exc})") from None
        lines = text.split("\n")
        out = []
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = textio.loads(line)
            except ValueError as exc:
                if all(not rest.strip() for rest in lines[n:]):
                    log.warning("%s, line %d: dropping a torn last line (%d characters; the run "
                                "stopped while writing it)", self.path, n, len(line))
                    continue
                raise LogError(f"{self.path}, line {n}: not valid JSON ({exc}); only a torn last "
                               "line is dropped on its own; fix or remove this line") from None
            step = row.get("step") if isinstance(row, dict) else None
            if not isinstance(step, int) or isinstance(step, bool) or step < 0:
                what = (f'its "step" is {step!r}, not a step number' if isinstance(row, dict)
                        else f"it is a JSON {type(row).__name__}, not an object with a step")
                raise LogError(f"{self.path}, line {n}: {what}; every line of a run log is one "
                               "step's record; fix or remove this line")
            out.append((line, row))
        return out


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _jsonable(x):
    if isinstance(x, torch.Tensor):
        return x.tolist()
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")


def clean(record: dict[str, Any]) -> dict[str, Any]:
    """NaN/inf -> None so every line is strict JSON."""
    return {k: (_finite(v) if isinstance(v, float) else v) for k, v in record.items()}
