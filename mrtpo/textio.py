"""Text that always encodes, and output files written whole.

Model output is data, and data may hold what UTF-8 cannot encode: a lone surrogate (the JSON
escape `\\ud800` in a tool call or SQL literal decodes to one). Scoring reads it as it is; only
where text leaves Python does it need care:
- `json_text` writes JSON that stays valid UTF-8: a lone surrogate becomes its `\\uXXXX` escape,
  so reading the JSON back gives the same string;
- `scrub` replaces lone surrogates with U+FFFD for what cannot carry them: a terminal, a
  tokenizer (Hugging Face tokenizers raise an opaque TypeError on them);
- `write_text_atomic` writes a command's output file (`eval --out`, `credit --html`) with
  `mrtpo.harness.runfiles.write_atomic` (a temporary file beside it, renamed into place), so an
  error never leaves a partial file; a path that cannot be written raises `OutputPathError`
  naming it and saying why (`runfiles.unwritable`).
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD (the replacement character)."""
    return _LONE_SURROGATE.sub("\ufffd", text) if isinstance(text, str) else text


def scrub_all(obj: Any) -> Any:
    """`obj` with `scrub` applied to every string in it (dict keys and values, list and tuple
    items, dataclass fields); anything else is returned as it is."""
    if isinstance(obj, str):
        return scrub(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: scrub_all(getattr(obj, f.name))
                                           for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, dict):
        return {scrub_all(k): scrub_all(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [scrub_all(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(scrub_all(v) for v in obj)
    return obj


def escape_surrogates(json_str: str) -> str:
    """A JSON document (from `json.dumps(..., ensure_ascii=False)`) with each lone surrogate,
    which can only stand inside a string literal there, written as its `\\uXXXX` escape."""
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json_str)


def json_text(obj: Any, **kwargs) -> str:
    """`json.dumps(obj, ensure_ascii=False, **kwargs)`, encodable as UTF-8 whatever `obj` holds."""
    return escape_surrogates(json.dumps(obj, ensure_ascii=False, **kwargs))


class OutputPathError(ValueError):
    """An output path that cannot be written: names it, says why and what to do."""


def check_writable(path: str | Path, what: str = "output file") -> Path:
    """Raise `OutputPathError` now where `write_text_atomic(path, ...)` would fail on the path
    (a directory, a path under a file, a directory that refuses new files, e.g. /proc), so a long
    command (`eval --model`) stops before its work, not after. Creates missing parent
    directories and tries a temporary file there, which it removes."""
    from mrtpo.harness.runfiles import write_atomic

    path = Path(path)
    if path.is_dir():
        example = path / ("results.jsonl" if "JSONL" in what else "out.html")
        raise OutputPathError(f"{path}: is a directory; give the {what} a file name, e.g. {example}")
    if _written_in_place(path):
        return path
    probe = path.parent / f".{path.name}.mrtpo-write-check"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(probe, "")
        probe.unlink()
    except OSError as exc:
        raise _unwritable(path, what, exc) from None
    return path


def _written_in_place(path: Path) -> bool:
    """True for a link or an existing non-regular file (/dev/stdout, /dev/null, a pipe): written
    through, as `open(path, "w")` does, since renaming a file over it would replace the link or
    the device itself."""
    return path.is_symlink() or (path.exists() and not path.is_file())


def _unwritable(path: Path, what: str, exc: OSError) -> OutputPathError:
    from mrtpo.harness.runfiles import unwritable

    return OutputPathError(f"{path}: cannot write the {what} there ({unwritable(path, exc)}); "
                           "choose a path in a writable directory")


def write_text_atomic(path: str | Path, text: str, what: str = "output file") -> Path:
    """Write `text` (UTF-8) to `path` whole or not at all (`mrtpo.harness.runfiles.write_atomic`:
    a new temporary file beside it, then a rename), creating missing parent directories; a link
    or a device (`--out /dev/stdout`) is written through instead. Raises `OutputPathError` as
    `check_writable` does, naming the path and why."""
    from mrtpo.harness.runfiles import write_atomic

    path = Path(path)
    data = text.encode("utf-8")  # a lone surrogate raises here, before anything is written
    check_writable(path, what)
    try:
        if _written_in_place(path):
            with open(path, "wb") as f:
                f.write(data)
        else:
            write_atomic(path, text)
    except OSError as exc:
        raise _unwritable(path, what, exc) from None
    return path
