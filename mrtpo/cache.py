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
