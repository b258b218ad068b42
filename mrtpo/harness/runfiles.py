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
import os
from pathlib import Path

from mrtpo.harness.errors import ConfigError
from mrtpo.textio import unwritable

#: what `mrtpo train` writes into a run directory (files, then the checkpoints directory)
RUN_FILES = ("config.yaml", "metrics.jsonl", "completions.jsonl", "heldout.json", ".wandb_run_id")
CHECKPOINTS = "checkpoints"
CHECKPOINT_FILES = ("latest", "run-id")  # mrtpo.harness.checkpoints.LATEST, RUN_ID


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
