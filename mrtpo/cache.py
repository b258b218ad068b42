"""The one cache root mrtpo writes into: built text-to-SQL databases and built-in policies.

`$MRTPO_CACHE_DIR`, else `$XDG_CACHE_HOME/mrtpo`, else `~/.cache/mrtpo`. Each user of the
cache keeps its own subfolder (`text2sql/`, `models/`).
"""
from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "MRTPO_CACHE_DIR"


def cache_dir() -> Path:
    """The cache root named by the environment (see the module docstring)."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "mrtpo"


class CacheError(ValueError):
    """A cache root (or a folder in it) that cannot be used; the message says what to do."""


def ensure_dir(path: str | Path) -> Path:
    """`path` (a folder in the cache) made if missing; a root that is a file (`--cache-dir FILE`,
    `MRTPO_CACHE_DIR=/dev/null`) or cannot be written is a CacheError in one line."""
    from mrtpo.textio import unwritable

    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not path.is_dir():
            raise NotADirectoryError(20, "Not a directory", str(path))
    except OSError as exc:
        raise CacheError(f"cannot use the cache folder {path}: {unwritable(path, exc, directory=True)}; point "
                         f"--cache-dir or ${ENV_VAR} at a directory you can write") from None
    return path


def pid_alive(pid: int) -> bool:
    """Whether process `pid` still runs (a leftover whose builder is gone may be removed)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):
        return False
    return True
