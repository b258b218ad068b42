"""Reading dataset and responses files: UTF-8 text with the bad line named, JSON lines split
on line feeds only.

Every `--data` and `--responses` reader goes through here, so the same file gives the same
error whichever task or command reads it:
- a file that is not UTF-8 is refused naming the file, the line, the column and the byte, with
  the command that converts it (a UTF-8 byte-order mark is accepted and dropped);
- a directory where a file is expected, or a missing file, is named as such;
- JSON Lines are split on "\\n" only (a trailing "\\r" is dropped), as the JSON Lines format
  defines them: `str.splitlines` would also split at U+2028, U+2029, U+0085, "\\x0b", "\\x0c",
  "\\x1c"-"\\x1e" and a lone "\\r", which JSON allows raw inside a string.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator


def read_text(path: str | Path, error: type[Exception] = ValueError, what: str = "file") -> str:
    """The text of `path`, decoded as UTF-8; `error(message)` on a missing file, a directory
    or bytes that are not UTF-8 (the message names the file, line and column)."""
    p = Path(path)
    if p.is_dir():
        raise error(f"{p}: is a directory; pass a {what} (a file), not a directory")
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise error(f"{p}: no such file") from None
    except OSError as exc:
        raise error(f"{p}: cannot be read ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        start = exc.start + (3 if data.startswith(b"\xef\xbb\xbf") else 0)
        line = data.count(b"\n", 0, start) + 1
        column = start - (data.rfind(b"\n", 0, start) + 1) + 1
        raise error(f"{p}, line {line}: not UTF-8 text (byte 0x{data[start]:02x} at column "
                    f"{column}); save the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 {p} > "
                    f"{p.stem}.utf8{p.suffix}`") from None


def lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) for each non-blank line, split on "\\n" only."""
    for n, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if line.strip():
            yield n, line


def json_lines(path: str | Path, error: type[Exception] = ValueError,
               what: str = "JSONL file") -> Iterator[tuple[int, object]]:
    """(line number, parsed value) for each non-blank line of a JSON Lines file."""
    for n, line in lines(read_text(path, error, what)):
        try:
            yield n, json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{path}, line {n}: not valid JSON ({exc}); each line must be one JSON "
                        "object") from None
